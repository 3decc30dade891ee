#!/usr/bin/env bash
# `make pipeline`: .gitlab-ci.yml's jobs run by gitlab-ci-local on this
# machine, against real parts of it, as the pipeline of a release tag
# ($PIPELINE_TAG, default v<the version in Chart.yaml and the apps>) pushed
# on HEAD:
#   run   1. a registry (Debian's docker-registry) on port $PIPELINE_REGISTRY_PORT,
#            empty, as the project's registry (CI_REGISTRY_IMAGE);
#         2. the pipeline: lint and release-check, test-unit, test-cluster and
#            test-compat (Kubernetes 1.35),
#            build-image (pushes :<commit>, an index of the linux/amd64 and
#            linux/arm64 images, to that registry), e2e-kind (KinD
#            cluster $KIND_CLUSTER whose nodes pull the images from that
#            registry), then the release once every test job passed: promote
#            (the tested digests as :vX.Y.Z and :X.Y.Z), sign (each digest
#            signed with a key pair made for this run, its SBOM attached),
#            publish-charts, gitlab-release; the manual deploy waits. A failed job stops here
#            (exit 1), after every job that could run did;
#         3. production, as an admin sets it up once: the e2e's helm release
#            leaves the cluster (Argo CD will own the same objects), Argo CD
#            is installed into it (scripts/argocd.sh install), a git server
#            (git daemon on the cluster network's gateway) serves the commit
#            under test (argocd/ naming that server) and a platform's values
#            repository (the images from this registry), the cluster is
#            labelled for both charts and annotated with the charts
#            publish-charts pushed (this registry, the tag's version) and
#            that repository, and argocd/ is applied (kubectl apply -k):
#            Argo CD deploys the released charts from then on;
#         4. the deploy job, requested by hand (gitlab-ci-local --manual deploy),
#            syncs the root Application through that Argo CD (--core) and
#            waits until both Applications are Synced and Healthy.
#         Then everything it started is stopped (down), unless PIPELINE_KEEP=1.
#   down  stop and remove what run started: the KinD cluster (unless it was
#         there before the run: make test's KinD stage made it, with the
#         registry in its containerd's config), git daemon, registry (and its
#         data), the pushed images' tags in the local Docker.
#
# Every job runs in gitlab-ci-local's shell executor (--force-shell-executor):
# no job image can be pulled here; the tools they need are this machine's
# (.cache/bin, .venv, Docker). Records for tests/pipeline: $PIPELINE_DIR
# (pipeline.log and deploy.log: gitlab-ci-local's output; registry.log: the
# registry's access log; commit: the short sha the pipeline ran at; tag;
# cosign/cosign.pub: the public key the sign job's signatures verify with).
# The jobs' JUnit reports land in .cache/junit, a failed e2e's KinD logs in
# .cache/kind-logs (both emptied first).
# Env: KIND_CLUSTER (gpu-scheduler-pipeline), PIPELINE_TAG (v<version>),
#      PIPELINE_REGISTRY_PORT (5001), PIPELINE_GIT_PORT (9419),
#      PIPELINE_KEEP (0), LOCAL_APISERVER_PORT (passed to the test-cluster job),
#      PIPELINE_TEST_SELECTION: the jobs' TEST_SELECTION (.gitlab-ci.yml), a
#      pytest -k expression each test job adds to its own selection; unset,
#      every test runs, as on GitLab.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export KIND_CLUSTER="${KIND_CLUSTER:-gpu-scheduler-pipeline}"
export KIND_KUBECONFIG="$CACHE_DIR/kind/$KIND_CLUSTER.kubeconfig"
REGISTRY_PORT="${PIPELINE_REGISTRY_PORT:-5001}"
GIT_PORT="${PIPELINE_GIT_PORT:-9419}"
REGISTRY="127.0.0.1:$REGISTRY_PORT"
REGISTRY_IMAGE="$REGISTRY/gpu-scheduler"
PIPELINE_DIR="$CACHE_DIR/pipeline"
GITLAB_CI_LOCAL="$CACHE_DIR/npm/node_modules/.bin/gitlab-ci-local"
# The project's default branch, and the release tag the pipeline runs for.
DEFAULT_BRANCH=main
TAG="${PIPELINE_TAG:-v$(python3 "$REPO_ROOT/scripts/version.py")}"
# GitLab's CI_COMMIT_REF_SLUG of the tag: lower case, [a-z0-9-], at most 63.
TAG_SLUG="$(printf '%s' "$TAG" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-' | cut -c1-63 | sed 's/^-*//; s/-*$//')"
# What both charts' image.registry says: release-check compares it with the
# registry the pipeline pushes to. A user sets it to theirs before tagging
# (docs/install.md); this run keeps the work tree's and names it, so that
# release-check passes on the tree as it is.
CHARTS_REGISTRY="$(sed -n 's/^  registry: *"\{0,1\}\([^" #]*\).*/\1/p' "$REPO_ROOT/charts/gpu-scheduler/values.yaml" | head -1)"
export PATH="$BIN_DIR:$REPO_ROOT/.venv/bin:$PATH"

kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KIND_KUBECONFIG" "$@"; }

# ---- the registry ----------------------------------------------------------

ensure_registry_binary() {
  command -v docker-registry >/dev/null 2>&1 && return
  # Or the distribution registry 2.x on PATH as docker-registry.
  apt_install "docker-registry is missing (make pipeline's local registry)" docker-registry
}

# start_registry: an empty registry on every address of this host (pushes
# come over loopback, which Docker allows over plain HTTP; the KinD nodes come
# over their network's gateway), no credentials.
start_registry() {
  ensure_registry_binary
  if curl -fsS -o /dev/null "http://$REGISTRY/v2/" 2>/dev/null; then
    die "something answers on $REGISTRY already: stop it ('scripts/pipeline.sh down' if it is ours) or set PIPELINE_REGISTRY_PORT"
  fi
  rm -rf "$PIPELINE_DIR/registry"
  mkdir -p "$PIPELINE_DIR/registry/data"
  cat >"$PIPELINE_DIR/registry/config.yml" <<EOF
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: $PIPELINE_DIR/registry/data
  delete:
    enabled: true
http:
  addr: 0.0.0.0:$REGISTRY_PORT
EOF
  setsid docker-registry serve "$PIPELINE_DIR/registry/config.yml" >"$PIPELINE_DIR/registry.log" 2>&1 </dev/null &
  echo $! >"$PIPELINE_DIR/registry.pid"
  local deadline=$((SECONDS + 30))
  until curl -fsS -o /dev/null "http://$REGISTRY/v2/" 2>/dev/null; do
    kill -0 "$(cat "$PIPELINE_DIR/registry.pid")" 2>/dev/null ||
      { cat "$PIPELINE_DIR/registry.log" >&2; die "docker-registry exited (log above)"; }
    ((SECONDS < deadline)) || die "docker-registry does not answer on $REGISTRY after 30s ($PIPELINE_DIR/registry.log)"
    sleep 0.5
  done
  log "pipeline: registry $(docker-registry --version | awk '{print $3}') on $REGISTRY (pid $(cat "$PIPELINE_DIR/registry.pid"), data $PIPELINE_DIR/registry/data)"
}

# stop_pid FILE NAME: stop the process whose pid FILE holds, if it still runs.
stop_pid() {
  local file="$1" name="$2" pid
  [[ -f "$file" ]] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    local deadline=$((SECONDS + 15))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "pipeline: stopped $name (pid $pid)"
  fi
  rm -f "$file"
}

# make_signing_key: a cosign key pair of this run, as a project keeps its own
# in CI/CD variables (COSIGN_PRIVATE_KEY, COSIGN_PASSWORD, COSIGN_PUBLIC_KEY):
# a new one each run, so that a signature of an earlier run never verifies.
make_signing_key() {
  local cosign
  cosign="$("$REPO_ROOT/scripts/signing-tools.sh" cosign)"
  rm -rf "$PIPELINE_DIR/cosign"
  mkdir -p "$PIPELINE_DIR/cosign"
  (cd "$PIPELINE_DIR/cosign" && COSIGN_PASSWORD="$SIGNING_PASSWORD" "$cosign" generate-key-pair >/dev/null 2>&1) ||
    die "cosign generate-key-pair failed in $PIPELINE_DIR/cosign"
}

# ---- gitlab-ci-local -------------------------------------------------------

# The password of this run's signing key (make_signing_key).
SIGNING_PASSWORD="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

# The CI/CD variables a GitLab project would have, for this machine. Given
# as --variable: gitlab-ci-local lets those outrank its own predefined values
# (CI_REGISTRY*, the branch) and the jobs' variables, as GitLab lets a
# pipeline's variables outrank the YAML's.
PIPELINE_VARIABLES=(
  # Where the jobs run: this work tree. gitlab-ci-local's shell executor runs
  # them here but names /builds/<group>/<project> otherwise, and the jobs'
  # paths under $CI_PROJECT_DIR (JUnit reports, caches) would land there.
  --variable "CI_PROJECT_DIR=$REPO_ROOT"
  --variable "CI_REGISTRY=$REGISTRY"
  --variable "CI_REGISTRY_IMAGE=$REGISTRY_IMAGE"
  # The pipeline a pushed release tag runs, whatever branch is checked out:
  # GitLab sets no CI_COMMIT_BRANCH then.
  --variable "CI_DEFAULT_BRANCH=$DEFAULT_BRANCH"
  --variable "CI_COMMIT_BRANCH="
  --variable "CI_COMMIT_TAG=$TAG"
  --variable "CI_COMMIT_REF_NAME=$TAG"
  --variable "CI_COMMIT_REF_SLUG=$TAG_SLUG"
  --variable "RELEASE_REGISTRY=$CHARTS_REGISTRY"
  # A registry without TLS (helm push, cosign and syft need to be told).
  --variable "HELM_PUSH_FLAGS=--plain-http"
  --variable "SIGN_PLAIN_HTTP=1"
  # The project's signing key, as File variables hold it (make_signing_key).
  --variable "COSIGN_PRIVATE_KEY=$PIPELINE_DIR/cosign/cosign.key"
  --variable "COSIGN_PASSWORD=$SIGNING_PASSWORD"
  --variable "COSIGN_PUBLIC_KEY=$PIPELINE_DIR/cosign/cosign.pub"
  # e2e-kind's cluster is this machine's production for the deploy job.
  --variable "KIND_CLUSTER=$KIND_CLUSTER"
  --variable "KIND_KEEP=1"
  # Every job shares this work tree's .venv: each installs every group, so
  # that no job's `make install` takes away what the next one needs.
  --variable "INSTALL_GROUPS=test lint bench"
)
if [[ -n "${PIPELINE_TEST_SELECTION:-}" ]]; then
  PIPELINE_VARIABLES+=(--variable "TEST_SELECTION=$PIPELINE_TEST_SELECTION")
fi
# test-cluster keeps Go's caches in the project dir for the runner's cache;
# here the machine's own (content-addressed, shared by every checkout) serve.
if command -v go >/dev/null; then
  PIPELINE_VARIABLES+=(
    --variable "GOMODCACHE=$(go env GOMODCACHE)"
    --variable "GOCACHE=$(go env GOCACHE)"
    --variable "GOFLAGS=$(go env GOFLAGS)"
  )
fi
# The deploy job's, besides those: Argo CD in that cluster in core mode (the
# CLI talks to the Kubernetes API, kubeconfig namespace argocd).
DEPLOY_VARIABLES=(
  --variable "ARGOCD_OPTS=--core"
  --variable "KUBECONFIG=$PIPELINE_DIR/argocd.kubeconfig"
)

# gitlab_ci_local LOG ARGS...: gitlab-ci-local in this work tree, every job in
# the shell executor, one job at a time (2 cores); its output to LOG too.
gitlab_ci_local() {
  local out="$1"
  shift
  local status=0
  (
    cd "$REPO_ROOT"
    "$GITLAB_CI_LOCAL" --force-shell-executor --concurrency 1 --no-color --timestamps \
      --state-dir .cache/pipeline/gitlab-ci-local "${PIPELINE_VARIABLES[@]}" "$@"
  ) 2>&1 | tee "$out" || status=$?
  return "$status"
}

# ---- production: Argo CD and its git server --------------------------------

gateway() {
  docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' | tr ' ' '\n' | grep -m1 '\.'
}

# hand_over_cluster: what the e2e job installed leaves; Argo CD owns it next.
hand_over_cluster() {
  log "pipeline: removing the e2e job's helm release (Argo CD deploys the same objects)"
  "$BIN_DIR/helm" --kubeconfig "$KIND_KUBECONFIG" uninstall gpu-scheduler --namespace gpu-scheduler-system --wait \
    --ignore-not-found >/dev/null
  kubectl delete namespace gpu-scheduler-system gpu-scheduler-check --ignore-not-found --wait=true --timeout=180s >/dev/null
}

# serve_repositories SHORT_SHA: what production reads besides the registry,
# served by git daemon: the commit under test as the project's repository
# (argocd/ naming this git server as the project's URL, on branch `deploy`,
# its HEAD), and a platform's values repository, nothing of this checkout in
# it, whose values file for the cluster names this registry for the images
# (the charts publish-charts pushed name the work tree's registry; their
# image tag stays the release's X.Y.Z). Prints both URLs.
serve_repositories() {
  local sha="$1" work="$PIPELINE_DIR/git/work" served="$PIPELINE_DIR/git/served" platform="$PIPELINE_DIR/git/platform"
  local address url platform_url placeholder chart
  rm -rf "$PIPELINE_DIR/git"
  mkdir -p "$served"
  git clone --quiet --no-checkout "$REPO_ROOT" "$work"
  git -C "$work" checkout --quiet -B deploy "$(git -C "$REPO_ROOT" rev-parse HEAD)"
  address="$(gateway)" || die "the docker network kind has no IPv4 gateway"
  url="git://$address:$GIT_PORT/gpu-scheduler.git"
  platform_url="git://$address:$GIT_PORT/platform.git"
  # The project's own URL in argocd/ (the root Application's source), as its
  # maintainers set it: whatever root.yaml says today, everywhere.
  placeholder="$(sed -n 's/^ *repoURL: *//p' "$work/argocd/root.yaml" | head -1)"
  [[ -n "$placeholder" ]] || die "$work/argocd/root.yaml: no repoURL to set"
  sed -i -e "s|$placeholder|$url|g" "$work"/argocd/*.yaml
  commit_all "$work" "argocd: the project is at $url (make pipeline)"
  git clone --quiet --bare "$work" "$served/gpu-scheduler.git"
  mkdir -p "$platform/clusters/in-cluster"
  for chart in gpu-scheduler gpu-scheduler-check; do
    printf 'global:\n  imageRegistry: %s\n' "$REGISTRY_IMAGE" >"$platform/clusters/in-cluster/values-$chart.yaml"
  done
  git -C "$platform" init --quiet --initial-branch main
  git -C "$platform" add --all
  commit_all "$platform" "in-cluster: images from $REGISTRY_IMAGE (make pipeline)"
  git clone --quiet --bare "$platform" "$served/platform.git"
  git daemon --reuseaddr --export-all --base-path="$served" --listen="$address" --port="$GIT_PORT" \
    --pid-file="$PIPELINE_DIR/git-daemon.pid" --detach "$served"
  local deadline=$((SECONDS + 15))
  until git ls-remote "$url" deploy >/dev/null 2>&1 && git ls-remote "$platform_url" main >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "git daemon does not serve $url and $platform_url"
    sleep 0.5
  done
  echo "$url $platform_url"
}

commit_all() {
  git -C "$1" -c user.name="gpu-scheduler pipeline" -c user.email=pipeline@gpu-scheduler.invalid \
    commit --quiet --all --message "$2"
}

# argocd_kubeconfig: the cluster's kubeconfig with namespace argocd, where
# `argocd --core` looks for its objects.
argocd_kubeconfig() {
  cp "$KIND_KUBECONFIG" "$PIPELINE_DIR/argocd.kubeconfig"
  "$BIN_DIR/kubectl" --kubeconfig "$PIPELINE_DIR/argocd.kubeconfig" config set-context --current --namespace=argocd >/dev/null
}

prepare_production() {
  local sha="$1" repo_url start=$SECONDS
  hand_over_cluster
  log "pipeline: Argo CD into $KIND_CLUSTER (scripts/argocd.sh install)"
  CACHE_DIR="$CACHE_DIR" "$REPO_ROOT/scripts/argocd.sh" install
  local platform_url charts
  read -r repo_url platform_url <<<"$(serve_repositories "$sha")"
  log "pipeline: git daemon serves the release commit (branch deploy, its HEAD) at $repo_url, the values at $platform_url"
  # What publish-charts pushed (oci://$REGISTRY_IMAGE/charts), at the
  # address the pods reach this host at; without TLS, which Argo CD is told.
  charts="$(gateway):$REGISTRY_PORT/gpu-scheduler/charts"
  CACHE_DIR="$CACHE_DIR" "$REPO_ROOT/scripts/argocd.sh" plain-http-registry "$charts"
  # What a platform team does once (docs/install.md): the cluster labelled
  # for both charts and annotated with the release and its values
  # repository, and argocd/ applied. From then on Argo CD deploys the
  # release's charts; the deploy job waits for it.
  CACHE_DIR="$CACHE_DIR" "$REPO_ROOT/scripts/argocd.sh" in-cluster \
    --annotate "gpu-scheduler/chart-registry=$charts" --annotate "gpu-scheduler/chart-version=${TAG#v}" \
    --annotate "gpu-scheduler/values-repo=$platform_url" gpu-scheduler/deploy=true gpu-scheduler/check=true
  kubectl apply -k "$PIPELINE_DIR/git/work/argocd" >/dev/null
  argocd_kubeconfig
  log "pipeline: production ready in $((SECONDS - start))s"
}

# ---- subcommands ------------------------------------------------------------

# passed LOG JOB...: each JOB has gitlab-ci-local's PASS line in LOG.
passed() {
  local out="$1" job missing=()
  shift
  # " PASS  [ 43 s] build-image": the closing lines (--timestamps adds the time).
  for job in "$@"; do grep -qE "^ PASS +(\[[^]]*\] +)?$job *\$" "$out" || missing+=("$job"); done
  ((${#missing[@]} == 0)) || die "jobs without PASS in $out: ${missing[*]}"
}

cmd_run() {
  local start=$SECONDS sha
  [[ -x "$GITLAB_CI_LOCAL" ]] || CACHE_DIR="$CACHE_DIR" "$REPO_ROOT/scripts/fetch-lint-tools.sh"
  [[ -x "$GITLAB_CI_LOCAL" ]] || die "gitlab-ci-local is missing ($GITLAB_CI_LOCAL): make lint-tools (needs npm)"
  command -v git >/dev/null || die "git is missing"
  "$REPO_ROOT/scripts/docker-engine.sh" ensure
  mkdir -p "$PIPELINE_DIR"
  # A new pipeline: no job log or state of an earlier one is left to read.
  rm -rf "$PIPELINE_DIR"/{pipeline,deploy}.log "$PIPELINE_DIR/gitlab-ci-local" "$CACHE_DIR/junit" "$CACHE_DIR/kind-logs"
  if [[ "${PIPELINE_KEEP:-0}" != 1 ]]; then
    trap 'status=$?; cmd_down; exit $status' EXIT
  fi
  # A cluster that is there already is someone else's (make test's KinD
  # stage): e2e-kind reuses it, and `down` leaves it.
  if "$REPO_ROOT/scripts/kind.sh" running; then
    log "pipeline: KinD cluster $KIND_CLUSTER exists: the e2e job and the deploy use it, and it stays after the run"
    echo 1 >"$PIPELINE_DIR/cluster-existed"
  else
    echo 0 >"$PIPELINE_DIR/cluster-existed"
  fi
  # gitlab-ci-local's CI_COMMIT_SHORT_SHA: the first 8 hex digits of HEAD.
  sha="$(git -C "$REPO_ROOT" rev-parse HEAD | cut -c1-8)"
  echo "$sha" >"$PIPELINE_DIR/commit"
  echo "$TAG" >"$PIPELINE_DIR/tag"
  start_registry
  make_signing_key
  log "pipeline: gitlab-ci-local $("$GITLAB_CI_LOCAL" --version): the pipeline of tag $TAG at $sha (lint, test, build, e2e, release; deploy is manual)"
  gitlab_ci_local "$PIPELINE_DIR/pipeline.log" || die "the pipeline failed ($PIPELINE_DIR/pipeline.log, above)"
  passed "$PIPELINE_DIR/pipeline.log" lint release-check test-unit test-cluster build-image e2e-kind \
    promote sign publish-charts gitlab-release
  log "pipeline: lint, test, build, e2e and the release of $TAG passed in $((SECONDS - start))s; preparing production for the manual deploy"
  prepare_production "$sha"
  log "pipeline: deploy, requested by hand (--manual deploy)"
  gitlab_ci_local "$PIPELINE_DIR/deploy.log" "${DEPLOY_VARIABLES[@]}" --manual deploy deploy || die "the deploy job failed ($PIPELINE_DIR/deploy.log, above)"
  passed "$PIPELINE_DIR/deploy.log" deploy
  log "pipeline: every job passed in $((SECONDS - start))s"
}

# forget_pulled_images: the images the nodes of a kept cluster pulled from
# this run's registry, removed from their containerd (running containers keep
# theirs), so that the next run's nodes pull them again: its registry starts
# empty, and its records must show the pulls. Every record of the same
# content goes, not only those named after the registry: the CRI plugin also
# names each pulled image by its config digest (sha256:<id>), and that record
# alone keeps the index and its manifests in the node's content store. The
# next run of the same commit pushes the same index (build-image rebuilds it
# from Docker's layer cache), so a node keeping the content would only
# resolve the tag (a HEAD) and fetch nothing.
FORGET_AWK='NR > 1 { ref[NR] = $1; digest[NR] = $3; if (index($1, prefix) == 1) ours[$3] = 1 }
END { for (i in ref) if (digest[i] in ours) print ref[i] }'
forget_pulled_images() {
  local container removed
  for container in $(docker ps --filter "label=io.x-k8s.kind.cluster=$KIND_CLUSTER" --format '{{.Names}}'); do
    # shellcheck disable=SC2016 # expanded by the node's shell
    if removed="$(docker exec "$container" sh -c \
      'refs="$(ctr -n k8s.io images ls | awk -v prefix="$0/" "$1")" || exit 1
      [ -z "$refs" ] || echo "$refs" | xargs ctr -n k8s.io images rm --sync >/dev/null || exit 1
      echo "$refs"' "$REGISTRY_IMAGE" "$FORGET_AWK")"; then
      log "pipeline: node $container forgot $(grep -c . <<<"$removed") image records of $REGISTRY_IMAGE's content ($(grep -c '^sha256:' <<<"$removed") by config digest)"
    else
      log "pipeline: could not remove $REGISTRY_IMAGE/* from node $container (above)"
    fi
  done
}

cmd_down() {
  local start=$SECONDS image tag
  log "pipeline: down"
  stop_pid "$PIPELINE_DIR/git-daemon.pid" "git daemon"
  stop_pid "$PIPELINE_DIR/registry.pid" "docker-registry"
  if docker info >/dev/null 2>&1; then
    if [[ "$(cat "$PIPELINE_DIR/cluster-existed" 2>/dev/null)" == 1 ]]; then
      forget_pulled_images
      log "pipeline: KinD cluster $KIND_CLUSTER was there before the run: left running"
    else
      CACHE_DIR="$CACHE_DIR" KIND_CLUSTER="$KIND_CLUSTER" "$REPO_ROOT/scripts/kind.sh" down
    fi
    # The tags build-image made; their layers are the dev images' and its
    # own build-<arch> images' too (scripts/publish-images.sh).
    for image in gpu-scheduler gpu-scheduler-check; do
      for tag in $(docker image ls --format '{{.Tag}}' "$REGISTRY_IMAGE/$image"); do
        docker rmi "$REGISTRY_IMAGE/$image:$tag" >/dev/null || true
      done
    done
  fi
  rm -rf "$PIPELINE_DIR/registry/data" "$PIPELINE_DIR/git" "$PIPELINE_DIR/cluster-existed" "$PIPELINE_DIR/cosign"
  log "pipeline: down in $((SECONDS - start))s"
}

case "${1:-run}" in
  run) cmd_run ;;
  down) cmd_down ;;
  *) die "usage: $0 [run|down]" ;;
esac

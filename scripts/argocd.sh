#!/usr/bin/env bash
# Argo CD built here from Go modules and run in the KinD cluster, where users
# run it. One subcommand per step (make argocd-* targets):
#   binary     build the argocd binary (cluster/argocd/go.mod), version-stamped,
#              into the machine's build store (lib.sh: BUILD_STORE), named by
#              a hash of its inputs, so that every clone shares it. Prints its
#              path; .cache/bin/argocd points at it (the CLI).
#   images     docker build the argocd image (that binary, git, ssh, helm,
#              kustomize) and
#              a redis image (Debian's redis-server) on the offline Debian base;
#              tagged by a hash of their inputs. Prints both references.
#   install    images into the first worker of the KinD cluster (scripts/kind.sh
#              load-missing), Argo CD's CRDs from its module, then
#              cluster/argocd/install with every component on that node;
#              waits until every component runs. Idempotent.
#   uninstall  remove what install made (namespace argocd, CRDs, cluster RBAC)
#   in-cluster [--annotate KEY=VALUE]... LABEL=VALUE...  register the cluster
#              Argo CD runs in, with these labels (the ApplicationSet picks
#              clusters by label) and annotations (what it deploys there)
#   plain-http-registry HOST[:PORT]/PATH  a repository Secret: Argo CD pulls
#              Helm charts from that OCI registry over plain HTTP
#   e2e        the Argo CD tests (tests/argocd, marker argocd); their fixture
#              runs install, builds and loads our images, pushes the charts to
#              a local OCI registry, serves this checkout and a platform's
#              values repository with git daemon and applies argocd/; it
#              removes the apps after
# Env: KIND_CLUSTER (gpu-scheduler), KIND_KUBECONFIG (.cache/kind/kubeconfig).
#
# Argo CD's go.mod points its gitops-engine at a folder of its repository
# that the module does not contain; cluster/argocd/go.mod takes the newest
# pseudo-version the Go module proxy has instead. The binary is therefore not
# the exact code of the release: `argocd version` says so (ExtraBuildInfo).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE_DIR="$REPO_ROOT/cluster/argocd"
INSTALL_DIR="$MODULE_DIR/install"
WORK_DIR="$CACHE_DIR/argocd"
CLUSTER="${KIND_CLUSTER:-gpu-scheduler}"
export KIND_KUBECONFIG="${KIND_KUBECONFIG:-$CACHE_DIR/kind/kubeconfig}"
NAMESPACE=argocd
ARGOCD_MODULE=github.com/argoproj/argo-cd/v3
ARGOCD_VERSION="$(mod_version "$MODULE_DIR/go.mod" "$ARGOCD_MODULE")"
GITOPS_ENGINE_VERSION="$(awk '$1 == "replace" && $2 == "github.com/argoproj/argo-cd/gitops-engine" { print $5 }' "$MODULE_DIR/go.mod")"
ARGOCD_IMAGE_REPOSITORY=gpu-scheduler-argocd
REDIS_IMAGE_REPOSITORY=gpu-scheduler-argocd-redis
ROLLOUT_TIMEOUT="${ARGOCD_ROLLOUT_TIMEOUT:-600}"

export GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0

# module_dir: Argo CD's module source in Go's module cache (downloaded when missing).
module_dir() {
  (cd "$MODULE_DIR" && go mod download -json "$ARGOCD_MODULE@$ARGOCD_VERSION" |
    awk -F'"' '$2 == "Dir" { print $4 }')
}

# ldflags: the version Argo CD's own Makefile stamps, from our pins. No git
# commit: the module zip has none, so `argocd version` reads v3.5.7+unknown.
ldflags() {
  local pkg="$ARGOCD_MODULE/common" build_date client_go
  # The release's date as the proxy records it: a rebuild stamps the same.
  build_date="$(cd "$MODULE_DIR" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' "$ARGOCD_MODULE")"
  client_go="$(awk '$1 == "k8s.io/client-go" && $2 == "=>" { print $4; exit }' "$MODULE_DIR/go.mod")"
  printf '%s ' -s -w \
    -X "$pkg.version=${ARGOCD_VERSION#v}" \
    -X "$pkg.buildDate=$build_date" \
    -X "$pkg.kubectlVersion=$client_go" \
    -X "'$pkg.extraBuildInfo=gpu-scheduler scripts/argocd.sh; gitops-engine $GITOPS_ENGINE_VERSION from the Go proxy, not the release commit'"
}

binary_path() {
  local key
  key="$( (cat "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum"; go version; go env GOOS GOARCH; ldflags) | sha256sum | cut -c1-12)"
  echo "$BUILD_STORE/argocd-$ARGOCD_VERSION-$key"
}

# cached_go_build OUT MODULE_DIR PACKAGE LDFLAGS: go build PACKAGE of the module
# in MODULE_DIR to OUT, a path in the build store named <name>-<hash of the
# inputs>, written whole or not at all (another clone may build it at once).
cached_go_build() {
  local out="$1" module="$2" package="$3" flags="$4" start=$SECONDS name prefix
  name="$(basename "$out")" prefix="${name%%-*}"
  mkdir -p "$(dirname "$out")"
  # One -ldflags argument; go splits it, honouring the quotes of an -X whose value has spaces.
  (cd "$module" && with_heartbeat "building $prefix" go build -trimpath -ldflags "$flags" -o "$out.$$.tmp" "$package")
  mv "$out.$$.tmp" "$out"
  log "argocd: built $name in $((SECONDS - start))s"
}

cmd_binary() {
  command -v go >/dev/null || die "go not found: building Argo CD $ARGOCD_VERSION needs Go (cluster/argocd/go.mod says which)"
  local out
  out="$(binary_path)"
  if [[ ! -x "$out" ]]; then
    log "argocd: building $ARGOCD_VERSION from the Go module proxy (one binary for every component; cold: 7-18 min on 2 cores)"
    cached_go_build "$out" "$MODULE_DIR" "$ARGOCD_MODULE/cmd" "$(ldflags)"
  fi
  ln -sfn "$out" "$BIN_DIR/argocd"
  "$out" version --client --short >/dev/null || die "$out does not run"
  echo "$out"
}

# kustomize_binary: the kustomize Argo CD's repo-server runs for a kustomize
# source (the root Application renders argocd/ with it), built from
# cluster/argocd/kustomize/go.mod: the version whose kustomize/api Argo CD's
# own go.mod uses. Cached by a hash of its inputs; prints its path.
kustomize_binary() {
  local module="$MODULE_DIR/kustomize" key out
  key="$( (cat "$module/go.mod" "$module/go.sum"; go version; go env GOOS GOARCH) | sha256sum | cut -c1-12)"
  out="$BUILD_STORE/kustomize-$key"
  if [[ ! -x "$out" ]]; then
    log "argocd: building kustomize ($(mod_version "$module/go.mod" sigs.k8s.io/kustomize/kustomize/v5)) from the Go module proxy"
    cached_go_build "$out" "$module" sigs.k8s.io/kustomize/kustomize/v5 "-s -w"
  fi
  echo "$out"
}

need_docker() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 ||
    die "'$1' needs a Docker engine that answers ('docker info' fails): start one (scripts/docker-engine.sh ensure)"
}

# build_image REF DOCKERFILE CONTEXT ARGS...: docker build unless REF exists
# (its tag is the hash of its inputs).
build_image() {
  local ref="$1" dockerfile="$2" context="$3" start=$SECONDS
  shift 3
  if docker image inspect "$ref" >/dev/null 2>&1; then
    log "argocd: image $ref is up to date"
    return
  fi
  log "argocd: docker build $ref (apt over HTTP from the Debian mirror)"
  docker build --force-rm --file "$dockerfile" --tag "$ref" "$@" "$context" >&2
  log "argocd: built $ref in $((SECONDS - start))s"
}

cmd_images() {
  need_docker "make argocd-images"
  local binary kustomize helm module debian mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}" context tag
  binary="$(cmd_binary)"
  kustomize="$(kustomize_binary)"
  [[ -x "$BIN_DIR/helm" ]] || "$REPO_ROOT/scripts/fetch-tools.sh" >&2
  helm="$(readlink -f "$BIN_DIR/helm")"
  module="$(module_dir)"
  debian="$("$REPO_ROOT/scripts/debian-base.sh")"
  context="$WORK_DIR/image-context"
  rm -rf "$context"
  mkdir -p "$context"
  # Hard links where the file system allows: the binary is ~190 MB.
  cp -l "$binary" "$context/argocd" 2>/dev/null || cp "$binary" "$context/argocd"
  cp "$helm" "$context/helm"
  cp "$kustomize" "$context/kustomize"
  cp "$module/hack/git-verify-wrapper.sh" "$module/hack/gpg-wrapper.sh" "$context/"
  chmod 0755 "$context"/*
  tag="$ARGOCD_VERSION-$(
    cd "$context"
    (docker image inspect -f '{{.Id}}' "$debian"; echo "$mirror"; cat "$MODULE_DIR/images/Dockerfile.argocd"
      sha256sum argocd helm kustomize git-verify-wrapper.sh gpg-wrapper.sh) | sha256sum | cut -c1-12
  )"
  build_image "$ARGOCD_IMAGE_REPOSITORY:$tag" "$MODULE_DIR/images/Dockerfile.argocd" "$context" \
    --build-arg BASE_IMAGE="$debian" --build-arg DEBIAN_MIRROR="$mirror" --build-arg VERSION="$ARGOCD_VERSION"
  local redis_tag
  redis_tag="bookworm-$( (docker image inspect -f '{{.Id}}' "$debian"; echo "$mirror"; cat "$MODULE_DIR/images/Dockerfile.redis") |
    sha256sum | cut -c1-12)"
  build_image "$REDIS_IMAGE_REPOSITORY:$redis_tag" "$MODULE_DIR/images/Dockerfile.redis" "$MODULE_DIR/images" \
    --build-arg BASE_IMAGE="$debian" --build-arg DEBIAN_MIRROR="$mirror"
  rm -rf "$context"
  echo "$ARGOCD_IMAGE_REPOSITORY:$tag"
  echo "$REDIS_IMAGE_REPOSITORY:$redis_tag"
}

kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KIND_KUBECONFIG" "$@"; }

need_cluster() {
  [[ -x "$BIN_DIR/kubectl" ]] || "$REPO_ROOT/scripts/fetch-tools.sh" >&2
  "$REPO_ROOT/scripts/kind.sh" kubeconfig ||
    die "KinD cluster $CLUSTER is not there: run 'make kind-up' (KIND_CLUSTER=$CLUSTER) first"
}

# argocd_node: "NODE CONTAINER", the worker Argo CD runs on: the first
# worker container by name and the Kubernetes node with its address. All of
# Argo CD on one node: its images (~600 MB) are copied into one node's
# containerd, not every worker's (a minute less on 2 cores).
argocd_node() {
  local container ips node
  container="$(docker ps --filter "label=io.x-k8s.kind.cluster=$CLUSTER" --filter label=io.x-k8s.kind.role=worker \
    --format '{{.Names}}' | sort | head -n1)"
  [[ -n "$container" ]] || die "cluster $CLUSTER has no running worker container"
  ips="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$container")"
  node="$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' |
    awk -v ips="$ips" 'BEGIN { split(ips, list, " "); for (i in list) want[list[i]] = 1 } $2 in want { print $1; exit }')"
  [[ -n "$node" ]] || die "no Kubernetes node of $CLUSTER has the address of $container ($ips)"
  echo "$node $container"
}

# overlay ARGOCD_IMAGE REDIS_IMAGE NODE: a kustomization in .cache that is
# cluster/argocd/install with our image references and every workload on
# NODE (kustomize wants relative paths, so it lives under the repository).
overlay() {
  local dir="$WORK_DIR/install-overlay" base
  mkdir -p "$dir"
  base="$(realpath --relative-to="$dir" "$INSTALL_DIR")"
  cat >"$dir/kustomization.yaml" <<EOF
# Generated by scripts/argocd.sh: $INSTALL_DIR with the images built here,
# every workload on node $3.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $base
images:
  - name: $ARGOCD_IMAGE_REPOSITORY
    newTag: ${1##*:}
  - name: $REDIS_IMAGE_REPOSITORY
    newTag: ${2##*:}
patches:
  - target: {kind: Deployment}
    patch: &on-node |
      - {op: add, path: /spec/template/spec/nodeSelector, value: {kubernetes.io/hostname: $3}}
  - target: {kind: StatefulSet}
    patch: *on-node
EOF
  echo "$dir"
}

# wait_established CRD...: until the API server serves them (`kubectl wait`
# fails outright on a CRD that has no conditions yet, and so does this
# jsonpath: its error is not shown, the loop asks again).
wait_established() {
  local crd deadline=$((SECONDS + 60))
  for crd in "$@"; do
    until [[ "$(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]]; do
      ((SECONDS < deadline)) || die "CRD $crd is not Established after 60s"
      sleep 1
    done
  done
}

# ensure_secret NAME KEY: Secret NAME with a random KEY unless it has one.
# The cache's password (argocd-redis, auth: Argo CD's own install makes it
# with an init container) and the API server's signing key (argocd-secret,
# server.secretkey: argocd-server adds it on its first start, too late for
# the ApplicationSet controller starting beside it).
ensure_secret() {
  local name="$1" key="$2" value
  [[ -n "$(kubectl -n "$NAMESPACE" get secret "$name" -o jsonpath="{.data.${key//./\\.}}" 2>/dev/null)" ]] && return
  value="$(head -c 32 /dev/urandom | base64 | tr -d '/+=\n')"
  if kubectl -n "$NAMESPACE" get secret "$name" >/dev/null 2>&1; then
    kubectl -n "$NAMESPACE" patch secret "$name" --type merge -p "{\"stringData\":{\"$key\":\"$value\"}}" >/dev/null
  else
    kubectl -n "$NAMESPACE" create secret generic "$name" --from-literal="$key=$value" >/dev/null
  fi
  kubectl -n "$NAMESPACE" label --overwrite secret "$name" app.kubernetes.io/part-of=argocd >/dev/null
}

cmd_install() {
  local start=$SECONDS images argocd_image redis_image module
  need_docker "make argocd-install"
  need_cluster
  # Which Argo CD, and why: this script's is the offline fallback. The
  # release's install.yaml and its images (quay.io/argoproj/argocd,
  # redis) are what users should run, pinned by digest; those digests are
  # not recorded here yet, so no upstream path is tried (docs/install.md).
  log "argocd: source: Argo CD $ARGOCD_VERSION built here from its Go modules (offline fallback; upstream: kubectl apply -n argocd -f https://raw.githubusercontent.com/argoproj/argo-cd/$ARGOCD_VERSION/manifests/install.yaml)"
  images="$(cmd_images)"
  argocd_image="$(sed -n 1p <<<"$images")"
  redis_image="$(sed -n 2p <<<"$images")"
  local node container
  read -r node container <<<"$(argocd_node)"
  # Into Argo CD's node unless it has them (the tags are hashes of the
  # images' inputs, so a rebuilt image has a new one).
  "$REPO_ROOT/scripts/kind.sh" load-missing --node "$container" "$argocd_image" "$redis_image" >&2
  module="$(module_dir)"
  log "argocd: CRDs from $module/manifests/crds"
  # Server-side: the ApplicationSet CRD is too large for the annotation a
  # client-side apply keeps.
  kubectl apply --server-side --force-conflicts --field-manager=gpu-scheduler-argocd -k "$module/manifests/crds" >/dev/null
  wait_established applications.argoproj.io applicationsets.argoproj.io appprojects.argoproj.io
  kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  ensure_secret argocd-redis auth
  ensure_secret argocd-secret server.secretkey
  log "argocd: applying cluster/argocd/install (every component on node $node)"
  kubectl apply --server-side --force-conflicts --field-manager=gpu-scheduler-argocd \
    -k "$(overlay "$argocd_image" "$redis_image" "$node")" >/dev/null
  log "argocd: waiting for the components to run"
  local workload
  for workload in deployment/argocd-redis deployment/argocd-repo-server statefulset/argocd-application-controller \
    deployment/argocd-applicationset-controller deployment/argocd-server; do
    kubectl -n "$NAMESPACE" rollout status "$workload" --timeout="${ROLLOUT_TIMEOUT}s" >/dev/null ||
      { kubectl -n "$NAMESPACE" get pods -o wide >&2; die "$workload did not roll out within ${ROLLOUT_TIMEOUT}s (pods above)"; }
  done
  log "argocd: Argo CD $ARGOCD_VERSION runs in namespace $NAMESPACE of $CLUSTER ($((SECONDS - start))s)"
  kubectl -n "$NAMESPACE" get pods -o wide >&2
}

cmd_uninstall() {
  need_cluster
  local start=$SECONDS
  if kubectl get crd applications.argoproj.io >/dev/null 2>&1; then
    # Applications first, while the controller runs: their finalizers
    # delete what they deployed.
    kubectl delete applicationsets.argoproj.io,applications.argoproj.io --all -A --wait=true --timeout=300s >/dev/null || true
  fi
  kubectl delete namespace "$NAMESPACE" --ignore-not-found --wait=true --timeout=300s >/dev/null
  kubectl delete clusterrole,clusterrolebinding -l app.kubernetes.io/part-of=argocd --ignore-not-found >/dev/null
  kubectl delete crd applications.argoproj.io applicationsets.argoproj.io appprojects.argoproj.io --ignore-not-found >/dev/null
  log "argocd: removed from $CLUSTER in $((SECONDS - start))s"
}

# in-cluster [--annotate KEY=VALUE]... LABEL=VALUE...: register the cluster
# Argo CD runs in with these labels and annotations, as docs/install.md shows
# users: a cluster Secret for https://kubernetes.default.svc (Argo CD's
# in-cluster, which has no Secret of its own to label). The ApplicationSet's
# clusters generators select clusters by such labels and read what to deploy
# from the annotations (gpu-scheduler/chart-version, ...). Replaces the labels
# and annotations of an earlier call.
cmd_in_cluster() {
  need_cluster
  local labels="" annotations=""
  while (($# > 0)); do
    if [[ "$1" == --annotate ]]; then
      (($# > 1)) || die "in-cluster: --annotate needs KEY=VALUE"
      [[ "$2" =~ ^[A-Za-z0-9./_-]+=[A-Za-z0-9._:/@+-]*$ ]] || die "in-cluster: '$2' is not an annotation KEY=VALUE"
      annotations+="    ${2%%=*}: \"${2#*=}\""$'\n'
      shift 2
      continue
    fi
    [[ "$1" =~ ^[A-Za-z0-9./_-]+=[A-Za-z0-9._-]*$ ]] || die "in-cluster: '$1' is not a label KEY=VALUE"
    labels+="    ${1%%=*}: \"${1#*=}\""$'\n'
    shift
  done
  [[ -n "$labels" ]] || die "usage: $0 in-cluster [--annotate KEY=VALUE]... LABEL=VALUE... (e.g. gpu-scheduler/deploy=true)"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: cluster-in-cluster
  namespace: $NAMESPACE
  labels:
    argocd.argoproj.io/secret-type: cluster
$labels  annotations:
$annotations
type: Opaque
stringData:
  name: in-cluster
  server: https://kubernetes.default.svc
  config: '{"tlsClientConfig":{"insecure":false}}'
EOF
  log "argocd: cluster in-cluster registered with labels ${labels//$'\n'/ } annotations ${annotations//$'\n'/ }"
}

# plain-http-registry HOST[:PORT]/PATH: a repository Secret that tells Argo CD
# to pull Helm charts from that OCI registry over plain HTTP. Argo CD v3.5.7
# speaks HTTPS to an OCI registry unless a repository Secret whose url is the
# Application's repoURL says insecureOCIForceHttp (a registry with TLS needs
# no Secret, unless it wants credentials). For the local registries of the
# tests and of make pipeline: no TLS there.
cmd_plain_http_registry() {
  need_cluster
  (($# == 1)) && [[ "$1" =~ ^[A-Za-z0-9.:-]+/[A-Za-z0-9._/-]+$ ]] ||
    die "usage: $0 plain-http-registry HOST[:PORT]/PATH (no oci://: the repoURL Argo CD is given)"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: helm-oci-plain-http
  namespace: $NAMESPACE
  labels:
    argocd.argoproj.io/secret-type: repository
type: Opaque
stringData:
  name: helm-oci-plain-http
  type: helm
  url: $1
  enableOCI: "true"
  insecureOCIForceHttp: "true"
EOF
  log "argocd: OCI registry $1 registered for plain HTTP"
}

# e2e: tests/argocd/conftest.py does the rest, in order: it refuses a helm
# release of our charts (make e2e's would own the same objects), runs
# `install` above, builds our images and loads them under the references the
# charts render, serves this checkout with git daemon and applies argocd/.
cmd_e2e() {
  [[ -x "$REPO_ROOT/.venv/bin/pytest" ]] || die ".venv has no pytest: run 'make install'."
  need_docker "make argocd-e2e"
  need_cluster
  cd "$REPO_ROOT"
  # -s: the fixtures' progress (install, images, rollouts) as it happens.
  KIND_CLUSTER="$CLUSTER" .venv/bin/pytest -s -m argocd tests/argocd
}

case "${1:-}" in
  binary) cmd_binary ;;
  images) cmd_images ;;
  install) cmd_install ;;
  uninstall) cmd_uninstall ;;
  in-cluster) shift && cmd_in_cluster "$@" ;;
  plain-http-registry) shift && cmd_plain_http_registry "$@" ;;
  e2e) cmd_e2e ;;
  *) die "usage: $0 binary|images|install|uninstall|in-cluster|plain-http-registry|e2e" ;;
esac

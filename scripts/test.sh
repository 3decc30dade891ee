#!/usr/bin/env bash
# `make test`: lint, the fast tests, the images built and run with Docker,
# then the real local control plane for the cluster, e2e and fault tests,
# then KinD (real kubelets and containers): `make kind-up`, `make argocd-e2e`
# (Argo CD syncing both charts from git), `make e2e` (both charts installed
# with their hooks, the e2e suite against them), `make report` and the KinD
# tests, on a cluster of its own that the last KinD test deletes with `make
# kind-down`; then `make test-pipeline` (.gitlab-ci.yml by gitlab-ci-local
# against a local registry, KinD and Argo CD). Everything a stage starts (clusters, a Docker engine this run
# started) is stopped at the end, also after a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTEST=.venv/bin/pytest
started=$SECONDS
# New files in the work tree (neither tracked nor ignored) are named at the
# next step, so the stage that wrote into the checkout can be found: CI once
# met one named with random bytes, origin unknown. git quotes such names.
untracked() { git ls-files --others --exclude-standard 2>/dev/null || true; }
seen_untracked="$(untracked)"
report_new_files() {
  local now new
  now="$(untracked)"
  new="$(comm -13 <(sort <<<"$seen_untracked") <(sort <<<"$now") | sed '/^$/d')"
  [[ -z "$new" ]] || printf 'warning: the stage before left new files in the work tree:\n%s\n' "$new" >&2
  seen_untracked="$now"
}
step() {
  report_new_files
  printf '\n==> %s (%ds)\n' "$*" $((SECONDS - started))
}

step "tools: kubectl and helm, lint tools (fetched once into .cache)"
make --no-print-directory tools lint-tools

step "lint"
make --no-print-directory lint

# Whatever a stage starts is stopped at the end, also after a failure.
cleanups=()
cleanup() {
  local i
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
}
trap cleanup EXIT

step "unit tests (no cluster, no Docker)"
$PYTEST -m "not cluster and not e2e and not faults and not images and not kind and not argocd and not pipeline"

# The images as users build and run them. Under CI=true the engine must come
# up (scripts/docker-engine.sh installs and starts it when root); elsewhere,
# without one, the image tests are skipped with a message naming what to install.
step "images: Docker engine, make images, the image tests"
engine_was_up=false
docker info >/dev/null 2>&1 && engine_was_up=true
docker_runs=false
if bash scripts/docker-engine.sh ensure; then
  docker_runs=true
  # Only an engine this run started is stopped: one that was already up may
  # be running other people's containers.
  $engine_was_up || cleanups+=('step "stopping the Docker engine this run started"; bash scripts/docker-engine.sh stop')
  bash scripts/images.sh build >/dev/null
elif [ "${CI:-}" = "true" ]; then
  exit 1
fi
$PYTEST -m images tests/images

# `make test` always uses its own local cluster, never a KUBECONFIG that may
# point at a real cluster; the KinD stage below makes its own.
export KUBECONFIG="$PWD/.cache/local-cluster/kubeconfig"
if ! command -v go >/dev/null 2>&1 && [ "${CI:-}" != "true" ]; then
  step "cluster tests: Go is not installed, so the local control plane cannot be built"
  echo "Install Go 1.26+ (https://go.dev/dl/) and run 'make test' again; these tests are skipped:"
  $PYTEST -m "cluster or e2e or faults"
elif $docker_runs; then
  # The pipeline stage below runs .gitlab-ci.yml's test-cluster job, which is
  # `make test-cluster`: these same tests on the same local control plane, in
  # both of its pipelines. Run here too they cost a third 13-14 min, which put
  # CI past its 90 minutes on a slow machine (93 min, 2026-12-02).
  step "cluster, e2e and fault tests: in the pipeline stage (its test-cluster job is make test-cluster)"
else
  step "local control plane"
  cleanups+=('step "tearing the local control plane down"; bash scripts/local-down.sh')
  bash scripts/local-up.sh

  step "cluster, e2e and fault tests"
  $PYTEST -m "cluster or e2e or faults"
  step "tearing the local control plane down (the KinD stage needs the cores)"
  bash scripts/local-down.sh
fi
unset KUBECONFIG

# KinD, where a Docker engine runs (under CI=true the images stage has made
# sure one does). The cluster is the KinD tests' own (tests/kind/conftest.py),
# never a user's `make kind-up` cluster: `make argocd-e2e`, `make e2e` and
# `make report` install into it, then tests/kind runs on it and its last
# test proves that `make kind-down` removes everything. Whether the docker network `kind` existed
# before is read from Docker here, before `kind-up`, for that test.
export KIND_CLUSTER=gpu-scheduler-kind-test
export KIND_KUBECONFIG="$PWD/.cache/kind/$KIND_CLUSTER.kubeconfig"
if ! $docker_runs; then
  step "KinD: no Docker engine answers, so the KinD stage is skipped"
  echo "Install Docker (https://docs.docker.com/engine/install/) and run 'make test' again for make kind-up, make argocd-e2e, make e2e and the KinD tests."
  $PYTEST -m "kind or argocd or pipeline" tests/kind tests/argocd tests/pipeline
else
  # kind's nodes restart with the Docker engine (restart policy on-failure:1),
  # so the clusters of a run that was killed come back with it and share this
  # machine's cores and inotify instances with this run's. CI once failed so:
  # the kubelets of its new cluster could not start ('too many open files').
  # Both are this script's own: each one's `down` knows its name and does
  # nothing when it is not there (the pipeline's also stops a leftover
  # registry and git daemon, which would hold its ports).
  step "KinD: what an interrupted run of make test left behind (make kind-down, make pipeline-down)"
  make --no-print-directory kind-down
  make --no-print-directory pipeline-down

  step "KinD: make kind-up (cluster $KIND_CLUSTER)"
  KIND_TEST_NETWORK_EXISTED_BEFORE=0
  docker network inspect kind >/dev/null 2>&1 && KIND_TEST_NETWORK_EXISTED_BEFORE=1
  export KIND_TEST_NETWORK_EXISTED_BEFORE
  cleanups+=('step "tearing the KinD cluster down"; make --no-print-directory kind-down')
  make --no-print-directory kind-up

  # Before make e2e: it leaves its helm releases of our charts installed,
  # which Argo CD would have to take over. The Argo CD tests remove their
  # Applications and what they deployed; Argo CD itself stays, idle.
  step "KinD: make argocd-e2e (Argo CD in the cluster syncs argocd/ from a git server of this checkout)"
  make --no-print-directory argocd-e2e

  step "KinD: make e2e (images loaded, both charts installed with their hooks, the e2e suite)"
  make --no-print-directory e2e

  step "KinD: make report (the real logs of the check pods on node3 and node4)"
  make --no-print-directory report REPORT_CLUSTER=kind

  step "KinD: the KinD tests on the same cluster; the last one is make kind-down"
  $PYTEST -m kind tests/kind

  # The GitLab pipeline as users ship through it, once the KinD stage's
  # cluster is gone (the cores): its own registry, KinD cluster and Argo CD.
  unset KIND_CLUSTER KIND_KUBECONFIG
  cleanups+=('step "stopping what make pipeline left"; bash scripts/pipeline.sh down')
  step "pipeline: make test-pipeline (.gitlab-ci.yml's jobs by gitlab-ci-local: local registry, KinD, Argo CD)"
  $PYTEST -s -m pipeline tests/pipeline
fi
step "all tests passed"

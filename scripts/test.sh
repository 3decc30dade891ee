#!/usr/bin/env bash
# `make test`: lint, the fast tests, the images built and run with Docker,
# then the real local control plane for the cluster, e2e and fault tests. The
# cluster (and a Docker engine this run started) is stopped at the end, also
# after a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTEST=.venv/bin/pytest
started=$SECONDS
step() { printf '\n==> %s (%ds)\n' "$*" $((SECONDS - started)); }

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
$PYTEST -m "not cluster and not e2e and not faults and not images and not kind and not argocd"

# The images as users build and run them. Under CI=true the engine must come
# up (scripts/docker-engine.sh installs and starts it when root); elsewhere,
# without one, the image tests are skipped with a message naming what to install.
step "images: Docker engine, make images, the image tests"
engine_was_up=false
docker info >/dev/null 2>&1 && engine_was_up=true
if bash scripts/docker-engine.sh ensure; then
  # Only an engine this run started is stopped: one that was already up may
  # be running other people's containers.
  $engine_was_up || cleanups+=('step "stopping the Docker engine this run started"; bash scripts/docker-engine.sh stop')
  bash scripts/images.sh build >/dev/null
elif [ "${CI:-}" = "true" ]; then
  exit 1
fi
$PYTEST -m images tests/images

# `make test` always uses its own local cluster, never a KUBECONFIG that may
# point at a real cluster; `make e2e` is the way to test against KinD.
export KUBECONFIG="$PWD/.cache/local-cluster/kubeconfig"
if ! command -v go >/dev/null 2>&1 && [ "${CI:-}" != "true" ]; then
  step "cluster tests: Go is not installed, so the local control plane cannot be built"
  echo "Install Go 1.24+ (https://go.dev/dl/) and run 'make test' again; these tests are skipped:"
  $PYTEST -m "cluster or e2e or faults"
  exit 0
fi

step "local control plane"
cleanups+=('step "tearing the local control plane down"; bash scripts/local-down.sh')
bash scripts/local-up.sh

step "cluster, e2e and fault tests"
$PYTEST -m "cluster or e2e or faults"
step "all tests passed"

#!/usr/bin/env bash
# `make test`: lint, the fast tests, then the real local control plane for the
# cluster, e2e and fault tests. The cluster is torn down at the end, also after a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTEST=.venv/bin/pytest
started=$SECONDS
step() { printf '\n==> %s (%ds)\n' "$*" $((SECONDS - started)); }

step "tools: kubectl and helm, lint tools (fetched once into .cache)"
make --no-print-directory tools lint-tools

step "lint"
make --no-print-directory lint

step "unit tests (no cluster)"
$PYTEST -m "not cluster and not e2e and not faults and not kind"

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
trap 'step "tearing the local control plane down"; bash scripts/local-down.sh' EXIT
bash scripts/local-up.sh

step "cluster, e2e and fault tests"
$PYTEST -m "cluster or e2e or faults"
step "all tests passed"

#!/usr/bin/env bash
# `make test-cluster` (CI's test-cluster job): the cluster, e2e and fault
# tests against the real local control plane, which this script brings up
# (scripts/local-up.sh; LOCAL_APISERVER_PORT etc. as there) and always tears
# down again, also after a failure. Never a KUBECONFIG from outside: the tests
# must not touch a real cluster. TEST_SELECTION, when set, is a pytest -k
# expression that narrows the selection (CI's test jobs; .gitlab-ci.yml).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

[[ -x .venv/bin/pytest ]] || die ".venv has no pytest: run 'make install'."
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
trap 'log "test-cluster: tearing the local control plane down"; bash scripts/local-down.sh' EXIT
log "test-cluster: local control plane"
bash scripts/local-up.sh
log "test-cluster: the cluster, e2e and fault tests"
# TEST_SELECTION (CI; .gitlab-ci.yml): a pytest -k expression that narrows the selection.
.venv/bin/pytest -m "cluster or e2e or faults" ${TEST_SELECTION:+-k "$TEST_SELECTION"}

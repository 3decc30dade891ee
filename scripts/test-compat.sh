#!/usr/bin/env bash
# `make test-compat` (make test's 1.35 stage, in the cluster lane): the tests
# marked `compat` against a second local control plane running the oldest
# Kubernetes the charts accept (cluster/compat/go.mod: kube-apiserver and
# kube-controller-manager 1.35, built once per machine into the build store;
# etcd, kwok and kwokctl are cluster/local's). Its own folder, cluster name
# and port, so it never meets the 1.37 cluster of `make test-cluster`;
# brought up and always torn down again, also after a failure.
# Env: COMPAT_CLUSTER_NAME (gpu-scheduler-compat), COMPAT_APISERVER_PORT (16444).
set -euo pipefail
export LOCAL_K8S_MODULE=cluster/compat
export LOCAL_CLUSTER_DIR="${CACHE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache}/compat-cluster"
export LOCAL_CLUSTER_NAME="${COMPAT_CLUSTER_NAME:-gpu-scheduler-compat}"
export LOCAL_APISERVER_PORT="${COMPAT_APISERVER_PORT:-16444}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

[[ -x .venv/bin/pytest ]] || die ".venv has no pytest: run 'make install'."
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
trap 'log "test-compat: tearing the $LOCAL_K8S_VERSION control plane down"; bash scripts/local-down.sh' EXIT
log "test-compat: a local control plane of Kubernetes $LOCAL_K8S_VERSION ($LOCAL_K8S_MODULE)"
bash scripts/local-up.sh
server="$("$BIN_DIR/kubectl" version -o json | "$(host_python)" -c 'import json, sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
[[ "$server" == "$LOCAL_K8S_VERSION" ]] || die "the API server says $server, not $LOCAL_K8S_VERSION"
log "test-compat: the tests marked compat against kube-apiserver $server"
.venv/bin/pytest -m compat ${TEST_SELECTION:+-k "$TEST_SELECTION"}

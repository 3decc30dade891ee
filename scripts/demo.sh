#!/usr/bin/env bash
# `make demo`: the task, end to end, on the local control plane.
#
#   1. the local cluster (kube-apiserver, etcd, kube-controller-manager, KWOK
#      nodes node1..node4; no kube-scheduler), started if it is not up;
#   2. gpu-scheduler webhook and scheduler as background processes on this
#      host, the webhook registered with the chart's own configurations;
#   3. `helm upgrade --install` of charts/gpu-scheduler-check: the
#      StatefulSet of 5 pods with the task's gpu-scheduling-map;
#   4. every pod's node and CUDA_VISIBLE_DEVICES against the map: PASS/FAIL.
#
# Then everything is stopped again, unless KEEP=1: then it stays up to explore
# and `make local-down` stops it all. Exit status 0 only on PASS.
#
# Usage: scripts/demo.sh [up|down]     (up is the default; down stops a KEEP=1 demo)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
# The same layout as the cluster scripts (scripts/lib.sh): CACHE_DIR moves it all.
export CACHE_DIR="${CACHE_DIR:-$REPO/.cache}"
NAMESPACE="${DEMO_NAMESPACE:-gpu-demo}"
KEEP="${KEEP:-0}"
export KUBECONFIG="$CACHE_DIR/local-cluster/kubeconfig"
# PIDs and logs of the demo's processes; `make local-down` stops what they name.
export DEMO_DIR="$CACHE_DIR/local-cluster/demo"
export PATH="$CACHE_DIR/bin:$REPO/.venv/bin:$PATH"
demo() { PYTHONPATH="$REPO/tests" "$REPO/.venv/bin/python" -m e2e.demo "$@"; }
say() { printf '\n==> %s\n' "$*"; }

down() {
  say "stopping the demo's scheduler and webhook, then the local cluster"
  if [[ -f "$KUBECONFIG" ]] && kubectl get --raw /readyz >/dev/null 2>&1; then
    demo stop
  fi
  bash scripts/local-down.sh
}

case "${1:-up}" in
  down) down; exit 0 ;;
  up) ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac

[[ -x .venv/bin/gpu-scheduler ]] || make --no-print-directory install
if [[ "$KEEP" != 1 ]]; then
  trap down EXIT
fi

say "local cluster (make local-up)"
bash scripts/local-up.sh

say "gpu-scheduler webhook and scheduler on this host"
demo start --namespace "$NAMESPACE"

# KWOK's nodes run no containers, so no image is ever pulled: registry empty
# (the chart refuses its placeholder).
say "helm upgrade --install gpu-scheduler-check charts/gpu-scheduler-check -n $NAMESPACE --set image.registry="
helm upgrade --install gpu-scheduler-check charts/gpu-scheduler-check \
  --namespace "$NAMESPACE" --create-namespace --set-string image.registry= >/dev/null
kubectl -n "$NAMESPACE" get statefulset gpu-scheduler-check -o jsonpath='{.spec.template.metadata.annotations.gpu-scheduling-map}' |
  sed 's/^/    gpu-scheduling-map: /'

say "waiting for the 5 pods to be placed and Running"
demo wait --namespace "$NAMESPACE" || true  # the verdict below says what is wrong

say "kubectl get pod -o wide -A"
kubectl get pod -o wide -A

say "each pod against the map"
status=0
demo verdict --namespace "$NAMESPACE" || status=$?

if [[ "$KEEP" == 1 ]]; then
  cat <<EOF

==> KEEP=1: everything stays up. To explore:
  export KUBECONFIG=$KUBECONFIG
  kubectl -n $NAMESPACE get pods -o wide
  kubectl -n $NAMESPACE get pod gpu-scheduler-check-2 -o jsonpath='{.spec.containers[0].env}'
  kubectl -n $NAMESPACE get events --sort-by=.lastTimestamp
  tail -f $DEMO_DIR/scheduler.log $DEMO_DIR/webhook.log
  make report          # the report with the check pods' logs
Stop everything with: make local-down   (or scripts/demo.sh down)
EOF
fi
exit "$status"

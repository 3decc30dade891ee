#!/usr/bin/env bash
# `make report`: the task's deliverable, .cache/report/report.md
# (scripts/report.py): `kubectl get pod -o wide -A`, each check pod against
# the map, and the logs of the check pods on node3 and node4. From one of:
#
#   kind   the KinD cluster of `make kind-up` (KIND_CLUSTER): gpu-scheduler
#          installed with its certificate hooks as `make e2e` installs it, the
#          check chart in DEMO_NAMESPACE (gpu-demo), and the real `kubectl
#          logs` of its pods: nothing simulated. The cluster stays up; the
#          check release is removed again unless KEEP=1.
#   local  the local control plane (`make demo KEEP=1`): its KWOK nodes run no
#          containers, so the report runs the check on this host with each
#          pod's environment, and says so. Stopped again unless KEEP=1.
#
# REPORT_CLUSTER=kind|local picks one; unset, kind when the KinD cluster's
# control-plane container runs, else local.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

KEEP="${KEEP:-0}"
OUT="$CACHE_DIR/report/report.md"

cluster="${REPORT_CLUSTER:-}"
case "$cluster" in
  kind | local) log "report: on the $cluster cluster (REPORT_CLUSTER=$cluster)" ;;
  "")
    if scripts/kind.sh running; then
      cluster=kind
      log "report: the KinD cluster ${KIND_CLUSTER:-gpu-scheduler} runs, so the report comes from it (REPORT_CLUSTER=local for the local control plane)"
    else
      cluster=local
      log "report: no KinD cluster ${KIND_CLUSTER:-gpu-scheduler} runs, so the report comes from the local control plane (make kind-up first for real containers)"
    fi
    ;;
  *) die "REPORT_CLUSTER=$cluster: choose kind or local" ;;
esac

if [[ "$cluster" == kind ]]; then
  REPORT_OUT="$OUT" KEEP="$KEEP" exec scripts/kind.sh report
fi

demo=0
report=0
KEEP=1 bash scripts/demo.sh || demo=$?
KUBECONFIG="$CLUSTER_DIR/kubeconfig" .venv/bin/python scripts/report.py --out "$OUT" || report=$?
if [[ "$KEEP" != 1 ]]; then
  bash scripts/demo.sh down
fi
((demo == 0 && report == 0))

#!/usr/bin/env bash
# Stop every local KWOK cluster under .cache/local-cluster and delete that
# directory. Idempotent: fine when nothing is up.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export KWOK_WORKDIR="$CLUSTER_DIR"
lock_cluster

# our_pids DIR: PIDs of processes whose command line mentions DIR/ (each
# component runs as DIR/bin/NAME). Also finds those whose pid file is gone.
our_pids() {
  local f pid
  for f in /proc/[0-9]*/cmdline; do
    pid="${f#/proc/}"; pid="${pid%/cmdline}"
    ((pid == $$)) && continue
    { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -qF -- "$1/" && echo "$pid"
  done
  return 0
}

for dir in "$CLUSTER_DIR"/clusters/*/; do
  [[ -d "$dir" ]] || continue
  dir="${dir%/}"
  name="${dir##*/}"
  pids=""
  for f in "$dir"/pids/*.pid; do
    if [[ -f "$f" ]]; then pids+="$(<"$f") "; fi
  done
  log "deleting cluster '$name' (pids: ${pids:-none})"
  if [[ -x "$BIN_DIR/kwokctl" ]]; then
    "$BIN_DIR/kwokctl" delete cluster --name "$name" --kubeconfig "$CLUSTER_DIR/kubeconfig" ||
      log "kwokctl delete failed; killing by pid"
  fi
  # Verify by PID that nothing is left; TERM, then KILL after 10s. Only PIDs
  # whose command line names this cluster's dir: a stale pid file (after a
  # reboot) may name someone else's process.
  for pid in $(our_pids "$dir"); do
    for _ in $(seq 10); do
      kill -0 "$pid" 2>/dev/null || continue 2
      kill -TERM "$pid" 2>/dev/null || true
      sleep 1
    done
    log "pid $pid ignored TERM; killing"
    kill -KILL "$pid" 2>/dev/null || true
  done
done

# `make demo KEEP=1` leaves the scheduler and webhook running, each leading
# its own process group with its pid file here.
for f in "$CLUSTER_DIR"/demo/*.pid; do
  [[ -f "$f" ]] && kill -TERM -- "-$(<"$f")" 2>/dev/null || true
done

rm -rf "$CLUSTER_DIR"
log "local cluster down ($CLUSTER_DIR removed)"

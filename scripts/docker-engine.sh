#!/usr/bin/env bash
# A Docker engine for `make images`, `make kind-up` and the tests that need one.
#
#   docker-engine.sh ensure   exit 0 when `docker info` answers; otherwise, on a
#                             machine where we may (root, and CI=true or
#                             DOCKER_AUTOSTART=1), install Debian's docker.io if
#                             dockerd is missing and start the daemon; else exit 3
#                             with a message that names what to install
#   docker-engine.sh stop     stop the daemon, only if `ensure` started it
#   docker-engine.sh status   say whether an engine answers, and whose it is
#
# Users' machines run their own Docker: nothing here installs or starts one
# for them unless they ask (DOCKER_AUTOSTART=1). The image store stays in
# Docker's default place (/var/lib/docker), so every clone on the machine
# shares its layers and the images tagged by a hash of their inputs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE_DIR="${DOCKER_ENGINE_STATE:-/var/lib/gpu-scheduler-docker}"
PID_FILE="$STATE_DIR/dockerd.pid"
LOG_FILE="$STATE_DIR/dockerd.log"
START_TIMEOUT=60

answers() { docker info >/dev/null 2>&1; }

may_start() {
  [[ "$(id -u)" == 0 ]] && [[ "${CI:-}" == true || "${DOCKER_AUTOSTART:-}" == 1 ]]
}

install_engine() {
  command -v apt-get >/dev/null || die "dockerd is missing and this is not a Debian-based machine: install Docker (https://docs.docker.com/engine/install/)"
  log "docker: installing Debian's docker.io (dockerd, containerd, runc)"
  # The package lists may be missing on a fresh machine; update once.
  if ! apt-cache policy docker.io 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io iptables >/dev/null
}

# nest_cgroup_v2: in a container that has a cgroup v2 namespace of its own (a
# CI job's container on a cgroup v2 host), move the processes at its root
# into a child cgroup and hand every controller down. The kernel enables
# controllers for child cgroups only where no process sits, and dockerd's
# containers need them. Elsewhere (cgroup v1 like our machines, or a host
# where this shell is not at the root of a cgroup namespace) nothing happens.
nest_cgroup_v2() {
  [[ -f /sys/fs/cgroup/cgroup.controllers && "$(cat /proc/self/cgroup)" == "0::/" ]] || return 0
  log "docker: cgroup v2 at the root of this container's namespace: moving its processes to /init"
  mkdir -p /sys/fs/cgroup/init
  local pid controller controllers=""
  while read -r pid; do
    echo "$pid" >/sys/fs/cgroup/init/cgroup.procs 2>/dev/null || true # a process that ended meanwhile
  done </sys/fs/cgroup/cgroup.procs
  for controller in $(cat /sys/fs/cgroup/cgroup.controllers); do controllers+=" +$controller"; done
  echo "${controllers# }" >/sys/fs/cgroup/cgroup.subtree_control
}

cmd_ensure() {
  if answers; then
    log "docker: engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
    return 0
  fi
  if ! may_start; then
    cat >&2 <<EOF
ERROR: no Docker engine answers ('docker info' fails).
  Install Docker (https://docs.docker.com/engine/install/) and start it, or
  point DOCKER_HOST at a running engine. As root, DOCKER_AUTOSTART=1 lets
  this script install Debian's docker.io and start dockerd itself.
EOF
    exit 3
  fi
  command -v dockerd >/dev/null || install_engine
  nest_cgroup_v2
  mkdir -p "$STATE_DIR"
  if [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
    log "docker: dockerd (pid $(cat "$PID_FILE")) is starting"
  else
    log "docker: starting dockerd (log $LOG_FILE)"
    # setsid: the daemon outlives this script but not the session's process group signals.
    setsid dockerd --pidfile "$PID_FILE.dockerd" >"$LOG_FILE" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
  fi
  local deadline=$((SECONDS + START_TIMEOUT))
  until answers; do
    if ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
      tail -n 30 "$LOG_FILE" >&2 || true
      die "dockerd exited; its log is above ($LOG_FILE)"
    fi
    ((SECONDS < deadline)) || { tail -n 30 "$LOG_FILE" >&2; die "dockerd did not answer within ${START_TIMEOUT}s ($LOG_FILE)"; }
    sleep 1
  done
  log "docker: engine $(docker version --format '{{.Server.Version}}') answers"
}

cmd_stop() {
  [[ -f "$PID_FILE" ]] || return 0
  local pid
  pid="$(cat "$PID_FILE")"
  if kill -0 "$pid" 2>/dev/null; then
    log "docker: stopping dockerd (pid $pid)"
    kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$PID_FILE"
}

cmd_status() {
  if answers; then
    local whose="someone else's"
    [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null && whose="started by this script"
    echo "docker engine $(docker version --format '{{.Server.Version}}') answers ($whose)"
  else
    echo "no docker engine answers"
    return 1
  fi
}

case "${1:-}" in
  ensure) cmd_ensure ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) die "usage: $0 ensure|stop|status" ;;
esac

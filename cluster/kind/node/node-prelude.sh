# Sourced by kind's entrypoint (/usr/local/bin/entrypoint) before its own
# set-up; the node image build inserts the `source` line. It makes a node
# started WITHOUT `docker run --privileged` look, to kind's entrypoint and to
# kubelet, like one started with it. Our machines cannot use --privileged
# (their capability bounding set lacks CAP_SYS_RESOURCE), so the test harness
# starts nodes with explicit capabilities instead (cluster/kind/docker-shim).
# On a node that did get --privileged every step below finds nothing to do.
# shellcheck shell=bash

prelude_log() { echo "INFO: gpu-scheduler node prelude: $1" >&2; }

# cgroup v1 without --privileged: Docker mounts the node's controllers
# read-only (kubelet and containerd must create cgroups in them).
# `remount,rw` fails with "mount point is busy"; a bind remount works.
# Controllers the host has not mounted at all (here hugetlb, net_cls,
# net_prio, perf_event) stay absent: a private cgroup namespace may not create
# a new hierarchy (EPERM), and kubelet checks only the ones that are mounted.
prelude_cgroup_v1_rw() {
  local target options
  while read -r target options; do
    if [[ ",$options," == *,ro,* ]]; then
      prelude_log "remounting $target read-write"
      mount -o remount,bind,rw "$target"
    fi
  done < <(findmnt -rn -t cgroup -o TARGET,VFS-OPTIONS)
}

# Without CAP_SYS_RESOURCE nothing may lower an oom_score_adj; containerd then
# fails every container whose spec asks for one (kubelet asks -997 for
# Guaranteed pods). containerd's restrict_oom_score_adj exists for this.
prelude_restrict_oom_score_adj() {
  local bounding
  bounding="$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)"
  # CAP_SYS_RESOURCE is capability 24.
  if ((((16#$bounding) >> 24 & 1) == 0)); then
    prelude_log "no CAP_SYS_RESOURCE: containerd restrict_oom_score_adj = true"
    sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
  fi
}

if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
  prelude_cgroup_v1_rw
fi
prelude_restrict_oom_score_adj

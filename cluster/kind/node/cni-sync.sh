#!/bin/bash
# gpu-scheduler-cni.service: the pod network of our offline node image, the
# job kindnetd does in kindest/node (kindnetd cannot be built here: it is not
# on the Go module proxy). The test harness's kind config sets
# networking.disableDefaultCNI, so kind installs no CNI and this takes over:
# - this node: a bridge + host-local CNI config for its podCIDR, and one
#   MASQUERADE rule for pod traffic leaving the cluster's pod subnet;
# - every other node: a route to its podCIDR via its InternalIP.
# It re-syncs at every change of a Node object and at start, so a restarted
# node (its routes gone with its old network namespace) gets them back, and
# the other nodes follow a node whose IP changed.
# Its identity (read Nodes; a kubelet may read only its own Node) is a
# ServiceAccount token that `scripts/kind.sh up` writes into each node
# (cluster/kind/pod-network.yaml); until then it waits.
set -o errexit -o nounset -o pipefail

export KUBECONFIG=/etc/kubernetes/gpu-scheduler-cni.conf
CNI_CONF=/etc/cni/net.d/10-gpu-scheduler-bridge.conflist
# Routes this script owns carry this protocol number, so stale ones (a node
# that left or moved) can be found and deleted without touching others.
ROUTE_PROTO=201

log() { echo "gpu-scheduler-cni: $*" >&2; }

my_ips() { ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1] }'; }

cluster_pod_subnet() {
  awk '$1 == "podSubnet:" { gsub(/"/, "", $2); split($2, s, ","); print s[1]; exit }' /kind/kubeadm.conf
}

write_cni_conf() {
  local pod_cidr="$1" want
  want="$(jq -n --arg cidr "$pod_cidr" '{
    cniVersion: "1.0.0",
    name: "gpu-scheduler-bridge",
    plugins: [
      {type: "bridge", bridge: "cni0", isGateway: true, ipMasq: false, hairpinMode: true,
       ipam: {type: "host-local", ranges: [[{subnet: $cidr}]], routes: [{dst: "0.0.0.0/0"}]}},
      {type: "portmap", capabilities: {portMappings: true}}
    ]}')"
  if [[ "$(cat "$CNI_CONF" 2>/dev/null)" != "$want" ]]; then
    log "CNI config for podCIDR $pod_cidr"
    # Written whole, then renamed: containerd watches the directory.
    printf '%s\n' "$want" >"$CNI_CONF.tmp" && mv "$CNI_CONF.tmp" "$CNI_CONF"
  fi
}

ensure_masquerade() {
  local pod_cidr="$1" subnet
  subnet="$(cluster_pod_subnet)"
  [[ -n "$subnet" ]] || { log "no podSubnet in /kind/kubeadm.conf"; return 1; }
  local rule=(POSTROUTING -s "$pod_cidr" ! -d "$subnet" -m comment --comment gpu-scheduler-cni -j MASQUERADE)
  iptables -t nat -C "${rule[@]}" 2>/dev/null || iptables -t nat -A "${rule[@]}"
}

sync_nodes() {
  local mine name cidr addr wanted=()
  mine=" $(my_ips | tr '\n' ' ') "
  while read -r name cidr addr; do
    [[ -n "$cidr" && -n "$addr" ]] || continue
    if [[ "$mine" == *" $addr "* ]]; then
      write_cni_conf "$cidr"
      ensure_masquerade "$cidr"
    else
      wanted+=("$cidr")
      ip route replace "$cidr" via "$addr" proto "$ROUTE_PROTO"
    fi
  done < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  local route
  while read -r route _; do
    [[ " ${wanted[*]} " == *" $route "* ]] || { log "deleting stale route $route"; ip route del "$route" proto "$ROUTE_PROTO"; }
  done < <(ip -4 route show proto "$ROUTE_PROTO")
}

until [[ -s "$KUBECONFIG" ]]; do sleep 1; done
log "started"
while true; do
  sync_nodes || log "sync failed; retrying"
  # Every change of a Node object triggers a sync; the timeout makes a full
  # re-sync at least every 5 minutes.
  timeout 300 kubectl get nodes --watch-only -o name 2>/dev/null | while read -r _; do
    sync_nodes || log "sync failed; retrying"
  done || true
  sleep 1
done

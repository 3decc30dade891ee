#!/usr/bin/env bash
# Start a local Kubernetes control plane without Docker: etcd, kube-apiserver,
# kube-controller-manager and kwok-controller run as host processes (kwokctl's
# "binary" runtime); kube-scheduler is disabled because gpu-scheduler is the
# scheduler under test. Nodes node1..nodeN are KWOK fakes that stay Ready and
# mark bound pods Running.
#
# Env: LOCAL_CLUSTER_NAME (gpu-scheduler), LOCAL_NODES (4), LOCAL_NODE_GPUS (4),
#      LOCAL_NODE_PODS (1000), LOCAL_APISERVER_PORT (16443; 0 = let kwokctl pick a free one),
#      LOCAL_CLUSTER_DIR (.cache/local-cluster), LOCAL_K8S_MODULE (cluster/local; lib.sh).
# kube-apiserver writes an audit log of every pods/binding request and every
# ServiceAccount's request to <cluster dir>/clusters/<name>/logs/audit.log
# (cluster/local/audit-policy.yaml).
# Idempotent: exits 0 at once when the cluster is already up and healthy.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME="${LOCAL_CLUSTER_NAME:-gpu-scheduler}"
NODES="${LOCAL_NODES:-4}"
GPUS="${LOCAL_NODE_GPUS:-4}"
# Pods per node: more than a real node's 110, so that the fault suite's
# 500-pod bursts fit on 4 nodes (gpu-scheduler checks it, as kube-scheduler does).
PODS="${LOCAL_NODE_PODS:-1000}"
PORT="${LOCAL_APISERVER_PORT:-16443}"
KUBECONFIG_FILE="$CLUSTER_DIR/kubeconfig"
# Keep kwokctl's whole workdir (cluster state, pki, logs) out of ~/.kwok.
export KWOK_WORKDIR="$CLUSTER_DIR"
kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
lock_cluster

usage() {
  cat <<EOF

Local cluster '$NAME' is up ($NODES KWOK nodes, $GPUS nvidia.com/gpu each, no kube-scheduler).
  export KUBECONFIG=$KUBECONFIG_FILE
  $BIN_DIR/kubectl get nodes
Logs: $CLUSTER_DIR/clusters/$NAME/logs/   Stop: make local-down
EOF
}

ready_nodes() { kubectl get nodes -l type=kwok --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l; }

# What the cluster was created from; a running cluster with another stamp was
# made by older binaries or settings (see the warning below).
STAMP_FILE="$CLUSTER_DIR/$NAME.stamp"
stamp() {
  echo "$LOCAL_K8S_VERSION etcd-$ETCD_VERSION kwok-$KWOK_VERSION pods-$PODS" \
    "$(cat "$REPO_ROOT/cluster/local/kwokctl.yaml" "$REPO_ROOT/cluster/local/audit-policy.yaml" | sha256sum | cut -c1-12)"
}

healthy() {
  [[ -f "$KUBECONFIG_FILE" ]] && kubectl get --raw /readyz >/dev/null 2>&1 &&
    (($(ready_nodes) >= NODES))
}

# port_holder PORT: "pid N: <command line>" of what listens on 127.0.0.1:PORT,
# "an unknown process" when ss cannot tell; empty when nothing listens.
port_holder() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null || return 0
  local pid
  pid="$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)"
  if [[ -n "$pid" && -r "/proc/$pid/cmdline" ]]; then
    echo "pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-300)"
  else
    echo "an unknown process (ss -ltnp names it, as root)"
  fi
}

# Another cluster's kube-apiserver on our port (say a `make demo KEEP=1` of
# another checkout) would otherwise answer our kubeconfig: a 2-minute wait,
# then an x509 error naming nothing. Stop at once, naming the holder. Only
# while this checkout has no cluster: our own apiserver holds it otherwise.
refuse_taken_port() {
  [[ "$PORT" != 0 ]] || return 0
  local holder
  holder="$(port_holder "$PORT")"
  [[ -z "$holder" ]] || die "port $PORT (the local apiserver's) is taken by $holder. Stop it (another checkout's cluster: make local-down there), or choose another: LOCAL_APISERVER_PORT=<port> (0: any free port)"
}

# Before the build (minutes on a new machine), not after it.
[[ -d "$CLUSTER_DIR/clusters/$NAME" ]] || refuse_taken_port

"$REPO_ROOT/scripts/build-control-plane.sh"
"$REPO_ROOT/scripts/fetch-tools.sh"

if healthy; then
  log "cluster '$NAME' is already up and healthy"
  # Not recreated here: someone may be using it. local-down + local-up does.
  [[ "$(cat "$STAMP_FILE" 2>/dev/null)" == "$(stamp)" ]] ||
    log "WARNING: it was created by older binaries/settings than $(stamp); run local-down, then local-up"
  usage
  exit 0
fi

if [[ -d "$CLUSTER_DIR/clusters/$NAME" ]]; then
  # Up but not all nodes there yet: just (re)apply nodes below. Otherwise the
  # processes are gone (e.g. reboot): start clean rather than repair.
  if ! kubectl get --raw /readyz >/dev/null 2>&1; then
    log "found a stale cluster '$NAME'; recreating it"
    "$REPO_ROOT/scripts/local-down.sh"
  fi
fi

if [[ ! -d "$CLUSTER_DIR/clusters/$NAME" ]]; then
  refuse_taken_port
  log "creating cluster '$NAME' (Kubernetes $LOCAL_K8S_VERSION; kwokctl, binary runtime, apiserver port $PORT; 0 = random)"
  mkdir -p "$CLUSTER_DIR"
  # --kube-authorization: Node,RBAC (tests impersonate service accounts).
  # --kube-admission: default plugins incl. Mutating/ValidatingAdmissionWebhook.
  # --kubeconfig: write our own file instead of merging into ~/.kube/config.
  # --config: bind to 127.0.0.1 (see the file).
  # --kube-audit-policy: every pods/binding request and every ServiceAccount's request, with
  # their answers, in logs/audit.log.
  "$BIN_DIR/kwokctl" create cluster \
    --config "$REPO_ROOT/cluster/local/kwokctl.yaml" \
    --kube-audit-policy "$REPO_ROOT/cluster/local/audit-policy.yaml" \
    --name "$NAME" \
    --runtime binary \
    --kube-apiserver-port "$PORT" \
    --kube-apiserver-binary "$LOCAL_K8S_BIN/kube-apiserver" \
    --kube-controller-manager-binary "$LOCAL_K8S_BIN/kube-controller-manager" \
    --kwok-controller-binary "$BIN_DIR/kwok" \
    --etcd-binary "$BIN_DIR/etcd" \
    --disable kube-scheduler \
    --kube-authorization=true \
    --kube-admission=true \
    --kubeconfig "$KUBECONFIG_FILE" \
    --quiet-pull \
    --wait 120s 9>&- # the daemons it forks must not inherit (and hold) our lock
  stamp >"$STAMP_FILE"
  log "control plane is up"
fi

# node_list FIRST LAST: a v1 List of KWOK nodes nodeFIRST..nodeLAST. Status is
# kept on create; kwok keeps it and reports the nodes Ready.
node_list() {
  local res="{cpu: \"32\", memory: 256Gi, pods: \"$PODS\", nvidia.com/gpu: \"$GPUS\"}"
  printf 'apiVersion: v1\nkind: List\nitems:\n'
  for ((i = $1; i <= $2; i++)); do
    cat <<EOF
- apiVersion: v1
  kind: Node
  metadata:
    name: node$i
    annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
    labels: {type: kwok, gpu-node-name: node$i, kubernetes.io/hostname: node$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
  status:
    capacity: $res
    allocatable: $res
EOF
  done
}

# One `kubectl apply` of a generated List per 250 nodes, up to 4 at once:
# kubectl sends one request per object, so 1000 nodes take ~20s instead of ~45s.
log "applying $NODES KWOK nodes ($GPUS GPUs each)"
workers=()
for ((first = 1; first <= NODES; first += 250)); do
  last=$((first + 249 < NODES ? first + 249 : NODES))
  node_list "$first" "$last" | kubectl apply --server-side --field-manager=local-up -f - >/dev/null &
  workers+=($!)
  if ((${#workers[@]} == 4)); then wait "${workers[0]}"; workers=("${workers[@]:1}"); fi
done
for w in "${workers[@]}"; do wait "$w"; done

# Poll the Ready count (`kubectl wait` goes node by node: far too slow for 1000).
log "waiting for $NODES nodes to be Ready"
deadline=$((SECONDS + 60 + NODES / 10))
while (($(ready_nodes) < NODES)); do
  ((SECONDS < deadline)) || die "only $(ready_nodes)/$NODES nodes Ready; see $CLUSTER_DIR/clusters/$NAME/logs/kwok-controller.log"
  sleep 1
  (((SECONDS - _T0) % 10 == 0)) && log "... $(ready_nodes)/$NODES Ready"
done
log "cluster '$NAME' ready: $(ready_nodes) nodes Ready"
usage

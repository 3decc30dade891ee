#!/usr/bin/env bash
# KinD workflow: one subcommand per make target.
#   up      create the cluster from cluster/kind-config.yaml (idempotent): 1
#           control plane + workers node1..node4; waits until every node is
#           Ready and CoreDNS runs; kubeconfig in $KIND_KUBECONFIG
#   down    delete the cluster, its kubeconfig, and the docker network `kind`
#           when `up` created it and nothing else uses it
#   load    IMAGE...: kind load docker-image into every node
#   kubeconfig  (re)write $KIND_KUBECONFIG for the existing cluster; fails when
#           there is none
#   images  docker build both images
#   e2e     load the images into the cluster, helm install both charts (the
#           check's pods must all run), run the e2e suite against the cluster
# Env: KIND_CLUSTER (gpu-scheduler), KIND_KUBECONFIG (.cache/kind/kubeconfig),
#      KIND_NODE_IMAGE (below), SCHEDULER_IMAGE (gpu-scheduler:dev),
#      CHECK_IMAGE (gpu-scheduler-check:dev).
#
# KIND_NODE_IMAGE picks the node image:
#   unset     the kindest/node image cluster/kind-config.yaml pins, when Docker
#             has it or can pull it; otherwise (no registry, as on our
#             machines) the offline one below, saying so
#   upstream  the pinned kindest/node image, nothing else
#   offline   the image scripts/kind-node-image.sh assembles offline (built
#             when missing; needs Go)
#   REF       that image (one made by kind-node-image.sh is run the offline way)
# With the offline image `up` also adapts to what it lacks and to this
# machine: kindnetd is not in it (networking.disableDefaultCNI in a generated
# copy of the config; each node's gpu-scheduler-cni service does the pod
# network), and where `docker run --privileged` fails, kind runs with
# cluster/kind/docker-shim first on PATH. Users' runs are unchanged.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLUSTER="${KIND_CLUSTER:-gpu-scheduler}"
SCHEDULER_IMAGE="${SCHEDULER_IMAGE:-gpu-scheduler:dev}"
CHECK_IMAGE="${CHECK_IMAGE:-gpu-scheduler-check:dev}"
KIND_KUBECONFIG="${KIND_KUBECONFIG:-$CACHE_DIR/kind/kubeconfig}"
KIND_CONFIG="$REPO_ROOT/cluster/kind-config.yaml"
STATE_DIR="$CACHE_DIR/kind"
# What `up` decided, for the later subcommands: the node image, whether
# kind needs the docker shim, whether `up` created the docker network.
STATE_FILE="$STATE_DIR/$CLUSTER.state"
SCHEDULER_NAMESPACE=gpu-scheduler-system
CHECK_NAMESPACE=gpu-scheduler-check
UP_TIMEOUT="${KIND_UP_TIMEOUT:-300}"
OFFLINE_IMAGE_TITLE=gpu-scheduler-kind-node
# The nvidia.com/gpu capacity `up` gives each worker (simulated: no device plugin).
SIMULATED_GPUS_PER_WORKER=4

need_docker() {
  command -v docker >/dev/null 2>&1 ||
    die "docker is not installed: '$1' needs a Docker engine (https://docs.docker.com/engine/install/). Without Docker, 'make demo' runs the same checks on a local control plane."
  docker info >/dev/null 2>&1 ||
    die "docker is installed but its daemon does not answer ('docker info' fails): start Docker, or check that your user may use it, then run '$1' again."
}

need_tool() {
  [[ -x "$BIN_DIR/$2" ]] || die "$BIN_DIR/$2 is missing: '$1' needs it; run 'make tools'."
}

# split_image REF -> "REPOSITORY TAG" (a registry port's colon is not a tag).
split_image() {
  local ref="$1" last="${1##*/}"
  if [[ "$last" == *:* ]]; then
    echo "${ref%:*} ${ref##*:}"
  else
    echo "$ref latest"
  fi
}

KIND=""
# find_kind: KIND = the kind binary (built into .cache/bin when missing).
find_kind() { [[ -n "$KIND" ]] || KIND="$("$REPO_ROOT/scripts/kind-binary.sh")"; }

cluster_exists() { find_kind; "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; }

state() { [[ -f "$STATE_FILE" ]] && awk -F= -v k="$1" '$1 == k { print $2 }' "$STATE_FILE" || true; }

# save_state IMAGE NETWORK_CREATED: record what the later subcommands need.
save_state() {
  local shim=0
  if is_offline_image "$1" && ! privileged_works "$1"; then
    log "kind: 'docker run --privileged' fails on this engine; kind runs with cluster/kind/docker-shim"
    shim=1
  fi
  mkdir -p "$STATE_DIR"
  printf 'image=%s\ndocker_shim=%s\nnetwork_created=%s\n' "$1" "$shim" "$2" >"$STATE_FILE"
}

# A cluster made before this state file existed (or by hand): derive it.
ensure_state() {
  [[ -f "$STATE_FILE" ]] && return 0
  save_state "$(docker inspect -f '{{.Config.Image}}' "$CLUSTER-control-plane")" 0
}

# kind_cmd ARGS...: kind, with the docker shim first on PATH when this
# machine needs it for this cluster's node image.
kind_cmd() {
  find_kind
  if [[ "$(state docker_shim)" == 1 ]]; then
    PATH="$REPO_ROOT/cluster/kind/docker-shim:$PATH" "$KIND" "$@"
  else
    "$KIND" "$@"
  fi
}

# kubectl on the control-plane node: no kubectl needed on this machine, and
# always the cluster's own version.
node_kubectl() {
  docker exec "$CLUSTER-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"
}
node_kubectl_apply() {
  docker exec -i "$CLUSTER-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f - >/dev/null
}

pinned_image() { awk '$1 == "image:" { print $2; exit }' "$KIND_CONFIG"; }

is_offline_image() {
  [[ "$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.title"}}' "$1" 2>/dev/null)" == "$OFFLINE_IMAGE_TITLE" ]]
}

# choose_node_image: prints the node image to use, building or pulling it.
choose_node_image() {
  local pinned
  pinned="$(pinned_image)"
  case "${KIND_NODE_IMAGE:-}" in
    upstream) echo "$pinned" ;;
    offline) "$REPO_ROOT/scripts/kind-node-image.sh" ;;
    "")
      if docker image inspect "$pinned" >/dev/null 2>&1; then
        echo "$pinned"
      elif log "kind: docker pull $pinned" && docker pull "$pinned" >&2; then
        echo "$pinned"
      else
        log "kind: cannot pull $pinned (above); using the node image assembled offline instead"
        log "kind: (KIND_NODE_IMAGE=upstream refuses that; docs/delivery.md)"
        "$REPO_ROOT/scripts/kind-node-image.sh"
      fi
      ;;
    *) echo "$KIND_NODE_IMAGE" ;;
  esac
}

# privileged_works IMAGE: can this Docker engine run a --privileged container?
privileged_works() { docker run --rm --privileged --entrypoint true "$1" >/dev/null 2>&1; }

# offline_config: the users' config with kindnetd switched off (the offline
# image has no kindnetd; its gpu-scheduler-cni service does the pod network).
offline_config() {
  local out="$STATE_DIR/$CLUSTER-offline-config.yaml"
  mkdir -p "$STATE_DIR"
  grep -q '^networking:' "$KIND_CONFIG" &&
    die "$KIND_CONFIG has a networking: block; scripts/kind.sh must merge disableDefaultCNI into it"
  {
    echo "# Generated by scripts/kind.sh from cluster/kind-config.yaml for the offline node image."
    cat "$KIND_CONFIG"
    printf 'networking:\n  disableDefaultCNI: true\n'
  } >"$out"
  echo "$out"
}

write_kubeconfig() {
  mkdir -p "$(dirname "$KIND_KUBECONFIG")"
  kind_cmd get kubeconfig --name "$CLUSTER" >"$KIND_KUBECONFIG.tmp"
  mv "$KIND_KUBECONFIG.tmp" "$KIND_KUBECONFIG"
}

# wait_ready: every node of the config Ready, then CoreDNS rolled out.
wait_ready() {
  local want have deadline=$((SECONDS + UP_TIMEOUT))
  want="$(grep -cE '^\s*- role:' "$KIND_CONFIG")"
  until have="$(node_kubectl get nodes --no-headers 2>/dev/null | wc -l)" && ((have >= want)); do
    ((SECONDS < deadline)) || die "only $have of $want nodes registered after ${UP_TIMEOUT}s"
    sleep 1
  done
  log "kind: waiting for $want nodes to be Ready"
  node_kubectl wait --for=condition=Ready nodes --all --timeout="$((deadline - SECONDS))s" >/dev/null ||
    { node_kubectl get nodes -o wide >&2; die "nodes not Ready within ${UP_TIMEOUT}s (above)"; }
  log "kind: nodes Ready; waiting for CoreDNS"
  node_kubectl -n kube-system rollout status deployment/coredns --timeout="$((deadline - SECONDS))s" >/dev/null ||
    { node_kubectl -n kube-system get pods -o wide >&2; die "CoreDNS not rolled out within ${UP_TIMEOUT}s (above)"; }
}

# simulate_gpus: each worker advertises nvidia.com/gpu (a status patch, the
# way Kubernetes documents advertising extended resources; no device plugin,
# no GPU). Allocatable too, which kubelet would otherwise fill in only at its
# next status update. kubelet keeps both, also across a node restart; it
# zeroes them only when its device-plugin checkpoint is gone (a node whose
# /var was wiped). `up` again restores them.
simulate_gpus() {
  local node gpus="\"nvidia.com/gpu\":\"$SIMULATED_GPUS_PER_WORKER\""
  for node in $(node_kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
    node_kubectl patch "$node" --subresource=status --type=merge \
      -p "{\"status\":{\"capacity\":{$gpus},\"allocatable\":{$gpus}}}" >/dev/null
  done
}

# install_pod_network: the identity each node's gpu-scheduler-cni service
# uses to read Nodes (offline node image only; cluster/kind/pod-network.yaml),
# as a kubeconfig in every node. Idempotent.
install_pod_network() {
  local token="" ca kubeconfig container deadline=$((SECONDS + 60))
  node_kubectl_apply <"$REPO_ROOT/cluster/kind/pod-network.yaml"
  until [[ -n "$token" ]]; do
    ((SECONDS < deadline)) || die "the token of ServiceAccount kube-system/gpu-scheduler-cni did not appear within 60s"
    token="$(node_kubectl -n kube-system get secret gpu-scheduler-cni -o jsonpath='{.data.token}')" || true
    [[ -n "$token" ]] || sleep 1
  done
  ca="$(node_kubectl -n kube-system get secret gpu-scheduler-cni -o jsonpath='{.data.ca\.crt}')"
  kubeconfig="apiVersion: v1
kind: Config
clusters:
  - name: $CLUSTER
    cluster:
      server: https://$CLUSTER-control-plane:6443
      certificate-authority-data: $ca
users:
  - name: gpu-scheduler-cni
    user:
      token: $(base64 -d <<<"$token")
contexts:
  - name: gpu-scheduler-cni
    context: {cluster: $CLUSTER, user: gpu-scheduler-cni}
current-context: gpu-scheduler-cni"
  for container in $(kind_cmd get nodes --name "$CLUSTER"); do
    docker exec -i "$container" sh -c 'umask 077; f=/etc/kubernetes/gpu-scheduler-cni.conf; cat >"$f.tmp" && mv "$f.tmp" "$f"' <<<"$kubeconfig"
  done
}

cmd_up() {
  local start=$SECONDS image config network_created=0
  if [[ "${CI:-}" == true ]]; then
    "$REPO_ROOT/scripts/docker-engine.sh" ensure
  fi
  need_docker "make kind-up"
  find_kind
  if cluster_exists; then
    log "kind: cluster $CLUSTER exists"
    ensure_state
  else
    image="$(choose_node_image)"
    config="$KIND_CONFIG"
    is_offline_image "$image" && config="$(offline_config)"
    # A failed `up` leaves kind's network behind: still ours to remove.
    if ! docker network inspect kind >/dev/null 2>&1 || [[ "$(state network_created)" == 1 ]]; then
      network_created=1
    fi
    save_state "$image" "$network_created"
    log "kind: creating cluster $CLUSTER with $image"
    kind_cmd create cluster --name "$CLUSTER" --config "$config" --image "$image" \
      --kubeconfig "$KIND_KUBECONFIG"
    log "kind: nodes joined in $((SECONDS - start))s"
  fi
  if is_offline_image "$(state image)"; then
    install_pod_network
  fi
  wait_ready
  simulate_gpus
  write_kubeconfig
  log "kind: cluster $CLUSTER up in $((SECONDS - start))s; export KUBECONFIG=$KIND_KUBECONFIG"
  node_kubectl get nodes -o wide
}

cmd_down() {
  local start=$SECONDS
  need_docker "make kind-down"
  find_kind
  if cluster_exists; then
    log "kind: deleting cluster $CLUSTER"
    kind_cmd delete cluster --name "$CLUSTER" --kubeconfig "$KIND_KUBECONFIG"
  else
    log "kind: no cluster $CLUSTER"
  fi
  # kind leaves its network behind; remove it when `up` made it and no
  # container (another kind cluster, say) is still attached.
  if [[ "$(state network_created)" == 1 ]] && docker network inspect kind >/dev/null 2>&1; then
    if [[ "$(docker network inspect -f '{{len .Containers}}' kind)" == 0 ]]; then
      docker network rm kind >/dev/null && log "kind: removed the docker network kind"
    else
      log "kind: docker network kind is still used by other containers; left in place"
    fi
  fi
  rm -f "$KIND_KUBECONFIG" "$STATE_FILE" "$STATE_DIR/$CLUSTER-offline-config.yaml"
  log "kind: down in $((SECONDS - start))s"
}

cmd_load() {
  (($#)) || die "usage: $0 load IMAGE..."
  need_docker "kind load"
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  ensure_state
  kind_cmd load docker-image --name "$CLUSTER" "$@"
}

cmd_kubeconfig() {
  need_docker "kind get kubeconfig"
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  ensure_state
  write_kubeconfig
}

cmd_images() {
  need_docker "make images"
  docker build -t "$SCHEDULER_IMAGE" "$REPO_ROOT/apps/scheduler"
  docker build -t "$CHECK_IMAGE" "$REPO_ROOT/apps/check"
}

cmd_e2e() {
  need_docker "make e2e"
  need_tool "make e2e" helm
  need_tool "make e2e" kubectl
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  [[ -x "$REPO_ROOT/.venv/bin/pytest" ]] || die ".venv has no pytest: run 'make install'."
  ensure_state
  write_kubeconfig
  export KUBECONFIG="$KIND_KUBECONFIG"

  local image
  for image in "$SCHEDULER_IMAGE" "$CHECK_IMAGE"; do
    docker image inspect "$image" >/dev/null 2>&1 ||
      die "image $image is not in the local Docker: build it with 'make images' (or docker pull it first)."
  done
  # The e2e suite deploys the check chart's StatefulSet with the image
  # gpu-scheduler-check:dev: give it that name too.
  local images=("$SCHEDULER_IMAGE" "$CHECK_IMAGE")
  if [[ "$CHECK_IMAGE" != gpu-scheduler-check:dev ]]; then
    docker tag "$CHECK_IMAGE" gpu-scheduler-check:dev
    images+=(gpu-scheduler-check:dev)
  fi
  kind_cmd load docker-image --name "$CLUSTER" "${images[@]}"

  local scheduler_repo scheduler_tag check_repo check_tag
  read -r scheduler_repo scheduler_tag <<<"$(split_image "$SCHEDULER_IMAGE")"
  read -r check_repo check_tag <<<"$(split_image "$CHECK_IMAGE")"
  # pullPolicy Never: the nodes run exactly the images just loaded. registry
  # empty: the charts' default names the GitLab registry of a release.
  log "e2e: helm install gpu-scheduler into $SCHEDULER_NAMESPACE"
  "$BIN_DIR/helm" upgrade --install gpu-scheduler "$REPO_ROOT/charts/gpu-scheduler" \
    --namespace "$SCHEDULER_NAMESPACE" --create-namespace \
    --set-string image.registry= --set-string image.repository="$scheduler_repo" --set-string image.tag="$scheduler_tag" \
    --set image.pullPolicy=Never --wait --timeout 5m
  # --wait: every check pod Running, i.e. admitted by the webhook and bound by
  # the scheduler. Its pods then leave again: they would hold the same GPUs
  # as the StatefulSets the e2e suite deploys, and change its sharing events.
  log "e2e: helm install gpu-scheduler-check into $CHECK_NAMESPACE"
  "$BIN_DIR/helm" upgrade --install gpu-scheduler-check "$REPO_ROOT/charts/gpu-scheduler-check" \
    --namespace "$CHECK_NAMESPACE" --create-namespace \
    --set-string image.registry= --set-string image.repository="$check_repo" --set-string image.tag="$check_tag" \
    --set image.pullPolicy=Never --wait --timeout 5m
  "$BIN_DIR/kubectl" --namespace "$CHECK_NAMESPACE" get pods -o wide
  "$BIN_DIR/helm" uninstall gpu-scheduler-check --namespace "$CHECK_NAMESPACE" --wait

  cd "$REPO_ROOT"
  # E2E_USE_INSTALLED: the suite uses the installed scheduler and webhook
  # instead of starting its own processes.
  E2E_USE_INSTALLED=1 .venv/bin/pytest -m e2e tests/e2e
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  load) shift; cmd_load "$@" ;;
  kubeconfig) cmd_kubeconfig ;;
  images) cmd_images ;;
  e2e) cmd_e2e ;;
  *) die "usage: $0 up|down|load IMAGE...|kubeconfig|images|e2e" ;;
esac

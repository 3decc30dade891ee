#!/usr/bin/env bash
# KinD workflow: one subcommand per make target.
#   up       create the cluster from cluster/kind-config.yaml (idempotent): 1
#            control plane + workers node1..node4; waits until every node is
#            Ready and CoreDNS runs; each worker advertises 4 nvidia.com/gpu and
#            gets a fake NVML library with its own GPU layout for the chart's
#            GPU agent (KIND_FAKE_GPUS=0: not; needs gcc); a default
#            WaitForFirstConsumer StorageClass (upstream's `standard`, or where
#            the node image lacks it the same built here: default_storage);
#            kubeconfig in $KIND_KUBECONFIG
#   down     delete the cluster, its kubeconfig, and the docker network `kind`
#            when `up` created it and nothing else uses it
#   logs     DIR: kind export logs of the cluster into DIR (CI keeps them when
#            the e2e fails)
#   load     IMAGE...: kind load docker-image into every node
#   load-missing  [--node CONTAINER] IMAGE...: into the workers (or that one)
#            that do not hold that image ID yet (as install does with ours;
#            scripts/argocd.sh with Argo CD's)
#   kubeconfig  (re)write $KIND_KUBECONFIG for the existing cluster; fails when
#            there is none
#   running  exit 0 when the cluster's control-plane container runs (no kind needed)
#   install  the images built (or BUILD_IMAGES=0: taken as they are) and loaded
#            into the workers; charts/gpu-scheduler installed with its
#            certificate hook Jobs, waited for; then `helm test`
#   e2e      install; then charts/gpu-scheduler-check (its 5 pods must run and
#            log), removed again; then the e2e suite against the installed
#            scheduler and webhook (TEST_SELECTION, when set: a pytest -k
#            expression that narrows it; CI's e2e-kind job, .gitlab-ci.yml)
#   release-values IMAGE  print the path of the values file install gives
#            charts/gpu-scheduler, naming IMAGE (release_values)
#   report   install; charts/gpu-scheduler-check in $DEMO_NAMESPACE, its pods'
#            logs waited for; scripts/report.py writes $REPORT_OUT from the
#            real `kubectl logs`; the check release removed unless KEEP=1
# Env: KIND_CLUSTER (gpu-scheduler), KIND_KUBECONFIG (.cache/kind/kubeconfig),
#      KIND_NODE_IMAGE (below), SCHEDULER_IMAGE (gpu-scheduler:dev),
#      CHECK_IMAGE (gpu-scheduler-check:dev), BUILD_IMAGES (1: scripts/images.sh
#      builds them when missing or out of date; 0: they must be in the local
#      Docker already, e.g. pulled from a registry; both are then loaded into
#      the workers; pull: nothing is built or loaded, the nodes pull them from
#      their registry, see KIND_REGISTRY), DEMO_NAMESPACE (gpu-demo),
#      REPORT_OUT (.cache/report/report.md), KEEP, KIND_WEBHOOK_PORT (9443:
#      the webhook's webhook.port here, not the chart's 8443, so that every run
#      on real kubelets proves the port is followed everywhere).
#
# KIND_REGISTRY=HOST[:PORT]: a registry the nodes' containerd pulls from
# (the CI job's registry, with BUILD_IMAGES=pull). `up` creates the cluster
# with containerd reading /etc/containerd/certs.d and writes the registry's
# hosts.toml into every node. A loopback registry (127.0.0.1, localhost) is
# this host's: the nodes reach it over plain HTTP on their docker network's
# gateway, as their own loopback is not this host's. KIND_REGISTRY_USER and
# KIND_REGISTRY_PASSWORD, when set, are its credentials (containerd's CRI
# auth for that host, written into the generated kind config).
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
SCHEDULER_RELEASE=gpu-scheduler
KIND_WEBHOOK_PORT="${KIND_WEBHOOK_PORT:-9443}"
CHECK_RELEASE=gpu-scheduler-check
DEMO_NAMESPACE="${DEMO_NAMESPACE:-gpu-demo}"
REPORT_OUT="${REPORT_OUT:-$CACHE_DIR/report/report.md}"
BUILD_IMAGES="${BUILD_IMAGES:-1}"
UP_TIMEOUT="${KIND_UP_TIMEOUT:-300}"
OFFLINE_IMAGE_TITLE=gpu-scheduler-kind-node
# The nvidia.com/gpu capacity `up` gives each worker (simulated: no device plugin).
SIMULATED_GPUS_PER_WORKER=4
# Workers with the fake NVML library (tests/fake_nvml) carry this label; the
# chart's GPU agent runs on them (KIND_FAKE_GPUS=0: none).
FAKE_NVML_LABEL=gpu-scheduler/fake-nvml
FAKE_NVML_DIR=/opt/fake-nvml

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
        log "kind: (KIND_NODE_IMAGE=upstream refuses that; docs/delivery-internals.md)"
        "$REPO_ROOT/scripts/kind-node-image.sh"
      fi
      ;;
    *) echo "$KIND_NODE_IMAGE" ;;
  esac
}

# privileged_works IMAGE: can this Docker engine run a --privileged container?
privileged_works() { docker run --rm --privileged --entrypoint true "$1" >/dev/null 2>&1; }

# cluster_config IMAGE: the users' config, or a generated copy of it with
# what this run adds: kindnetd switched off for the offline image (it has no
# kindnetd; its gpu-scheduler-cni service does the pod network), containerd's
# registry settings for KIND_REGISTRY, and on a Docker engine with cgroup v1
# (ours) kubelet allowed to start there: since Kubernetes 1.35 it refuses
# cgroup v1 unless told failCgroupV1: false.
cluster_config() {
  local offline=0 cgroup_v1=0
  is_offline_image "$1" && offline=1
  [[ "$(docker info --format '{{.CgroupVersion}}' 2>/dev/null)" == 1 ]] && cgroup_v1=1
  if ((offline == 0 && cgroup_v1 == 0)) && [[ -z "${KIND_REGISTRY:-}" ]]; then
    echo "$KIND_CONFIG"
    return
  fi
  local out="$STATE_DIR/$CLUSTER-generated-config.yaml" block
  mkdir -p "$STATE_DIR"
  for block in networking containerdConfigPatches kubeadmConfigPatches; do
    if grep -q "^$block:" "$KIND_CONFIG"; then
      die "$KIND_CONFIG has a $block: block; scripts/kind.sh must merge its own settings into it"
    fi
  done
  (
    umask 077 # registry credentials may be in it
    echo "# Generated by scripts/kind.sh from cluster/kind-config.yaml (node image $1, KIND_REGISTRY=${KIND_REGISTRY:-})."
    cat "$KIND_CONFIG"
    ((offline == 0)) || printf 'networking:\n  disableDefaultCNI: true\n'
    ((cgroup_v1 == 0)) || printf 'kubeadmConfigPatches:\n  - |\n    kind: KubeletConfiguration\n    failCgroupV1: false\n'
    [[ -z "${KIND_REGISTRY:-}" ]] || registry_config_patch
  ) >"$out"
  echo "$out"
}

# registry_config_patch: containerd reads per-registry hosts.toml files (the
# endpoint is written after `create`, once the network's gateway is known),
# and the credentials of KIND_REGISTRY when given.
registry_config_patch() {
  printf 'containerdConfigPatches:\n  - |-\n'
  printf '    [plugins."io.containerd.grpc.v1.cri".registry]\n'
  printf '      config_path = "/etc/containerd/certs.d"\n'
  if [[ -n "${KIND_REGISTRY_USER:-}" || -n "${KIND_REGISTRY_PASSWORD:-}" ]]; then
    printf '    [plugins."io.containerd.grpc.v1.cri".registry.configs."%s".auth]\n' "$KIND_REGISTRY"
    printf '      username = "%s"\n      password = "%s"\n' "${KIND_REGISTRY_USER:-}" "${KIND_REGISTRY_PASSWORD:-}"
  fi
}

# registry_endpoint: where the nodes reach KIND_REGISTRY.
registry_endpoint() {
  local host="${KIND_REGISTRY%%:*}" port="" gateway
  [[ "$KIND_REGISTRY" == *:* ]] && port=":${KIND_REGISTRY##*:}"
  case "$host" in
    127.* | localhost)
      gateway="$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' | tr ' ' '\n' | grep -m1 '\.')" ||
        die "the docker network kind has no IPv4 gateway: the nodes cannot reach $KIND_REGISTRY"
      echo "http://$gateway$port"
      ;;
    *) echo "https://$KIND_REGISTRY" ;;
  esac
}

# configure_registry: KIND_REGISTRY's hosts.toml in every node (containerd
# reads it at each pull: no restart). Idempotent.
configure_registry() {
  [[ -n "${KIND_REGISTRY:-}" ]] || return 0
  local endpoint container
  endpoint="$(registry_endpoint)"
  for container in $(kind_cmd get nodes --name "$CLUSTER"); do
    docker exec "$container" grep -q '^ *config_path = "/etc/containerd/certs.d"' /etc/containerd/config.toml ||
      die "node $container was created without KIND_REGISTRY (its containerd reads no hosts.toml): run 'make kind-down', then 'make kind-up' with KIND_REGISTRY=$KIND_REGISTRY"
    # shellcheck disable=SC2016 # expanded by the node's shell
    printf 'server = "%s"\n\n[host."%s"]\n  capabilities = ["pull", "resolve"]\n' "$endpoint" "$endpoint" |
      docker exec -i "$container" sh -c 'mkdir -p "$0" && cat >"$0/hosts.toml"' "/etc/containerd/certs.d/$KIND_REGISTRY"
  done
  log "kind: the nodes pull $KIND_REGISTRY/... from $endpoint"
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
    ((SECONDS < deadline)) || { report_nodes; die "only $have of $want nodes registered after ${UP_TIMEOUT}s (above: each node's kubelet)"; }
    sleep 1
  done
  log "kind: waiting for $want nodes to be Ready"
  node_kubectl wait --for=condition=Ready nodes --all --timeout="$((deadline - SECONDS))s" >/dev/null ||
    { node_kubectl get nodes -o wide >&2; report_nodes; die "nodes not Ready within ${UP_TIMEOUT}s (above)"; }
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

# fake_gpus: where the GPU agent reads its node's GPUs on KinD. The fake
# libnvidia-ml.so.1 (tests/fake_nvml, built with this machine's gcc) and the
# layout named by each worker's alias (tests/fake_nvml/layouts/nodeN.json:
# node3 with MIG on, node4 with two NVLink pairs, four GPUs each as
# simulate_gpus advertises) are copied into the worker's FAKE_NVML_DIR, and
# the worker is labelled FAKE_NVML_LABEL=true. Without gcc (or with
# KIND_FAKE_GPUS=0) it says so and no worker gets them: the agent then runs
# nowhere and the rest works as before. Idempotent; `up` again repairs them.
fake_gpus() {
  local library name alias ip container layout labelled=0
  if [[ "${KIND_FAKE_GPUS:-1}" != 1 ]]; then
    log "kind: no fake GPUs (KIND_FAKE_GPUS=${KIND_FAKE_GPUS}): the GPU agent runs nowhere"
    return 0
  fi
  if ! library="$(bash "$REPO_ROOT/tests/fake_nvml/build.sh" "$STATE_DIR/fake-nvml")"; then
    log "kind: no fake GPUs (the fake NVML library did not build, above): the GPU agent runs nowhere"
    return 0
  fi
  declare -A by_ip=()
  while read -r container ip; do
    [[ -n "$ip" ]] && by_ip[$ip]="$container"
  done < <(for container in $(kind_cmd get nodes --name "$CLUSTER"); do
    docker inspect -f "$container {{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}" "$container"
  done)
  while read -r name alias ip; do
    layout="$REPO_ROOT/tests/fake_nvml/layouts/$alias.json"
    container="${by_ip[$ip]:-}"
    [[ -f "$layout" && -n "$container" ]] || continue
    docker exec "$container" mkdir -p "$FAKE_NVML_DIR"
    # Written beside and renamed: an agent running from the old library keeps its mapping.
    docker exec -i "$container" sh -c 'cat >"$1.tmp" && chmod 0755 "$1.tmp" && mv "$1.tmp" "$1"' - \
      "$FAKE_NVML_DIR/libnvidia-ml.so.1" <"$library"
    docker exec -i "$container" sh -c 'cat >"$1.tmp" && chmod 0644 "$1.tmp" && mv "$1.tmp" "$1"' - \
      "$FAKE_NVML_DIR/layout.json" <"$layout"
    node_kubectl label node "$name" --overwrite "$FAKE_NVML_LABEL=true" >/dev/null
    labelled=$((labelled + 1))
  done < <(node_kubectl get nodes -l gpu-node-name -o \
    jsonpath='{range .items[*]}{.metadata.name} {.metadata.labels.gpu-node-name} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  log "kind: fake GPUs (NVML library and layout in $FAKE_NVML_DIR) on $labelled workers"
}

# release_values IMAGE: the values file of the gpu-scheduler release on KinD
# (install uses it; the KinD upgrade test gives it to both charts it installs,
# so that the release it leaves is the one install makes): IMAGE named in full
# (registry empty: the charts' default names a release's registry) with its ID
# in the pods' annotations (a rebuilt image keeps its tag, gpu-scheduler:dev:
# the ID makes an upgrade roll the Deployments onto it; BUILD_IMAGES=pull:
# tagged by commit, the tag says it), pullPolicy Never (the nodes run exactly
# the images loaded; pull: IfNotPresent), the webhook on KIND_WEBHOOK_PORT,
# and the chart's GPU agent on the workers fake_gpus prepared, with the
# library and layout mounted from the node.
release_values() {
  local repository tag pull_policy=Never annotations="{}" id name
  read -r repository tag <<<"$(split_image "$1")"
  if [[ "$BUILD_IMAGES" == pull ]]; then
    pull_policy=IfNotPresent
  else
    id="$(docker image inspect -f '{{.Id}}' "$1")" || die "image $1 is not in the local Docker"
    annotations="{\"gpu-scheduler/image-id\": \"$id\"}"
  fi
  name="$(tr -c 'A-Za-z0-9.\n-' _ <<<"$1")"
  local file="$STATE_DIR/release-values-$name.yaml"
  mkdir -p "$STATE_DIR"
  cat >"$file" <<EOF
image:
  registry: ""
  repository: "$repository"
  tag: "$tag"
  pullPolicy: $pull_policy
scheduler:
  podAnnotations: $annotations
webhook:
  port: $KIND_WEBHOOK_PORT
  podAnnotations: $annotations
agent:
  interval: 10
  affinity:
    nodeAffinity: null
  nodeSelector:
    $FAKE_NVML_LABEL: "true"
  extraEnv:
    - {name: LD_LIBRARY_PATH, value: $FAKE_NVML_DIR}
    - {name: FAKE_NVML_LAYOUT, value: $FAKE_NVML_DIR/layout.json}
  extraVolumes:
    - name: fake-nvml
      hostPath: {path: $FAKE_NVML_DIR, type: Directory}
  extraVolumeMounts:
    - {name: fake-nvml, mountPath: $FAKE_NVML_DIR, readOnly: true}
EOF
  echo "$file"
}

# default_storage: a default WaitForFirstConsumer StorageClass, as upstream kindest/node
# images bring (`standard`, rancher's local-path-provisioner): a claim's volume is made on
# the node its pod is scheduled to, the way EKS's and GKE's default classes work. A cluster
# that has one keeps it untouched. Otherwise (our offline node image, for which kind
# installs its fallback `standard`, an Immediate class of kubernetes.io/host-path) the
# provisioner is built here (scripts/local-path-image.sh), loaded into the workers and
# installed with the class `standard` (cluster/kind/local-path/local-path-storage.yaml),
# replacing kind's fallback (a class's binding mode cannot change). A `standard` of anyone
# else is left alone, and ours is the default only where no other class is. Idempotent.
LOCAL_PATH_MANIFEST="$REPO_ROOT/cluster/kind/local-path/local-path-storage.yaml"
LOCAL_PATH_PROVISIONER=rancher.io/local-path
default_storage() {
  local classes found standard image others
  classes="$(node_kubectl get storageclasses -o jsonpath='{range .items[*]}{.metadata.name} {.provisioner} {.volumeBindingMode} {.metadata.annotations.storageclass\.kubernetes\.io/is-default-class}{"\n"}{end}')"
  found="$(awk '$3 == "WaitForFirstConsumer" && $4 == "true" { print $1 " (" $2 ")"; exit }' <<<"$classes")"
  if [[ -n "$found" ]]; then
    log "kind: default StorageClass $found is WaitForFirstConsumer"
    return 0
  fi
  standard="$(awk '$1 == "standard" { print $2, $3 }' <<<"$classes")"
  case "$standard" in
    "" | "kubernetes.io/host-path Immediate" | "$LOCAL_PATH_PROVISIONER "*) ;;
    *)
      log "kind: StorageClass standard ($standard) is not kind's nor ours: left alone, and no default WaitForFirstConsumer class added"
      return 0
      ;;
  esac
  image="$("$REPO_ROOT/scripts/local-path-image.sh")"
  load_images "$image"
  if [[ "$standard" == kubernetes.io/host-path* ]]; then
    node_kubectl delete storageclass standard >/dev/null
    log "kind: removed kind's fallback StorageClass standard (Immediate, kubernetes.io/host-path)"
  fi
  sed "s|IMAGE|$image|g" "$LOCAL_PATH_MANIFEST" | node_kubectl_apply
  others="$(awk '$1 != "standard" && $4 == "true" { print $1 }' <<<"$classes" | paste -sd, -)"
  if [[ -n "$others" ]]; then
    node_kubectl annotate storageclass standard --overwrite storageclass.kubernetes.io/is-default-class=false >/dev/null
    log "kind: StorageClass standard (WaitForFirstConsumer) added beside the default class $others, which stays the default"
  fi
  node_kubectl -n local-path-storage rollout status deployment/local-path-provisioner --timeout=120s >/dev/null ||
    { node_kubectl -n local-path-storage get pods -o wide >&2; die "local-path-provisioner did not roll out within 120s (above)"; }
  log "kind: StorageClass standard (WaitForFirstConsumer), its volumes made by $image"
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

# report_nodes: each node's kubelet state and the end of its journal, what
# else runs on this Docker engine, and the load: why nodes did not join or
# register. Kubelets that ran out of inotify instances are named with the fix.
report_nodes() {
  local container journal starved=0
  log "kind: the kubelet on each node of $CLUSTER:"
  for container in $(kind_cmd get nodes --name "$CLUSTER" 2>/dev/null); do
    echo "----- $container: systemctl status kubelet; journalctl -u kubelet | tail -n 25"
    docker exec "$container" systemctl status kubelet --no-pager --lines=0 2>&1 | sed -n 1,6p || true
    journal="$(docker exec "$container" journalctl -u kubelet --no-pager 2>&1 || true)"
    tail -n 25 <<<"$journal"
    grep -q "too many open files" <<<"$journal" && starved=1
  done
  echo "----- containers on this Docker engine"
  docker ps -a --format '{{.Names}}\t{{.Status}}\t{{.Image}}' || true
  echo "----- load: $(cat /proc/loadavg 2>/dev/null)"
  if ((starved)); then
    log "kind: kubelets failed with 'too many open files': this machine's inotify instances ran out (fs.inotify.max_user_instances=$(inotify_limit)). Delete the other clusters above, or raise the limit: $INOTIFY_FIX (kind's known issues)"
  fi
}

# What kind's known issues advise when kubelets run out of inotify instances.
INOTIFY_ENOUGH=512
INOTIFY_FIX="sudo sysctl fs.inotify.max_user_instances=$INOTIFY_ENOUGH"
inotify_limit() { cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo unknown; }

# warn_other_clusters: the nodes of other kind clusters on this engine share
# this machine's cores and its inotify instances (per user, so per host for
# root in every node). A 5-node cluster takes about 60 of the default 128:
# beside another one, kubelets fail to start ('too many open files') and
# kubeadm join fails after 4 minutes. Said before creating, with the fix.
warn_other_clusters() {
  local others limit
  others="$(docker ps --filter label=io.x-k8s.kind.cluster --format '{{.Label "io.x-k8s.kind.cluster"}}' |
    grep -vx "$CLUSTER" | sort | uniq -c | awk '{printf "%s%s (%s nodes)", sep, $2, $1; sep=", "}')" || true
  [[ -n "$others" ]] || return 0
  limit="$(inotify_limit)"
  log "kind: other kind clusters run on this Docker engine: $others; they share the cores and the inotify instances (fs.inotify.max_user_instances=$limit)"
  if [[ "$limit" =~ ^[0-9]+$ ]] && ((limit < INOTIFY_ENOUGH)); then
    log "kind: with $limit, kubelets may fail with 'too many open files'; delete those clusters (kind delete cluster --name NAME) or raise the limit: $INOTIFY_FIX"
  fi
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
    config="$(cluster_config "$image")"
    # A failed `up` leaves kind's network behind: still ours to remove.
    if ! docker network inspect kind >/dev/null 2>&1 || [[ "$(state network_created)" == 1 ]]; then
      network_created=1
    fi
    save_state "$image" "$network_created"
    warn_other_clusters
    log "kind: creating cluster $CLUSTER with $image"
    # --retain: a failed create keeps its nodes, so that why a node did not
    # join is printed (kind's own error shows only kubeadm's side).
    if ! kind_cmd create cluster --name "$CLUSTER" --config "$config" --image "$image" \
      --kubeconfig "$KIND_KUBECONFIG" --retain; then
      report_nodes
      kind_cmd delete cluster --name "$CLUSTER" --kubeconfig "$KIND_KUBECONFIG" >/dev/null 2>&1 || true
      die "kind could not create cluster $CLUSTER (above: kind's error, then each node's kubelet)"
    fi
    log "kind: nodes joined in $((SECONDS - start))s"
  fi
  if is_offline_image "$(state image)"; then
    install_pod_network
  fi
  wait_ready
  configure_registry
  simulate_gpus
  fake_gpus
  default_storage
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
  rm -f "$KIND_KUBECONFIG" "$STATE_FILE" "$STATE_DIR/$CLUSTER-generated-config.yaml"
  log "kind: down in $((SECONDS - start))s"
}

# logs DIR: `kind export logs` of the cluster into DIR (every node's kubelet,
# containerd and journal, every pod's container logs), kept by CI when the
# e2e fails.
cmd_logs() {
  local dir="${1:?usage: $0 logs DIR}"
  need_docker "kind export logs"
  find_kind
  cluster_exists || die "kind cluster $CLUSTER does not exist: no logs to export"
  mkdir -p "$dir"
  # kind reports each command it could not run (our offline node image has
  # no crictl, say) and exports the rest: keep what it collected.
  if ! kind_cmd export logs "$dir" --name "$CLUSTER"; then
    log "kind: export logs reported errors (above); what it could collect is in $dir"
    return 0
  fi
  log "kind: the logs of cluster $CLUSTER are in $dir"
}

cmd_load() {
  (($#)) || die "usage: $0 load IMAGE..."
  need_docker "kind load"
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  ensure_state
  kind_cmd load docker-image --name "$CLUSTER" "$@"
}

cmd_load_missing() {
  if [[ "${1:-}" == --node ]]; then
    LOAD_NODE="${2:?usage: $0 load-missing [--node CONTAINER] IMAGE...}"
    shift 2
  fi
  (($#)) || die "usage: $0 load-missing [--node CONTAINER] IMAGE..."
  need_docker "kind load"
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  ensure_state
  load_images "$@"
}

cmd_kubeconfig() {
  need_docker "kind get kubeconfig"
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  ensure_state
  write_kubeconfig
}

# cluster_running: the cluster's control-plane container runs. Asks Docker
# only, so `make report` can choose a cluster without building kind.
cluster_running() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 &&
    [[ -n "$(docker ps -q --filter "label=io.x-k8s.kind.cluster=$CLUSTER" --filter label=io.x-k8s.kind.role=control-plane)" ]]
}

# prepare TARGET: what install/e2e/report need; KUBECONFIG names the cluster.
prepare() {
  need_docker "$1"
  need_tool "$1" helm
  need_tool "$1" kubectl
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  [[ -x "$REPO_ROOT/.venv/bin/pytest" ]] || die ".venv has no pytest: run 'make install'."
  ensure_state
  write_kubeconfig
  export KUBECONFIG="$KIND_KUBECONFIG"
}

kubectl_() { "$BIN_DIR/kubectl" "$@"; }

# ensure_images: both images in the local Docker. scripts/images.sh builds
# an image that is missing or whose inputs changed (a few seconds when
# nothing did); BUILD_IMAGES=0 takes them as they are (CI pulls them first).
ensure_images() {
  local image
  if [[ "$BUILD_IMAGES" == pull ]]; then
    log "images: the nodes pull $SCHEDULER_IMAGE and $CHECK_IMAGE themselves (BUILD_IMAGES=pull)"
    return
  fi
  if [[ "$BUILD_IMAGES" != 0 ]]; then
    log "images: scripts/images.sh build (rebuilds only what changed)"
    SCHEDULER_IMAGE="$SCHEDULER_IMAGE" CHECK_IMAGE="$CHECK_IMAGE" "$REPO_ROOT/scripts/images.sh" build >/dev/null
    return
  fi
  for image in "$SCHEDULER_IMAGE" "$CHECK_IMAGE"; do
    docker image inspect "$image" >/dev/null 2>&1 ||
      die "image $image is not in the local Docker and BUILD_IMAGES=0: docker pull it first, or unset BUILD_IMAGES to build it (scripts/images.sh)."
  done
  log "images: $SCHEDULER_IMAGE and $CHECK_IMAGE as they are in the local Docker (BUILD_IMAGES=0)"
}

# containerd_name REF: the name REF has in a node's containerd after `kind
# load` (Docker's normalisation: docker.io/library/ before a bare name,
# docker.io/ before a path whose first part is not a registry host).
containerd_name() {
  local ref="$1" first="${1%%/*}"
  if [[ "$ref" != */* ]]; then
    echo "docker.io/library/$ref"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then
    echo "docker.io/$ref"
  else
    echo "$ref"
  fi
}

# node_has_image CONTAINER REF ID: the node's containerd holds REF as the
# image ID (the config digest of its manifest, which is Docker's image ID).
# kind asks crictl the same before loading; the offline node image has no
# crictl (the Go module proxy does not serve cri-tools), so kind would load
# every image into every node again.
node_has_image() {
  # shellcheck disable=SC2016 # expanded by the node's shell
  docker exec "$1" sh -c 'digest="$(ctr -n k8s.io images ls "name==$0" | awk "NR == 2 { print \$3 }")" &&
    [ -n "$digest" ] && ctr -n k8s.io content get "$digest" | jq -r .config.digest' "$(containerd_name "$2")" \
    2>/dev/null | grep -qx "$3"
}

# load_images IMAGE...: into the workers only, where our pods run (the
# control plane is tainted and none of them tolerates it), and only where a
# worker does not hold the image's ID yet. LOAD_NODE: that worker container
# only (scripts/argocd.sh: Argo CD runs on one node).
load_images() {
  local workers image id node missing
  workers="$(docker ps --filter "label=io.x-k8s.kind.cluster=$CLUSTER" --filter label=io.x-k8s.kind.role=worker \
    --format '{{.Names}}' | sort)"
  [[ -n "$workers" ]] || die "cluster $CLUSTER has no running worker container"
  if [[ -n "${LOAD_NODE:-}" ]]; then
    grep -qx "$LOAD_NODE" <<<"$workers" || die "$LOAD_NODE is not a running worker container of cluster $CLUSTER"
    workers="$LOAD_NODE"
  fi
  for image in "$@"; do
    id="$(docker image inspect -f '{{.Id}}' "$image")" || die "image $image is not in the local Docker"
    missing=()
    for node in $workers; do
      node_has_image "$node" "$image" "$id" || missing+=("$node")
    done
    if ((${#missing[@]} == 0)); then
      log "kind: $image (${id:7:12}) is in every worker already"
      continue
    fi
    log "kind: loading $image (${id:7:12}) into ${missing[*]}"
    kind_cmd load docker-image --name "$CLUSTER" --nodes "$(IFS=,; echo "${missing[*]}")" "$image" >&2
  done
}

# release_diagnostics NAMESPACE: what a failed install leaves to read.
release_diagnostics() {
  local namespace="$1" job
  {
    echo "--- pods and jobs in $namespace"
    kubectl_ -n "$namespace" get pods,jobs -o wide
    echo "--- events in $namespace"
    kubectl_ -n "$namespace" get events --sort-by=.lastTimestamp | tail -n 40
    # A failed hook Job is kept (hook-delete-policy hook-succeeded).
    for job in $(kubectl_ -n "$namespace" get jobs -o name 2>/dev/null); do
      echo "--- logs of $job"
      kubectl_ -n "$namespace" logs "$job" --all-containers --tail=40
    done
  } >&2 || true
}

# helm_install RELEASE CHART NAMESPACE IMAGE [HELM ARG...]: `helm upgrade
# --install` with the image named in full (registry empty: the charts'
# default names a release's registry), pullPolicy Never (the nodes run
# exactly the images just loaded; with BUILD_IMAGES=pull IfNotPresent: the
# nodes pull them) and --wait. Hooks run: for gpu-scheduler the certificate Jobs.
helm_install() {
  local release="$1" chart="$2" namespace="$3" repository tag start=$SECONDS pull_policy=Never
  [[ "$BUILD_IMAGES" != pull ]] || pull_policy=IfNotPresent
  read -r repository tag <<<"$(split_image "$4")"
  shift 4
  log "helm: upgrade --install $release ($chart, image $repository:$tag) into $namespace"
  mkdir -p "$STATE_DIR"
  if ! "$BIN_DIR/helm" upgrade --install "$release" "$REPO_ROOT/charts/$chart" \
    --namespace "$namespace" --create-namespace \
    --set-string image.registry= --set-string image.repository="$repository" --set-string image.tag="$tag" \
    --set image.pullPolicy="$pull_policy" --wait --timeout 5m "$@" >"$STATE_DIR/helm-$release.log" 2>&1; then
    cat "$STATE_DIR/helm-$release.log" >&2
    release_diagnostics "$namespace"
    die "helm upgrade --install $release failed (above)"
  fi
  log "helm: $release deployed in $((SECONDS - start))s"
}

install_scheduler() {
  helm_install "$SCHEDULER_RELEASE" gpu-scheduler "$SCHEDULER_NAMESPACE" "$SCHEDULER_IMAGE" \
    --values "$(release_values "$SCHEDULER_IMAGE")"
  # What the hook Jobs left: the Secret they made and the caBundle they wrote.
  local secret ca_bundle
  secret="$(kubectl_ -n "$SCHEDULER_NAMESPACE" get secret "$SCHEDULER_RELEASE-webhook-tls" -o jsonpath='{.type}')" ||
    die "the certificate Job left no Secret $SCHEDULER_NAMESPACE/$SCHEDULER_RELEASE-webhook-tls"
  ca_bundle="$(kubectl_ get mutatingwebhookconfiguration "$SCHEDULER_RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')"
  [[ -n "$ca_bundle" ]] || die "the caBundle of MutatingWebhookConfiguration $SCHEDULER_RELEASE is empty after the hooks"
  log "helm: certificate hooks done: Secret $SCHEDULER_RELEASE-webhook-tls ($secret), caBundle of ${#ca_bundle} characters"
  # The chart's own test hook: a probe pod admitted by the webhook and bound
  # by the scheduler (`gpu-scheduler smoke-test` in a pod of its own).
  log "helm: test $SCHEDULER_RELEASE"
  if ! "$BIN_DIR/helm" test "$SCHEDULER_RELEASE" --namespace "$SCHEDULER_NAMESPACE" --logs --timeout 3m \
    >"$STATE_DIR/helm-test.log" 2>&1; then
    cat "$STATE_DIR/helm-test.log" >&2
    release_diagnostics "$SCHEDULER_NAMESPACE"
    die "helm test $SCHEDULER_RELEASE failed (above)"
  fi
  log "helm: test $(awk '/^TEST SUITE:/ { suite = $3 } /^Phase:/ { print suite, $2; exit }' "$STATE_DIR/helm-test.log")"
}

# wait_check_logs NAMESPACE: every check pod has logged a tick (its process
# runs); prints the last one of each, which names its node and the
# CUDA_VISIBLE_DEVICES its process has.
wait_check_logs() {
  local namespace="$1" pod line deadline=$((SECONDS + 90))
  for pod in $(kubectl_ -n "$namespace" get pods -l app.kubernetes.io/name=gpu-scheduler-check -o name | sort); do
    # A tick line (stderr may carry a line first, e.g. that NVML is missing).
    until line="$(kubectl_ -n "$namespace" logs "$pod" -c check 2>/dev/null | grep ' CUDA_VISIBLE_DEVICES=' | tail -n1)" &&
      [[ -n "$line" ]]; do
      ((SECONDS < deadline)) || { release_diagnostics "$namespace"; die "$pod logged nothing within 90s"; }
      sleep 1
    done
    log "check: ${pod#pod/}: $line"
  done
}

install_check() {
  local namespace="$1"
  helm_install "$CHECK_RELEASE" gpu-scheduler-check "$namespace" "$CHECK_IMAGE"
  kubectl_ -n "$namespace" get pods -o wide >&2
  wait_check_logs "$namespace"
}

uninstall_check() {
  "$BIN_DIR/helm" uninstall "$CHECK_RELEASE" --namespace "$1" --wait >/dev/null
  log "helm: $CHECK_RELEASE uninstalled from $1"
}

cmd_install() {
  prepare "${1:-make e2e}"
  ensure_images
  [[ "$BUILD_IMAGES" == pull ]] || load_images "$SCHEDULER_IMAGE" "$CHECK_IMAGE"
  install_scheduler
}

cmd_e2e() {
  local start=$SECONDS
  cmd_install "make e2e"
  # The check chart as users install it: every pod admitted, bound, running
  # and logging. It leaves again before the suite: its pods would hold the
  # GPUs the suite's own StatefulSets map.
  install_check "$CHECK_NAMESPACE"
  uninstall_check "$CHECK_NAMESPACE"
  log "e2e: installed in $((SECONDS - start))s; the e2e suite against the installed scheduler and webhook"
  cd "$REPO_ROOT"
  # E2E_USE_INSTALLED: the suite uses the installed scheduler and webhook
  # instead of starting its own processes; the rest tells it what is installed.
  E2E_USE_INSTALLED=1 E2E_CHECK_IMAGE="$CHECK_IMAGE" E2E_RELEASE="$SCHEDULER_RELEASE" \
    E2E_RELEASE_NAMESPACE="$SCHEDULER_NAMESPACE" .venv/bin/pytest -m e2e tests/e2e ${TEST_SELECTION:+-k "$TEST_SELECTION"}
  log "e2e: passed in $((SECONDS - start))s"
}

cmd_report() {
  local status=0
  cmd_install "make report"
  install_check "$DEMO_NAMESPACE"
  (cd "$REPO_ROOT" && .venv/bin/python scripts/report.py --namespace "$DEMO_NAMESPACE" --out "$REPORT_OUT") || status=$?
  if [[ "${KEEP:-0}" == 1 ]]; then
    log "report: KEEP=1: $CHECK_RELEASE stays in $DEMO_NAMESPACE (export KUBECONFIG=$KIND_KUBECONFIG)"
  else
    uninstall_check "$DEMO_NAMESPACE"
    kubectl_ delete namespace "$DEMO_NAMESPACE" --wait=false >/dev/null
  fi
  return "$status"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  logs) shift; cmd_logs "$@" ;;
  load) shift; cmd_load "$@" ;;
  load-missing) shift; cmd_load_missing "$@" ;;
  kubeconfig) cmd_kubeconfig ;;
  running) cluster_running ;;
  install) cmd_install "scripts/kind.sh install" ;;
  e2e) cmd_e2e ;;
  report) cmd_report ;;
  release-values) release_values "${2:?usage: $0 release-values IMAGE}" ;;
  *) die "usage: $0 up|down|logs DIR|load IMAGE...|load-missing [--node CONTAINER] IMAGE...|kubeconfig|running|install|e2e|report|release-values IMAGE" ;;
esac

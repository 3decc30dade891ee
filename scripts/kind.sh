#!/usr/bin/env bash
# KinD workflow for users with Docker (our machines and CI have none; see
# docs/delivery.md). One subcommand per make target:
#   up      create the cluster from cluster/kind-config.yaml (idempotent)
#   down    delete it
#   images  docker build both images
#   e2e     load the images into the cluster, helm install both charts (the
#           check's pods must all run), run the e2e suite against the cluster
# Env: KIND_CLUSTER (gpu-scheduler), SCHEDULER_IMAGE (gpu-scheduler:dev),
#      CHECK_IMAGE (gpu-scheduler-check:dev). An image that is not in the
#      local Docker is pulled first, so CI can test the images it pushed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLUSTER="${KIND_CLUSTER:-gpu-scheduler}"
SCHEDULER_IMAGE="${SCHEDULER_IMAGE:-gpu-scheduler:dev}"
CHECK_IMAGE="${CHECK_IMAGE:-gpu-scheduler-check:dev}"
KIND_KUBECONFIG="$CACHE_DIR/kind/kubeconfig"
SCHEDULER_NAMESPACE=gpu-scheduler-system
CHECK_NAMESPACE=gpu-scheduler-check

need_docker() {
  command -v docker >/dev/null 2>&1 ||
    die "docker is not installed: '$1' needs a Docker engine (https://docs.docker.com/engine/install/). Without Docker, 'make demo' runs the same checks on a local control plane."
  docker info >/dev/null 2>&1 ||
    die "docker is installed but its daemon does not answer ('docker info' fails): start Docker, or check that your user may use it, then run '$1' again."
}

need_kind() {
  command -v kind >/dev/null 2>&1 ||
    die "kind is not installed: '$1' needs it (go install sigs.k8s.io/kind@v0.30.0, or https://kind.sigs.k8s.io/docs/user/quick-start/#installation)."
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

cluster_exists() { kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; }

cmd_up() {
  need_docker "make kind-up"
  need_kind "make kind-up"
  if cluster_exists; then
    log "kind: cluster $CLUSTER already exists"
  else
    kind create cluster --name "$CLUSTER" --config "$REPO_ROOT/cluster/kind-config.yaml" --wait 120s
  fi
  mkdir -p "$(dirname "$KIND_KUBECONFIG")"
  kind get kubeconfig --name "$CLUSTER" >"$KIND_KUBECONFIG"
  log "kind: cluster $CLUSTER is up; export KUBECONFIG=$KIND_KUBECONFIG"
}

cmd_down() {
  need_kind "make kind-down"
  kind delete cluster --name "$CLUSTER"
  rm -f "$KIND_KUBECONFIG"
}

cmd_images() {
  need_docker "make images"
  docker build -t "$SCHEDULER_IMAGE" "$REPO_ROOT/apps/scheduler"
  docker build -t "$CHECK_IMAGE" "$REPO_ROOT/apps/check"
}

cmd_e2e() {
  need_docker "make e2e"
  need_kind "make e2e"
  need_tool "make e2e" helm
  need_tool "make e2e" kubectl
  cluster_exists || die "kind cluster $CLUSTER does not exist: run 'make kind-up' first."
  [[ -x "$REPO_ROOT/.venv/bin/pytest" ]] || die ".venv has no pytest: run 'make install'."
  mkdir -p "$(dirname "$KIND_KUBECONFIG")"
  kind get kubeconfig --name "$CLUSTER" >"$KIND_KUBECONFIG"
  export KUBECONFIG="$KIND_KUBECONFIG"

  local image
  for image in "$SCHEDULER_IMAGE" "$CHECK_IMAGE"; do
    docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image"
  done
  # The e2e suite deploys the check chart's StatefulSet with the image
  # gpu-scheduler-check:dev: give it that name too.
  local images=("$SCHEDULER_IMAGE" "$CHECK_IMAGE")
  if [[ "$CHECK_IMAGE" != gpu-scheduler-check:dev ]]; then
    docker tag "$CHECK_IMAGE" gpu-scheduler-check:dev
    images+=(gpu-scheduler-check:dev)
  fi
  kind load docker-image --name "$CLUSTER" "${images[@]}"

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
  images) cmd_images ;;
  e2e) cmd_e2e ;;
  *) die "usage: $0 up|down|images|e2e" ;;
esac

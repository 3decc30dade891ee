#!/usr/bin/env bash
# A KinD node image assembled offline, for machines that cannot pull
# kindest/node (ours: no image registry is reachable). It is what
# `kind build node-image` makes, minus the pulls that command always does:
#   1. a node base (cluster/kind/node/Dockerfile: Debian with systemd,
#      containerd, runc, CNI plugins and kind's node files from its Go module);
#   2. kubelet, kubeadm, kubectl in /usr/bin and /kind/version, at the
#      Kubernetes version cluster/local/go.mod pins;
#   3. the images `kubeadm config images list` names, each built here from
#      source (cluster/kind/images/) and imported into the node's containerd
#      (namespace k8s.io) under exactly the name kubeadm asks for;
#   4. `docker commit`.
# Users with internet never need it: cluster/kind-config.yaml pins the
# upstream kindest/node image.
#
#   kind-node-image.sh        print the image reference, building it first if missing
#   kind-node-image.sh tag    print the reference only (no build)
#
# The tag is a hash of every input (these files, the Go modules' go.mod/go.sum,
# the Debian base script), so an unchanged checkout reuses the image in
# Docker's store and any change makes a new one. Binaries are built into
# .cache/kind-node/bin with Go's default (shared, warm) caches.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KIND_MODULE_DIR="$REPO_ROOT/cluster/kind"
NODE_DIR="$KIND_MODULE_DIR/node"
IMAGES_DIR="$KIND_MODULE_DIR/images"
WORK_DIR="$CACHE_DIR/kind-node"
NODE_BIN="$WORK_DIR/bin"
REPOSITORY=gpu-scheduler-kind-node
BASE_REPOSITORY=gpu-scheduler-kind-base
# Built here, imported into the node, then removed from the host's Docker:
# the host never holds an image under an upstream (registry.k8s.io) name.
STAGING_REPOSITORY="gpu-scheduler-kind-staging-$$"
KIND_VERSION="$(mod_version "$KIND_MODULE_DIR/go.mod" sigs.k8s.io/kind)"

export GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0

# The node base depends on the Debian base, kind's node files and ours.
base_tag() {
  hash_files "$REPO_ROOT/scripts/debian-base.sh" "$KIND_MODULE_DIR/go.mod" "$KIND_MODULE_DIR/go.sum" \
    "$NODE_DIR"/*
}
node_tag() {
  echo "$K8S_VERSION-$(hash_files "${BASH_SOURCE[0]}" "$REPO_ROOT/scripts/debian-base.sh" \
    "$KIND_MODULE_DIR/go.mod" "$KIND_MODULE_DIR/go.sum" "$NODE_DIR"/* "$IMAGES_DIR"/* \
    "$REPO_ROOT/cluster/local/go.mod" "$REPO_ROOT/cluster/local/go.sum" "$REPO_ROOT/cluster/local/etcd/main.go")"
}

IMAGE="$REPOSITORY:$(node_tag)"
print_image_unless_to_build "$IMAGE" "${1:-}" "the offline node image"

START=$SECONDS
log "node image: building $IMAGE (Kubernetes $K8S_VERSION, kind $KIND_VERSION)"
mkdir -p "$NODE_BIN"
build_dir="$(mktemp -d "$WORK_DIR/build.XXXXXX")"
container=""
cleanup() {
  [[ -n "$container" ]] && docker rm -f -v "$container" >/dev/null 2>&1
  docker image ls --format '{{.Repository}}:{{.Tag}}' --filter "reference=$STAGING_REPOSITORY/*" |
    xargs -r docker rmi >/dev/null 2>&1
  rm -rf "$build_dir"
}
trap cleanup EXIT

# module_dir GOMOD_DIR MODULE: the module's source in Go's module cache.
module_dir() {
  (cd "$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")
}

# ---- binaries ---------------------------------------------------------------

# k8s_version BIN: the Kubernetes version a kubelet/kubeadm/... binary reports.
k8s_version() {
  case "${1##*/}" in
    kubeadm) "$1" version -o short 2>/dev/null ;;
    kubectl) "$1" version --client -o json 2>/dev/null | jq -r .clientVersion.gitVersion ;;
    *) "$1" --version 2>/dev/null | awk '{ print $2 }' ;;
  esac
}

# The control plane: .cache/bin's when `make control-plane` built it at our
# exact versions, a link into the build store (a symlink to some other
# binary is not good enough: the image would carry its version under ours).
for name in kube-apiserver kube-controller-manager kube-scheduler etcd; do
  src="$BIN_DIR/$name"
  if [[ -f "$src" && ( ! -L "$src" || "$(realpath "$src")" == "$BUILD_STORE"/* ) ]]; then
    src="$(realpath "$src")"
    if [[ "$name" == etcd && "$("$src" --version 2>/dev/null | head -n1)" == "etcd Version: ${ETCD_VERSION#v}" ]] ||
      [[ "$name" != etcd && "$(k8s_version "$src")" == "$K8S_VERSION" ]]; then
      ln -f "$src" "$NODE_BIN/$name" 2>/dev/null || cp "$src" "$NODE_BIN/$name"
    fi
  fi
done
pkgs=()
for name in kubelet kubeadm kubectl kube-proxy kube-apiserver kube-controller-manager kube-scheduler; do
  [[ -x "$NODE_BIN/$name" && "$(k8s_version "$NODE_BIN/$name")" == "$K8S_VERSION" ]] || pkgs+=("k8s.io/kubernetes/cmd/$name")
done
[[ -x "$NODE_BIN/etcd" && "$("$NODE_BIN/etcd" --version 2>/dev/null | head -n1)" == "etcd Version: ${ETCD_VERSION#v}" ]] ||
  pkgs+=(./etcd)
if ((${#pkgs[@]})); then
  # Stamped like a release build: kubeadm reads its own version, kind reads /kind/version.
  ldflags="$(k8s_release_ldflags)"
  names="${pkgs[*]##*/}"
  log "node image: building $names (Go $(go env GOVERSION); about 2 min with a warm Go cache)"
  step=$SECONDS
  (cd "$REPO_ROOT/cluster/local" && with_heartbeat "building $names" \
    go build -trimpath -ldflags "$ldflags" -o "$NODE_BIN/" "${pkgs[@]}")
  log "node image: built $names in $((SECONDS - step))s"
fi

# The images kubeadm will ask the node's containerd for; CoreDNS's and
# pause's versions come from this list.
mapfile -t required < <("$NODE_BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
((${#required[@]})) || die "kubeadm config images list printed nothing"
image_version() { printf '%s\n' "${required[@]}" | awk -F: -v n="$1" '$1 ~ "/" n "$" { print $2 }'; }
COREDNS_VERSION="$(image_version coredns)"
PAUSE_VERSION="$(image_version pause)"
[[ -n "$COREDNS_VERSION" && -n "$PAUSE_VERSION" ]] ||
  die "kubeadm's image list names no coredns or pause image: ${required[*]}"

if [[ "$("$NODE_BIN/coredns" -version 2>/dev/null | head -n1)" != "CoreDNS-${COREDNS_VERSION#v}" ]]; then
  log "node image: go install github.com/coredns/coredns@$COREDNS_VERSION (about 5 min with a cold Go cache)"
  step=$SECONDS
  (cd "$build_dir" && GOBIN="$NODE_BIN" with_heartbeat "building coredns" \
    go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION")
  log "node image: built coredns in $((SECONDS - step))s"
fi

# ---- node base --------------------------------------------------------------

DEBIAN_BASE="$("$REPO_ROOT/scripts/debian-base.sh")"
BASE_IMAGE="$BASE_REPOSITORY:$(base_tag)"
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  log "node image: base $BASE_IMAGE is cached"
else
  log "node image: docker build $BASE_IMAGE (Debian packages over apt; about 2 min)"
  step=$SECONDS
  context="$build_dir/base"
  mkdir -p "$context"
  cp -r "$NODE_DIR"/. "$context/"
  cp -r "$(module_dir "$KIND_MODULE_DIR" sigs.k8s.io/kind)/images/base/files" "$context/files"
  chmod -R u+w "$context" # the module cache is read-only
  with_heartbeat "building $BASE_IMAGE" \
    docker build --quiet --build-arg BASE_IMAGE="$DEBIAN_BASE" \
    --label org.opencontainers.image.description="gpu-scheduler offline KinD node base (kind $KIND_VERSION node files, Debian packages)" \
    -t "$BASE_IMAGE" "$context" >"$build_dir/base.log" 2>&1 ||
    { tail -n 40 "$build_dir/base.log" >&2; die "docker build of $BASE_IMAGE failed (log above)"; }
  log "node image: built $BASE_IMAGE in $((SECONDS - step))s"
fi

# ---- kubeadm's images -------------------------------------------------------

# build_image REF DOCKERFILE VERSION FILE...: docker build REF from a context
# holding FILEs (hard links when possible: binaries are ~100 MB).
build_image() {
  local ref="$1" dockerfile="$2" version="$3"; shift 3
  local context="$build_dir/ctx-${ref##*/}"
  mkdir -p "$context"
  cp "$IMAGES_DIR/$dockerfile" "$context/Dockerfile"
  local f
  for f in "$@"; do ln -f "$f" "$context/" 2>/dev/null || cp "$f" "$context/"; done
  docker build --quiet --build-arg BASE_IMAGE="$DEBIAN_BASE" --build-arg VERSION="$version" \
    --build-arg BINARY="$(basename "${1:-none}")" -t "$ref" "$context" >"$context.log" 2>&1 ||
    { tail -n 30 "$context.log" >&2; die "docker build of $ref ($dockerfile) failed (log above)"; }
}

KUBERNETES_SRC="$(module_dir "$REPO_ROOT/cluster/local" k8s.io/kubernetes)"
staged=()   # local name of each built image
wanted=()   # the name kubeadm asks for, same order
step=$SECONDS
for ref in "${required[@]}"; do
  name="${ref%:*}"; name="${name##*/}"
  local_ref="$STAGING_REPOSITORY/$name:${ref##*:}"
  log "node image: building $ref"
  case "$name" in
    kube-apiserver | kube-controller-manager | kube-scheduler)
      build_image "$local_ref" Dockerfile.static "$K8S_VERSION" "$NODE_BIN/$name" ;;
    etcd)
      # kubeadm asks for its own etcd tag; the binary is the etcd
      # cluster/local pins (its real version is in the image's label).
      build_image "$local_ref" Dockerfile.static "$ETCD_VERSION" "$NODE_BIN/etcd" ;;
    kube-proxy)
      build_image "$local_ref" Dockerfile.kube-proxy "$K8S_VERSION" "$NODE_BIN/kube-proxy" ;;
    coredns)
      build_image "$local_ref" Dockerfile.coredns "$COREDNS_VERSION" "$NODE_BIN/coredns" ;;
    pause)
      build_image "$local_ref" Dockerfile.pause "$PAUSE_VERSION" "$KUBERNETES_SRC/build/pause/linux/pause.c" ;;
    *) die "kubeadm asks for $ref, which this script does not know how to build (cluster/kind/images)" ;;
  esac
  staged+=("$local_ref")
  wanted+=("$ref")
done
log "node image: built ${#wanted[@]} images in $((SECONDS - step))s"

# ---- assemble ---------------------------------------------------------------

step=$SECONDS
container="gpu-scheduler-kind-node-build-$$"
# No volume on /var: containerd's content store must land in the image.
# --no-unpack below means no snapshot (no nested overlay mount) is needed.
# --init: something must reap containerd when it is stopped.
docker run -d --init --name "$container" --entrypoint sleep --security-opt seccomp=unconfined \
  "$BASE_IMAGE" infinity >/dev/null
in_node() { docker exec "$container" "$@"; }
for name in kubelet kubeadm kubectl; do
  docker cp "$NODE_BIN/$name" "$container:/usr/bin/$name"
done
in_node chown root:root /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl
in_node sh -c "printf %s '$K8S_VERSION' >/kind/version"
# The sandbox image kubelet's pods use: kubeadm's pause, the one imported.
pause_ref="$(printf '%s\n' "${wanted[@]}" | grep '/pause:')"
in_node sed -i "s|sandbox_image = \".*\"|sandbox_image = \"$pause_ref\"|" /etc/containerd/config.toml
in_node grep -q "sandbox_image = \"$pause_ref\"" /etc/containerd/config.toml ||
  die "could not set containerd's sandbox_image to $pause_ref"

log "node image: importing ${#wanted[@]} images into the node's containerd (namespace k8s.io)"
in_node bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
in_node bash -c 'for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; cat /tmp/containerd.log; exit 1' ||
  die "containerd did not start in the build container"
docker save "${staged[@]}" |
  docker exec -i "$container" ctr --namespace=k8s.io images import \
    --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack - >/dev/null
for i in "${!staged[@]}"; do
  in_node ctr --namespace=k8s.io images tag --force "docker.io/${staged[$i]}" "${wanted[$i]}" >/dev/null
  in_node ctr --namespace=k8s.io images rm "docker.io/${staged[$i]}" >/dev/null
done
# Check what the node holds against what kubeadm asked for, by name.
have="$(in_node ctr --namespace=k8s.io images ls -q | grep -v '^sha256:' | sort)"
[[ "$have" == "$(printf '%s\n' "${wanted[@]}" | sort)" ]] ||
  die "the node's containerd holds [$(echo $have)], kubeadm asks for [${wanted[*]}]"
in_node pkill -x containerd
in_node bash -c 'while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -f /tmp/containerd.log'

docker commit \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  --change "LABEL org.opencontainers.image.title=$REPOSITORY org.opencontainers.image.version=$K8S_VERSION" \
  --change "LABEL io.gpu-scheduler.kind-version=$KIND_VERSION io.gpu-scheduler.etcd-version=$ETCD_VERSION" \
  "$container" "$IMAGE" >/dev/null
log "node image: assembled in $((SECONDS - step))s; $IMAGE built in $((SECONDS - START))s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%.1f GB", $1 / 1e9 }'))"

# Earlier builds (other inputs) would pile up at ~1 GB each: remove them,
# except what a container (a running cluster) still uses.
for keep in "$IMAGE" "$BASE_IMAGE"; do
  docker image ls --format '{{.Repository}}:{{.Tag}}' "${keep%:*}" | { grep -vxF "$keep" || true; } |
    while read -r old; do
      docker rmi "$old" >/dev/null 2>&1 && log "node image: removed the older $old" || true
    done
done
echo "$IMAGE"

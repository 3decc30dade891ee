#!/usr/bin/env bash
# rancher's local-path-provisioner as an image built here, for KinD clusters whose node image
# has no default WaitForFirstConsumer StorageClass (ours, assembled offline; upstream
# kindest/node images ship this provisioner): scripts/kind.sh loads it into the workers and
# applies cluster/kind/local-path/local-path-storage.yaml with it.
#
#   local-path-image.sh        print the image reference, building it first if missing
#   local-path-image.sh tag    print the reference only (no build)
#
# The binary comes from the Go module cluster/kind/local-path/go.mod pins (go.sum checks it;
# Go's default caches), the base from scripts/debian-base.sh; nothing is pulled. The tag is a
# hash of every input, so an unchanged checkout reuses the image in Docker's store.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE_DIR="$REPO_ROOT/cluster/kind/local-path"
MODULE=github.com/rancher/local-path-provisioner
VERSION="$(mod_version "$MODULE_DIR/go.mod" "$MODULE")"
REPOSITORY=gpu-scheduler-local-path-provisioner
WORK_DIR="$CACHE_DIR/local-path"

IMAGE="$REPOSITORY:$VERSION-$(hash_files "${BASH_SOURCE[0]}" "$REPO_ROOT/scripts/debian-base.sh" \
  "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum" "$MODULE_DIR/Dockerfile")"
print_image_unless_to_build "$IMAGE" "${1:-}" "local-path-provisioner $VERSION as"

start=$SECONDS
mkdir -p "$WORK_DIR"
context="$(mktemp -d "$WORK_DIR/build.XXXXXX")"
trap 'rm -rf "$context"' EXIT
log "local-path: building local-path-provisioner $VERSION (Go module proxy; about 2 min with a cold Go cache)"
(cd "$MODULE_DIR" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -modcacherw" with_heartbeat "building local-path-provisioner" \
  go build -trimpath -ldflags "-s -w -X main.VERSION=$VERSION" -o "$context/local-path-provisioner" "$MODULE")
cp "$MODULE_DIR/Dockerfile" "$context/Dockerfile"
base="$("$REPO_ROOT/scripts/debian-base.sh")"
docker build --quiet --build-arg BASE_IMAGE="$base" --build-arg VERSION="$VERSION" -t "$IMAGE" "$context" \
  >"$context/build.log" 2>&1 || { tail -n 30 "$context/build.log" >&2; die "docker build of $IMAGE failed (log above)"; }
log "local-path: $IMAGE built in $((SECONDS - start))s"

# Earlier builds (other inputs) are removed, except what a container still uses.
docker image ls --format '{{.Repository}}:{{.Tag}}' "$REPOSITORY" | { grep -vxF "$IMAGE" || true; } |
  while read -r old; do
    docker rmi "$old" >/dev/null 2>&1 && log "local-path: removed the older $old" || true
  done
echo "$IMAGE"

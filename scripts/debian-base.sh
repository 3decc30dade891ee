#!/usr/bin/env bash
# A Debian bookworm base image made offline from Debian's own mirror, for
# machines that cannot pull from any image registry (ours): debootstrap a
# minimal root file system and `docker import` it. Users with a registry never
# need it: our Dockerfiles default to pinned upstream images.
#
#   debian-base.sh [ARCH]   prints the image reference, building it first if
#                           missing; ARCH: amd64 or arm64, default this machine's
#
# The tag is the architecture and a hash of this script, so an edit here makes
# a new image and an unchanged script reuses the one in Docker's store (shared
# by every clone). Another architecture's root file system is made under QEMU
# (scripts/binfmt.sh registers it). Docker 20.10 ignores `docker import
# --platform`: its image config then says this machine's architecture, which
# scripts/publish-images.sh corrects in the registry.
# Images built on top of it install what they need with apt (plain HTTP to
# the Debian mirror works inside builds here).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# ca-certificates: images on top of it talk TLS; nothing else beyond minbase.
INCLUDE=ca-certificates
ARCH="${1:-$(platform_arch)}"
case "$ARCH" in
  amd64 | arm64) ;;
  *) die "debian-base: architecture '$ARCH': choose amd64 or arm64" ;;
esac
REPOSITORY=gpu-scheduler-debian
TAG="$SUITE-$ARCH-$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
IMAGE="$REPOSITORY:$TAG"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE"
  exit 0
fi

command -v debootstrap >/dev/null || apt_install "debootstrap is missing (it builds $IMAGE)" debootstrap
# Without root: one line saying what to do (the image, once built, is used by
# anyone who can run docker).
[[ "$(id -u)" == 0 ]] ||
  die "building $IMAGE needs root (debootstrap): run 'sudo make images' once, or set PYTHON_IMAGE to a python 3.11 image your engine can pull"
# debootstrap runs the new system's programs (its second stage) in a chroot.
"$REPO_ROOT/scripts/binfmt.sh" ensure "linux/$ARCH" ||
  die "debian-base: $ARCH programs cannot run on this $(uname -m) machine (above), so no $ARCH root file system can be made"

# debootstrap mounts /proc (and on some hosts /sys, /dev/pts) inside the root
# file system and does not always unmount them (seen on a 6.18 kernel, where
# the unmount was refused as busy): unmount whatever is mounted below it,
# deepest first, lazily if it is busy, before it is archived or deleted.
unmount_below() {
  local dir="$1" mounts
  mounts="$(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)"
  [[ -z "$mounts" ]] && return 0
  while read -r mount; do
    umount "$mount" 2>/dev/null || umount -l "$mount"
  done <<<"$mounts"
}

rootfs="$(mktemp -d "${TMPDIR:-/tmp}/debian-rootfs.XXXXXX")"
trap 'unmount_below "$rootfs"; rm -rf --one-file-system "$rootfs"' EXIT
log "debian-base: debootstrap $SUITE $ARCH (minbase + $INCLUDE) from $MIRROR (about a minute; another architecture's, under QEMU, about three)"
with_heartbeat "running debootstrap" \
  debootstrap --arch="$ARCH" --variant=minbase --include="$INCLUDE" "$SUITE" "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 ||
  { tail -n 30 "$rootfs.log" >&2; die "debootstrap failed (log above)"; }
rm -f "$rootfs.log"
unmount_below "$rootfs"
# Smaller and reproducible-ish: no package lists or caches in the image; apt
# in a later build runs `apt-get update` first anyway.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
log "debian-base: docker import as $IMAGE"
# --one-file-system: never archive a mount that is still there (a host's /proc).
tar -C "$rootfs" --one-file-system -c . | docker import --platform "linux/$ARCH" \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "$IMAGE"

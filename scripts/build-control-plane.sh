#!/usr/bin/env bash
# Build (or reuse) the local control-plane binaries, linked into .cache/bin:
#   kube-apiserver kube-controller-manager kube-scheduler etcd  (cluster/local/go.mod)
#   kwok kwokctl                                                (cluster/local/kwok/go.mod)
# and, with LOCAL_K8S_MODULE=cluster/compat (the 1.35 stage, lib.sh), that
# module's kube-apiserver and kube-controller-manager, into .cache/bin/compat.
# They are built into the machine's build store (lib.sh: BUILD_STORE), in a
# folder named by a hash of their inputs, so that every clone shares them;
# one built for these inputs is linked, not built again. One found in
# $KUBEBUILDER_ASSETS or on PATH is linked instead of built if its
# major.minor matches (kwok: exact version).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Go's module and build caches stay in their default places (go env GOMODCACHE,
# GOCACHE): they are content-addressed, so every clone on the machine shares
# them and a fresh clone's first build is warm. -modcacherw keeps
# `go clean -modcache` able to delete what this wrote.
export GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0

# first_line BIN: the first line of `BIN --version`, or nothing.
first_line() { "$1" --version 2>/dev/null | head -n1 || true; }

# want NAME: the --version line of the binary we would build.
# accept NAME: the prefix an external binary's --version line must have.
want() {
  case "$1" in
    kwok*) echo "$1 version $KWOK_VERSION" ;;
    etcd) echo "etcd Version: ${ETCD_VERSION#v}" ;;
    *) echo "Kubernetes $K8S_VERSION" ;;
  esac
}
accept() {
  case "$1" in
    kwok*) want "$1" ;;
    etcd) echo "etcd Version: $(cut -d. -f1-2 <<<"${ETCD_VERSION#v}")." ;;
    *) echo "Kubernetes $K8S_MINOR." ;;
  esac
}

# store_dir MODULE_DIR: the build store's folder for the binaries of the
# module in MODULE_DIR, named by a hash of its inputs (its Go files, go.mod,
# go.sum, Go's version and platform, the versions stamped into them:
# K8S_VERSION is the module's own).
store_dir() {
  local key
  key="$( (cd "$REPO_ROOT/$1" && find . \( -name '*.go' -o -name go.mod -o -name go.sum \) -type f | LC_ALL=C sort |
    xargs cat; go version; go env GOOS GOARCH; echo "$K8S_VERSION $KWOK_VERSION") | sha256sum | cut -c1-12)"
  echo "$BUILD_STORE/$(basename "$1")-$key"
}

# Where the binaries are linked: .cache/bin, or LOCAL_K8S_BIN for another module's.
LINK_DIR="$BIN_DIR"

# reuse NAME STORE: 0 if NAME is in STORE (linked into LINK_DIR) or an
# external binary can stand in (linked); 1 if it must be built.
reuse() {
  local name="$1" dst="$LINK_DIR/$1" stored="$2/$1" ext
  if [[ -x "$stored" ]]; then
    ln -sfn "$stored" "$dst"
    log "$name: built for these inputs ($stored)"
    return 0
  fi
  rm -f "$dst" # stale: never let `go build -o` write through a link
  ext="$(find_binary "$name")"
  if [[ -n "$ext" && "$(realpath "$ext")" != "$BIN_DIR"/* && "$(realpath "$ext")" != "$BUILD_STORE"/* &&
    "$(first_line "$ext")" == "$(accept "$name")"* ]]; then
    ln -sfn "$ext" "$dst"; log "$name: using $ext ($(first_line "$ext"))"; return 0
  fi
  return 1
}

# go_build DIR STORE LDFLAGS PKG...: one `go build` for all PKGs so they share
# compile work, into STORE (whole or not at all: another clone may build the
# same at once), each linked into LINK_DIR.
go_build() {
  local dir="$1" store="$2" ldflags="$3"; shift 3
  local names="${*##*/}" start=$SECONDS tmp name
  log "building $names (Go $(go env GOVERSION), $(nproc) cores; a cold build takes minutes)"
  tmp="$store.$$.tmp"
  mkdir -p "$tmp"
  (cd "$REPO_ROOT/$dir" && with_heartbeat "building $names" \
    go build -trimpath -ldflags "$ldflags" -o "$tmp/" "$@")
  mkdir -p "$store"
  for name in $names; do
    mv "$tmp/$name" "$store/$name"
    ln -sfn "$store/$name" "$LINK_DIR/$name"
  done
  rm -rf "$tmp"
  log "built $names in $((SECONDS - start))s ($store)"
}

command -v go >/dev/null || die "go not found (need Go >= 1.24)"

store="$(store_dir cluster/local)"
pkgs=()
for name in kube-apiserver kube-controller-manager kube-scheduler; do
  reuse "$name" "$store" || pkgs+=("k8s.io/kubernetes/cmd/$name")
done
reuse etcd "$store" || pkgs+=(./etcd) # cluster/local/etcd: etcd's main at k8s's pinned version
if ((${#pkgs[@]})); then
  # kwokctl parses `kube-apiserver --version`, so stamp the version like a release build.
  go_build cluster/local "$store" "$(k8s_release_ldflags)" "${pkgs[@]}"
fi

store="$(store_dir cluster/local/kwok)"
pkgs=()
for name in kwok kwokctl; do
  reuse "$name" "$store" || pkgs+=("sigs.k8s.io/kwok/cmd/$name")
done
if ((${#pkgs[@]})); then
  go_build cluster/local/kwok "$store" "-s -w -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}" "${pkgs[@]}"
fi

# The 1.35 stage's control plane: another module's kube-apiserver and
# kube-controller-manager, stamped with its own version (kwokctl reads it);
# etcd, kwok and kwokctl are the ones above.
if [[ "$LOCAL_K8S_MODULE" != cluster/local ]]; then
  K8S_VERSION="$LOCAL_K8S_VERSION" K8S_MINOR="${LOCAL_K8S_VERSION%.*}" LINK_DIR="$LOCAL_K8S_BIN"
  mkdir -p "$LINK_DIR"
  store="$(store_dir "$LOCAL_K8S_MODULE")"
  pkgs=()
  for name in kube-apiserver kube-controller-manager; do
    reuse "$name" "$store" || pkgs+=("k8s.io/kubernetes/cmd/$name")
  done
  if ((${#pkgs[@]})); then
    go_build "$LOCAL_K8S_MODULE" "$store" "$(k8s_release_ldflags)" "${pkgs[@]}"
  fi
  log "Kubernetes $K8S_VERSION's kube-apiserver and kube-controller-manager ready in $LINK_DIR"
fi

log "control plane ready in $BIN_DIR"

#!/usr/bin/env bash
# Build (or reuse) the local control-plane binaries into .cache/bin:
#   kube-apiserver kube-controller-manager kube-scheduler etcd  (cluster/local/go.mod)
#   kwok kwokctl                                                (cluster/local/kwok/go.mod)
# Idempotent: a binary already in .cache/bin with the right version is kept.
# One found in $KUBEBUILDER_ASSETS or on PATH is symlinked instead of built if
# its major.minor matches (kwok: exact version).
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

# reuse NAME: 0 if .cache/bin/NAME is usable as it is or could be symlinked
# to an external binary; 1 if it must be built.
reuse() {
  local name="$1" dst="$BIN_DIR/$1" ext
  if [[ -L "$dst" ]]; then
    if [[ "$(first_line "$dst")" == "$(accept "$name")"* ]]; then
      log "$name: using $(readlink "$dst") ($(first_line "$dst"))"; return 0
    fi
    rm -f "$dst" # stale link: never let `go build -o` write through it
  elif [[ -f "$dst" && "$(first_line "$dst")" == "$(want "$name")"* ]]; then
    log "$name: up to date ($(want "$name"))"; return 0
  fi
  ext="$(find_binary "$name")"
  if [[ -n "$ext" && "$(realpath "$ext")" != "$BIN_DIR"/* &&
    "$(first_line "$ext")" == "$(accept "$name")"* ]]; then
    ln -sfn "$ext" "$dst"; log "$name: using $ext ($(first_line "$ext"))"; return 0
  fi
  return 1
}

# go_build DIR LDFLAGS PKG...: one `go build` for all PKGs so they share compile work.
go_build() {
  local dir="$1" ldflags="$2"; shift 2
  local names="${*##*/}" start=$SECONDS
  log "building $names (Go $(go env GOVERSION), $(nproc) cores; a cold build takes minutes)"
  (cd "$REPO_ROOT/$dir" && with_heartbeat "building $names" \
    go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/" "$@")
  log "built $names in $((SECONDS - start))s"
}

command -v go >/dev/null || die "go not found (need Go >= 1.24)"

pkgs=()
for name in kube-apiserver kube-controller-manager kube-scheduler; do
  reuse "$name" || pkgs+=("k8s.io/kubernetes/cmd/$name")
done
reuse etcd || pkgs+=(./etcd) # cluster/local/etcd: etcd's main at k8s's pinned version
if ((${#pkgs[@]})); then
  # kwokctl parses `kube-apiserver --version`, so stamp the version like a release build.
  ldflags="$(k8s_release_ldflags)"
  go_build cluster/local "$ldflags" "${pkgs[@]}"
fi

pkgs=()
for name in kwok kwokctl; do
  reuse "$name" || pkgs+=("sigs.k8s.io/kwok/cmd/$name")
done
if ((${#pkgs[@]})); then
  go_build cluster/local/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}" "${pkgs[@]}"
fi

log "control plane ready in $BIN_DIR"

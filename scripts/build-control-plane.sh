#!/usr/bin/env bash
# Build (or reuse) the local control-plane binaries into .cache/bin:
#   kube-apiserver kube-controller-manager kube-scheduler  (cluster/local/go.mod)
#   kwok kwokctl                                            (cluster/local/kwok/go.mod)
#   etcd                                                    (Debian's etcd-server)
# Idempotent: a binary already in .cache/bin with the right version is kept;
# one found in $KUBEBUILDER_ASSETS or on PATH (same major.minor) is symlinked.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Keep all Go state inside the repo cache so a second run is fast and
# `rm -rf .cache` works (-modcacherw: module files are normally read-only).
export GOMODCACHE="$CACHE_DIR/go/mod" GOCACHE="$CACHE_DIR/go/build"
export GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0

# first_line BIN: the first line of `BIN --version`, or nothing.
first_line() { "$1" --version 2>/dev/null | head -n1 || true; }

# want_version NAME: the --version line a binary we build prints.
want_version() {
  case "$1" in
    kwok | kwokctl) echo "$1 version $KWOK_VERSION" ;;
    *) echo "Kubernetes $K8S_VERSION" ;;
  esac
}

# reuse NAME: 0 if .cache/bin/NAME is usable (own build with the exact version,
# or a symlink to an external one) or an external one could be linked there.
reuse() {
  local name="$1" dst="$BIN_DIR/$1" want ext v
  want="$(want_version "$name")"
  if [[ -L "$dst" && -x "$dst" ]]; then
    log "$name: using $(readlink "$dst") ($(first_line "$dst"))"; return 0
  fi
  if [[ -f "$dst" && "$(first_line "$dst")" == "$want"* ]]; then
    log "$name: up to date (${want})"; return 0
  fi
  ext="$(find_binary "$name")"
  if [[ -n "$ext" && "$(realpath "$ext")" != "$BIN_DIR"/* ]]; then
    v="$(first_line "$ext")"
    # External k8s binaries only need the same major.minor; kwok the same version.
    if [[ "$name" == kwok* && "$v" == "$want"* ]] || [[ "$name" == kube-* && "$v" == "Kubernetes $K8S_MINOR."* ]]; then
      ln -sfn "$ext" "$dst"; log "$name: using $ext ($v)"; return 0
    fi
  fi
  return 1
}

# go_build DIR LDFLAGS PKG...: one `go build` for all PKGs so they share compile work.
go_build() {
  local dir="$1" ldflags="$2"; shift 2
  local start=$SECONDS
  log "building ${*##*/} (Go $(go env GOVERSION), $(nproc) cores; cold build takes a while)"
  (cd "$REPO_ROOT/$dir" && with_heartbeat "building ${*##*/}" \
    go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/" "$@")
  log "built ${*##*/} in $((SECONDS - start))s"
}

command -v go >/dev/null || die "go not found (need Go >= 1.24)"

k8s=()
for name in kube-apiserver kube-controller-manager kube-scheduler; do
  reuse "$name" || k8s+=("k8s.io/kubernetes/cmd/$name")
done
if ((${#k8s[@]})); then
  # kwokctl parses `kube-apiserver --version`, so stamp the version like a release build.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION") -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  go_build cluster/local "$ldflags" "${k8s[@]}"
fi

kw=()
for name in kwok kwokctl; do
  reuse "$name" || kw+=("sigs.k8s.io/kwok/cmd/$name")
done
if ((${#kw[@]})); then
  go_build cluster/local/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}" "${kw[@]}"
fi

# etcd: no Go build (etcd's module graph is its own world); Debian's 3.4 works.
if [[ ! -x "$BIN_DIR/etcd" ]]; then
  ext="$(find_binary etcd)"
  if [[ -z "$ext" || "$(realpath "$ext")" == "$BIN_DIR"/* ]]; then
    sudo=""
    if ((EUID != 0)); then
      command -v sudo >/dev/null || die "etcd not found: install Debian's etcd-server (apt-get install etcd-server) or put etcd on PATH / in \$KUBEBUILDER_ASSETS"
      sudo="sudo"
    fi
    log "etcd: installing Debian package etcd-server"
    # policy-rc.d 101 stops the package from starting a system etcd on :2379.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      $sudo sh -c 'printf "#!/bin/sh\nexit 101\n" >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
      trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server >/dev/null
    ext="$(command -v etcd)" || die "etcd-server installed but no etcd on PATH"
  fi
  ln -sfn "$ext" "$BIN_DIR/etcd"
  log "etcd: using $ext ($(first_line "$ext"))"
else
  log "etcd: using $(readlink -f "$BIN_DIR/etcd")"
fi

log "control plane ready in $BIN_DIR"

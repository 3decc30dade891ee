# Shared helpers for the local-cluster scripts. Source it; don't run it.
# shellcheck shell=bash

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${CACHE_DIR:-$REPO_ROOT/.cache}"
BIN_DIR="$CACHE_DIR/bin"
CLUSTER_DIR="${LOCAL_CLUSTER_DIR:-$CACHE_DIR/local-cluster}"
mkdir -p "$BIN_DIR"
# The machine's store of what our scripts build or install, shared by every
# clone on the machine as Go's own caches are (GPU_SCHEDULER_STORE):
#   bin/    binaries built from Go modules, each <name>-<hash of its inputs>
#           (go.mod, go.sum, Go's version, the flags), written whole or not
#           at all, so a clone gets one only when it would build the same;
#   tools/  tool installs (the lint tools' venv, gitlab-ci-local), each in a
#           folder named by its pins, installed under a lock.
# .cache links to them. Delete the folder to reclaim its space; the next
# build fills it again. Without a HOME (a test's bare environment) it is this
# clone's own.
if [[ -n "${XDG_CACHE_HOME:-}" || -n "${HOME:-}" ]]; then
  MACHINE_STORE="${GPU_SCHEDULER_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-scheduler}"
else
  MACHINE_STORE="${GPU_SCHEDULER_STORE:-$CACHE_DIR/store}"
fi
BUILD_STORE="$MACHINE_STORE/bin"
TOOLS_STORE="$MACHINE_STORE/tools"

# One source of truth for versions: the tools modules' go.mod files.
# mod_version GOMOD MODULE: the version MODULE is required at.
mod_version() {
  awk -v m="$2" '{ for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v[0-9]/) { print $(i + 1); exit } }' "$1"
}
K8S_VERSION="$(mod_version "$REPO_ROOT/cluster/local/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version "$REPO_ROOT/cluster/local/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(mod_version "$REPO_ROOT/cluster/local/kwok/go.mod" sigs.k8s.io/kwok)"
K8S_MINOR="${K8S_VERSION%.*}" # v1.37
# The Kubernetes the local cluster runs: cluster/local's (every test) unless
# LOCAL_K8S_MODULE names another tools module (cluster/compat: the 1.35
# stage, scripts/test-compat.sh), whose kube-apiserver and
# kube-controller-manager are then linked into .cache/bin/<its folder>;
# etcd, kwok, kubectl and helm stay cluster/local's.
LOCAL_K8S_MODULE="${LOCAL_K8S_MODULE:-cluster/local}"
if [[ "$LOCAL_K8S_MODULE" == cluster/local ]]; then
  LOCAL_K8S_VERSION="$K8S_VERSION" LOCAL_K8S_BIN="$BIN_DIR"
else
  LOCAL_K8S_VERSION="$(mod_version "$REPO_ROOT/$LOCAL_K8S_MODULE/go.mod" k8s.io/kubernetes)"
  LOCAL_K8S_BIN="$BIN_DIR/${LOCAL_K8S_MODULE##*/}"
fi

# k8s_release_ldflags: -ldflags that stamp K8S_VERSION into Kubernetes
# binaries as a release build does (kwokctl, kubeadm and kind read it back).
k8s_release_ldflags() {
  local pkg ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION") -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  echo "$ldflags"
}

# host_python: the machine's python3 (or $PYTHON), never the project's .venv
# one that the Makefile puts first on PATH (the venv is made from it).
host_python() {
  if [[ -n "${PYTHON:-}" ]]; then command -v "$PYTHON"; return; fi
  local dir
  local IFS=:
  for dir in $PATH; do
    [[ "$dir" == "$REPO_ROOT/.venv/bin" || "$dir" == "$BIN_DIR" ]] && continue
    [[ -x "$dir/python3" ]] && { echo "$dir/python3"; return; }
  done
}

# may_install_packages: whether a script may install Debian packages itself:
# as root, with apt-get, and only when asked (CI=true, or INSTALL_PACKAGES=1).
# A user's machine is theirs: elsewhere the script names what to install.
may_install_packages() {
  [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1 &&
    [[ "${CI:-}" == true || "${INSTALL_PACKAGES:-}" == 1 ]]
}

# apt_install WHY PACKAGE...: install the packages when allowed (above), else
# stop with one line naming them and how to let the script do it.
apt_install() {
  local why="$1"
  shift
  may_install_packages ||
    die "$why: install $* (Debian/Ubuntu: apt-get install $*), or run again as root with INSTALL_PACKAGES=1 to let this script install it"
  log "apt-get install $* ($why)"
  # The package lists may be missing on a fresh machine: update once.
  apt-cache policy "$1" 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# stored_install NAME-KEY LINK INSTALL_FUNCTION: TOOLS_STORE/NAME-KEY, filled
# once by INSTALL_FUNCTION DIR (under a lock: another clone may want it at
# the same time; a ".complete" mark says it finished), LINK pointing at it.
stored_install() {
  local dir="$TOOLS_STORE/$1" link="$2" install="$3"
  mkdir -p "$TOOLS_STORE"
  if [[ ! -f "$dir/.complete" ]]; then
    (
      flock 8
      if [[ ! -f "$dir/.complete" ]]; then
        rm -rf "$dir"
        mkdir -p "$dir"
        "$install" "$dir" && touch "$dir/.complete"
      fi
    ) 8>"$dir.lock" || return 1
  fi
  if [[ -e "$link" && ! -L "$link" ]]; then rm -rf "$link"; fi # an install of an older layout
  ln -sfn "$dir" "$link"
}

_T0=$SECONDS
# log MSG: progress line prefixed with seconds since the script started.
log() { printf '[%4ds] %s\n' "$((SECONDS - _T0))" "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# with_heartbeat LABEL CMD...: run CMD, printing a line every 20s so a user
# on a slow (2-core) machine can see it is alive. Returns CMD's exit status.
with_heartbeat() {
  local label="$1"; shift
  local start=$SECONDS
  "$@" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 20); do
      sleep 1
      kill -0 "$pid" 2>/dev/null || break 2
    done
    log "... still $label ($((SECONDS - start))s)"
  done
  wait "$pid"
}

# hash_files FILE...: one short hash over the files' paths (from the checkout's top) and
# contents: the tag of an image built here from them.
hash_files() {
  (cd "$REPO_ROOT" && for f in "$@"; do echo "${f#"$REPO_ROOT"/}"; cat "$f"; done) | sha256sum | cut -c1-12
}

# print_image_unless_to_build IMAGE ARG WHAT: how a script that prints the reference of an
# image it builds here starts (scripts/kind-node-image.sh, scripts/local-path-image.sh).
# ARG `tag`: prints IMAGE and exits; IMAGE in Docker's store: prints it and exits; else it
# returns, once Docker and Go are there, for the script to build WHAT.
print_image_unless_to_build() {
  local image="$1" arg="$2" what="$3"
  if [[ "$arg" == tag ]]; then
    echo "$image"
    exit 0
  fi
  [[ -z "$arg" ]] || die "usage: $0 [tag]"
  command -v docker >/dev/null && docker info >/dev/null 2>&1 ||
    die "no Docker engine answers: building $image needs one (scripts/docker-engine.sh ensure)"
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "$image"
    exit 0
  fi
  command -v go >/dev/null || die "go not found: building $what $image needs Go >= 1.24"
}

# find_binary NAME: first of KUBEBUILDER_ASSETS/NAME, then NAME on PATH.
# Prints the path, or nothing.
find_binary() {
  local name="$1"
  if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/$name" ]]; then
    echo "$KUBEBUILDER_ASSETS/$name"
  else
    command -v "$name" 2>/dev/null || true
  fi
}

# lock_cluster: serialize local-up/local-down (tests may call them in parallel).
# Child scripts inherit fd 9 and the env flag, so nesting does not deadlock.
lock_cluster() {
  [[ -n "${_LOCAL_CLUSTER_LOCKED:-}" ]] && return 0
  exec 9>"$CACHE_DIR/local-cluster.lock"
  flock 9 || die "cannot lock $CACHE_DIR/local-cluster.lock"
  export _LOCAL_CLUSTER_LOCKED=1
}

# The platform of a tool to download, as release files name it (linux/darwin,
# amd64/arm64/...; "unsupported" otherwise). TOOLS_OS, TOOLS_ARCH override
# uname for tests and odd machines.
platform_os() {
  case "${TOOLS_OS:-$(uname -s)}" in
    Linux | linux) echo linux ;;
    Darwin | darwin) echo darwin ;;
    *) echo unsupported ;;
  esac
}
platform_arch() {
  case "${TOOLS_ARCH:-$(uname -m)}" in
    x86_64 | amd64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    armv7l | arm) echo arm ;;
    ppc64le) echo ppc64le ;;
    s390x) echo s390x ;;
    *) echo unsupported ;;
  esac
}

# crane ARGS...: go-containerregistry's crane at the version cluster/crane pins,
# run by `go tool` (built once into Go's build cache); the release jobs'
# registry client (scripts/promote.sh, scripts/sign.sh).
crane() { (cd "$REPO_ROOT/cluster/crane" && GOFLAGS="${GOFLAGS:--modcacherw}" go tool crane "$@"); }

# sha256_of FILE: its hex digest, with whichever tool the system has.
sha256_of() {
  if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1; else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# pinned_tool NAME: the path of a NAME that the caller's reports_version accepts:
# .cache/bin's first, else the one on PATH; nothing (status 1) when neither does.
pinned_tool() {
  local on_path
  if [[ -x "$BIN_DIR/$1" ]] && reports_version "$BIN_DIR/$1"; then
    echo "$BIN_DIR/$1"
    return 0
  fi
  on_path="$(command -v "$1" 2>/dev/null || true)"
  if [[ -n "$on_path" && "$on_path" != "$BIN_DIR/$1" ]] && reports_version "$on_path"; then
    echo "$on_path"
    return 0
  fi
  return 1
}

#!/usr/bin/env bash
# Print the path of a promtool binary at the Prometheus version that
# cluster/prometheus/go.mod pins, getting one first when there is none. The Go
# module github.com/prometheus/prometheus is versioned v0.<major*100+minor>.<patch>:
# v0.316.0 is Prometheus 3.16.0. The first that works:
#   1. .cache/bin/promtool, when it reports that version;
#   2. a promtool on PATH that reports that version (a user's own install);
#   3. one this machine already has in its tools store (lib.sh:
#      stored_install), downloaded or built by any clone;
#   4. the release tarball for this OS and architecture from GitHub, kept only
#      when its sha256 is the one in the sha256sums.txt published with the
#      release (the v3.16.0 release is immutable on GitHub; no checksum of its
#      tarballs could be found to pin here, see cluster/prometheus/README.md);
#   5. otherwise `go build` of cmd/promtool from the Go module proxy
#      (cluster/prometheus/go.mod and go.sum pin every module) into the tools
#      store, in a folder named by a hash of its inputs. Cold on our 2 cores
#      (2026-12-06): go mod download 12 s, go build 245 s; an 88 MB binary.
#      Our machines reach no GitHub (that try fails in 3 s), so this is their way.
# Whichever it is, .cache/bin/promtool links to it. Nothing needs root.
# With none of these it stops with a message that names what to install.
# Env for tests and odd machines: TOOLS_OS, TOOLS_ARCH (default: uname).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE_DIR="$REPO_ROOT/cluster/prometheus"
MODULE=github.com/prometheus/prometheus
MODULE_VERSION="$(mod_version "$MODULE_DIR/go.mod" "$MODULE")"
minor="${MODULE_VERSION#v0.}" # 316.0
PROM_VERSION="$((${minor%%.*} / 100)).$((${minor%%.*} % 100)).${minor#*.}" # 3.16.0
LINK="$CACHE_DIR/promtool" # -> the store's folder that holds the promtool in use

# reports_version BIN: true when `BIN --version` says our version.
reports_version() { [[ "$("$1" --version 2>&1 | head -n1)" == "promtool, version $PROM_VERSION "* ]]; }

# use BIN: link .cache/bin/promtool to BIN and print its path.
use() {
  ln -sfn "$1" "$BIN_DIR/promtool"
  echo "$BIN_DIR/promtool"
  exit 0
}

if found="$(pinned_tool promtool)"; then
  [[ "$found" == "$BIN_DIR/promtool" ]] && { echo "$found"; exit 0; }
  use "$found"
fi

platform() { echo "$(platform_os)-$(platform_arch)"; }
PLATFORM="$(platform)"
RELEASE_NAME="promtool-$PROM_VERSION-release-$PLATFORM"

# ldflags: the version stamps Prometheus' own release build sets, from our pin.
ldflags() {
  local pkg=github.com/prometheus/common/version
  printf '%s ' -s -w -X "$pkg.Version=$PROM_VERSION" -X "$pkg.Revision=$MODULE_VERSION" \
    -X "$pkg.Branch=go-module" -X "$pkg.BuildUser=gpu-scheduler/scripts/promtool.sh"
}

# built_name: the store's folder for a build of these inputs (go.mod, go.sum,
# Go's version and platform, the flags); empty without Go.
built_name() {
  command -v go >/dev/null || return 0
  local key
  key="$( (cat "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum"; go version; go env GOOS GOARCH; ldflags) |
    sha256sum | cut -c1-12)"
  echo "promtool-$PROM_VERSION-go-$key"
}
BUILT_NAME="$(built_name)"

# 3. Already in the store (another clone fetched or built it): link it, no network.
candidates=("$RELEASE_NAME")
[[ -z "$BUILT_NAME" ]] || candidates+=("$BUILT_NAME")
for name in "${candidates[@]}"; do
  if [[ -f "$TOOLS_STORE/$name/.complete" ]] && reports_version "$TOOLS_STORE/$name/promtool"; then
    ln -sfn "$TOOLS_STORE/$name" "$LINK"
    use "$LINK/promtool"
  fi
done

# download DIR: the release's promtool into DIR, only if the tarball's sha256 is
# the one its sha256sums.txt gives and the binary runs here. Says why not otherwise.
download() {
  local dir="$1" base="https://github.com/prometheus/prometheus/releases/download/v$PROM_VERSION"
  local tarball="prometheus-$PROM_VERSION.$PLATFORM.tar.gz" expected
  if [[ "$PLATFORM" == *unknown* ]]; then
    log "promtool: no Prometheus release for $(uname -s)/$(uname -m)"
    return 1
  fi
  command -v curl >/dev/null || { log "promtool: curl is missing, cannot download Prometheus $PROM_VERSION"; return 1; }
  log "promtool: downloading $base/$tarball"
  # The small checksum file first: where GitHub cannot be reached, that is
  # known in seconds, before the 130 MB download is tried.
  if ! curl -fsSL --connect-timeout 5 --retry 2 -o "$dir/sha256sums.txt" "$base/sha256sums.txt" ||
    ! curl -fsSL --connect-timeout 5 --retry 2 -o "$dir/$tarball" "$base/$tarball"; then
    log "promtool: could not download $base/$tarball"
    return 1
  fi
  expected="$(awk -v f="$tarball" '$2 == f || $2 == "*" f { print $1; exit }' "$dir/sha256sums.txt")"
  if [[ -z "$expected" || "$(sha256_of "$dir/$tarball")" != "$expected" ]]; then
    log "promtool: $tarball does not have the sha256 its release publishes (${expected:-none found}): not used"
    return 1
  fi
  tar -xzf "$dir/$tarball" -C "$dir" --strip-components=1 "prometheus-$PROM_VERSION.$PLATFORM/promtool" &&
    rm -f "$dir/$tarball" || return 1
  if ! reports_version "$dir/promtool"; then
    log "promtool: the downloaded promtool does not run here or is not $PROM_VERSION: not used"
    return 1
  fi
}

# build DIR: go build cmd/promtool of the pinned module into DIR.
build() {
  local dir="$1" start=$SECONDS
  log "promtool: building Prometheus $PROM_VERSION's promtool ($MODULE@$MODULE_VERSION) from the Go module proxy" \
    "(Go $(go env GOVERSION), $(nproc) cores; cold: minutes)"
  (cd "$MODULE_DIR" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -modcacherw" \
    with_heartbeat "building promtool" go build -trimpath -ldflags "$(ldflags)" -o "$dir/promtool" "$MODULE/cmd/promtool") >&2
  reports_version "$dir/promtool" || { log "promtool: $dir/promtool does not report version $PROM_VERSION"; return 1; }
  log "promtool: built in $((SECONDS - start))s ($dir)"
}

if stored_install "$RELEASE_NAME" "$LINK" download; then
  log "promtool: Prometheus $PROM_VERSION's promtool downloaded into $TOOLS_STORE/$RELEASE_NAME (sha256 checked)"
  use "$LINK/promtool"
fi
rm -rf "${TOOLS_STORE:?}/$RELEASE_NAME" # a failed download keeps nothing
[[ -n "$BUILT_NAME" ]] ||
  die "promtool $PROM_VERSION is needed: install it (https://prometheus.io/download/, the prometheus tarball has it) or Go >= 1.26 to build it"
stored_install "$BUILT_NAME" "$LINK" build || die "promtool: building $MODULE@$MODULE_VERSION failed (its output is above)"
use "$LINK/promtool"

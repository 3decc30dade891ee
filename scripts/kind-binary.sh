#!/usr/bin/env bash
# Print the path of a kind binary at the version cluster/kind/go.mod pins,
# fetching it first into .cache/bin when there is none:
#   1. .cache/bin/kind, when it reports that version;
#   2. a kind on PATH that reports that version (a user's own install);
#   3. the official release binary for this OS and architecture from GitHub,
#      kept only when its sha256 is the one pinned below (CI takes this way:
#      no Go toolchain, no compile);
#   4. otherwise `go build` from the Go module proxy (cluster/kind/go.mod
#      and go.sum pin it; about 10-40 s, Go's default caches): our machines
#      reach no GitHub.
# With none of these it stops with a message that names what to install.
# Env for tests and odd machines: TOOLS_OS, TOOLS_ARCH (default: uname).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KIND_VERSION="$(mod_version "$REPO_ROOT/cluster/kind/go.mod" sigs.k8s.io/kind)"
# The sha256 of kind's release binaries (the .sha256sum files published with
# the release), for the version they were pinned at. A go.mod that moves to
# another version downloads nothing until these are updated with it.
RELEASE_SHA256_VERSION=v0.30.0
declare -A RELEASE_SHA256=(
  [linux/amd64]=517ab7fc89ddeed5fa65abf71530d90648d9638ef0c4cde22c2c11f8097b8889
  [linux/arm64]=7ea2de9d2d190022ed4a8a4e3ac0636c8a455e460b9a13ccf19f15d07f4f00eb
  [darwin/amd64]=4f0b6e3b88bdc66d922c08469f05ef507d4903dd236e6319199bb9c868eed274
  [darwin/arm64]=ceaf40df1d1551c481fb50e3deb5c3deecad5fd599df5469626b70ddf52a1518
)

# reports_version BIN: true when `BIN version` says our version.
reports_version() { [[ "$("$1" version 2>/dev/null)" == "kind $KIND_VERSION "* ]]; }

pinned_tool kind && exit 0

platform() { echo "$(platform_os)/$(platform_arch)"; }

# download: the release binary into .cache/bin/kind, only if its sha256 is
# the pinned one and it runs here. Says why not otherwise.
download() {
  local platform url expected tmp="$BIN_DIR/.kind.download"
  platform="$(platform)"
  expected="${RELEASE_SHA256[$platform]:-}"
  if [[ "$KIND_VERSION" != "$RELEASE_SHA256_VERSION" || -z "$expected" ]]; then
    log "kind: no release checksum pinned for kind $KIND_VERSION on $platform; not downloading"
    return 1
  fi
  command -v curl >/dev/null || { log "kind: curl is missing, cannot download kind"; return 1; }
  url="https://github.com/kubernetes-sigs/kind/releases/download/$KIND_VERSION/kind-${platform/\//-}"
  log "kind: downloading $url"
  rm -f "$tmp"
  if ! curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp" "$url"; then
    rm -f "$tmp"
    log "kind: could not download $url"
    return 1
  fi
  if [[ "$(sha256_of "$tmp")" != "$expected" ]]; then
    rm -f "$tmp"
    log "kind: $url does not have the pinned sha256 $expected: not used"
    return 1
  fi
  chmod +x "$tmp"
  if ! reports_version "$tmp"; then
    rm -f "$tmp"
    log "kind: the downloaded kind does not run here or is not $KIND_VERSION: not used"
    return 1
  fi
  mv "$tmp" "$BIN_DIR/kind"
}

if download; then
  log "kind: $KIND_VERSION downloaded into $BIN_DIR (sha256 checked)"
  echo "$BIN_DIR/kind"
  exit 0
fi
command -v go >/dev/null ||
  die "kind $KIND_VERSION is needed: install it (https://kind.sigs.k8s.io/docs/user/quick-start/#installation) or Go >= 1.24 to build it"
log "kind: building $KIND_VERSION into $BIN_DIR (Go module proxy)"
start=$SECONDS
(cd "$REPO_ROOT/cluster/kind" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -modcacherw" \
  with_heartbeat "building kind" go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/kind" sigs.k8s.io/kind)
reports_version "$BIN_DIR/kind" || die "$BIN_DIR/kind does not report kind $KIND_VERSION"
log "kind: built in $((SECONDS - start))s"
echo "$BIN_DIR/kind"

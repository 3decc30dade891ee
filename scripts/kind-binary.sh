#!/usr/bin/env bash
# Print the path of a kind binary at the version cluster/kind/go.mod pins,
# fetching it first into .cache/bin when there is none:
#   1. .cache/bin/kind, when it reports that version;
#   2. a kind on PATH that reports that version (a user's own install);
#   3. the official release binary for this OS and architecture from GitHub,
#      kept only when its sha256 is the one the release publishes beside it
#      (kind-<os>-<arch>.sha256sum; users take this way: no Go toolchain);
#   4. otherwise `go build` from the Go module proxy (cluster/kind/go.mod
#      and go.sum pin it; about 10-40 s, Go's default caches): our machines
#      reach no GitHub.
# With none of these it stops with a message that names what to install.
# Env for tests and odd machines: TOOLS_OS, TOOLS_ARCH (default: uname).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KIND_VERSION="$(mod_version "$REPO_ROOT/cluster/kind/go.mod" sigs.k8s.io/kind)"
# reports_version BIN: true when `BIN version` says our version.
reports_version() { [[ "$("$1" version 2>/dev/null)" == "kind $KIND_VERSION "* ]]; }

pinned_tool kind && exit 0


# download: the release binary into .cache/bin/kind, only if its sha256 is
# the one its release publishes and it runs here. Says why not otherwise.
# (The published checksum, fetched over TLS from the same release, is what
# kind's install guide checks against; a version bump needs no edit here.)
download() {
  local url expected tmp="$BIN_DIR/.kind.download"
  command -v curl >/dev/null || { log "kind: curl is missing, cannot download kind"; return 1; }
  url="https://github.com/kubernetes-sigs/kind/releases/download/$KIND_VERSION/kind-$(platform_os)-$(platform_arch)"
  log "kind: downloading $url"
  rm -f "$tmp" "$tmp.sha256sum"
  if ! curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp.sha256sum" "$url.sha256sum" ||
    ! curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp" "$url"; then
    rm -f "$tmp" "$tmp.sha256sum"
    log "kind: could not download $url and its .sha256sum"
    return 1
  fi
  expected="$(awk 'NR == 1 { print $1 }' "$tmp.sha256sum")"
  rm -f "$tmp.sha256sum"
  if [[ ! "$expected" =~ ^[0-9a-f]{64}$ || "$(sha256_of "$tmp")" != "$expected" ]]; then
    rm -f "$tmp"
    log "kind: $url does not have the sha256 its release publishes (${expected:-none}): not used"
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
  log "kind: $KIND_VERSION downloaded into $BIN_DIR (sha256 checked against the release's)"
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

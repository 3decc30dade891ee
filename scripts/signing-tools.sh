#!/usr/bin/env bash
# signing-tools.sh cosign|syft: print the path of that tool at the version its
# tools module pins (cluster/cosign/go.mod: github.com/sigstore/cosign/v3;
# cluster/syft/go.mod: github.com/anchore/syft), getting one first when there
# is none. The release job signs the promoted images with cosign and attaches
# syft's SBOM (scripts/sign.sh). The first that works:
#   1. .cache/bin/TOOL, or a TOOL on PATH (a runner image with it), when it
#      reports that version;
#   2. one this machine already has in its tools store (lib.sh:
#      stored_install), downloaded or built by any clone;
#   3. the upstream release binary for this OS and architecture from GitHub,
#      kept only when its sha256 is the one in the checksums file published
#      with the release: what users' runners get;
#   4. otherwise `go build` of the pinned module from the Go module proxy into
#      the tools store, in a folder named by a hash of its inputs, with Go's
#      own caches in their default places. Our machines reach no GitHub (that
#      try fails in seconds), so this is their way; cold build times are in
#      docs/delivery-internals.md.
# Whichever it is, .cache/bin/TOOL links to it. Nothing needs root.
# Env for tests and odd machines: TOOLS_OS, TOOLS_ARCH (default: uname).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TOOL="${1:-}"
case "$TOOL" in
  cosign)
    MODULE=github.com/sigstore/cosign/v3
    PACKAGE="$MODULE/cmd/cosign"
    ;;
  syft)
    MODULE=github.com/anchore/syft
    PACKAGE="$MODULE/cmd/syft"
    ;;
  *) die "usage: $0 cosign|syft" ;;
esac
MODULE_DIR="$REPO_ROOT/cluster/$TOOL"
VERSION="$(mod_version "$MODULE_DIR/go.mod" "$MODULE")" # v3.1.3
[[ -n "$VERSION" ]] || die "$MODULE_DIR/go.mod does not require $MODULE"
LINK="$CACHE_DIR/$TOOL" # -> the store's folder that holds the TOOL in use

# reports_version BIN: true when BIN runs here and says it is $VERSION.
reports_version() {
  case "$TOOL" in
    cosign) "$1" version --json 2>/dev/null | grep -q "\"gitVersion\": *\"$VERSION\"" ;;
    syft) "$1" version 2>/dev/null | grep -qE "^Version: +${VERSION#v}\$" ;;
  esac
}

use() {
  ln -sfn "$1" "$BIN_DIR/$TOOL"
  echo "$BIN_DIR/$TOOL"
  exit 0
}

if found="$(pinned_tool "$TOOL")"; then
  [[ "$found" == "$BIN_DIR/$TOOL" ]] && { echo "$found"; exit 0; }
  use "$found"
fi

OS="$(platform_os)"
ARCH="$(platform_arch)"
RELEASE_NAME="$TOOL-$VERSION-release-$OS-$ARCH"

# ldflags: the version stamps each project's own release build sets (cosign's
# Makefile, syft's .goreleaser.yaml), from our pin; without them the binaries
# say "devel" / "[not provided]" and reports_version could not tell.
ldflags() {
  case "$TOOL" in
    cosign) printf '%s ' -s -w -X "sigs.k8s.io/release-utils/version.gitVersion=$VERSION" ;;
    syft) printf '%s ' -s -w -X "main.version=${VERSION#v}" -X "main.gitDescription=$VERSION-go-module" ;;
  esac
}

# built_name: the store's folder for a build of these inputs; empty without Go.
built_name() {
  command -v go >/dev/null || return 0
  local key
  key="$( (cat "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum"; go version; go env GOOS GOARCH; ldflags) |
    sha256sum | cut -c1-12)"
  echo "$TOOL-$VERSION-go-$key"
}
BUILT_NAME="$(built_name)"

# Already in the store (another clone fetched or built it): link it, no network.
candidates=("$RELEASE_NAME")
[[ -z "$BUILT_NAME" ]] || candidates+=("$BUILT_NAME")
for name in "${candidates[@]}"; do
  if [[ -f "$TOOLS_STORE/$name/.complete" ]] && reports_version "$TOOLS_STORE/$name/$TOOL"; then
    ln -sfn "$TOOLS_STORE/$name" "$LINK"
    use "$LINK/$TOOL"
  fi
done

# download DIR: the release's binary into DIR, only if its sha256 is the one
# the release's checksums file gives and it runs here. Says why not otherwise.
download() {
  local dir="$1" base asset sums expected
  case "$TOOL" in
    cosign)
      base="https://github.com/sigstore/cosign/releases/download/$VERSION"
      asset="cosign-$OS-$ARCH" sums=cosign_checksums.txt
      ;;
    syft)
      base="https://github.com/anchore/syft/releases/download/$VERSION"
      asset="syft_${VERSION#v}_${OS}_$ARCH.tar.gz" sums="syft_${VERSION#v}_checksums.txt"
      ;;
  esac
  if [[ "$OS" == unsupported || "$ARCH" == unsupported ]]; then
    log "$TOOL: no release binary for $(uname -s)/$(uname -m)"
    return 1
  fi
  command -v curl >/dev/null || { log "$TOOL: curl is missing, cannot download $TOOL $VERSION"; return 1; }
  log "$TOOL: downloading $base/$asset"
  # The small checksums file first: where GitHub cannot be reached, that is
  # known in seconds.
  if ! curl -fsSL --connect-timeout 5 --retry 2 -o "$dir/$sums" "$base/$sums" ||
    ! curl -fsSL --connect-timeout 5 --retry 2 -o "$dir/$asset" "$base/$asset"; then
    log "$TOOL: could not download $base/$asset"
    return 1
  fi
  expected="$(awk -v f="$asset" '$2 == f || $2 == "*" f { print $1; exit }' "$dir/$sums")"
  if [[ -z "$expected" || "$(sha256_of "$dir/$asset")" != "$expected" ]]; then
    log "$TOOL: $asset does not have the sha256 its release publishes (${expected:-none found}): not used"
    return 1
  fi
  case "$TOOL" in
    cosign) mv "$dir/$asset" "$dir/cosign" && chmod 0755 "$dir/cosign" ;;
    syft) tar -xzf "$dir/$asset" -C "$dir" syft && rm -f "$dir/$asset" ;;
  esac || return 1
  if ! reports_version "$dir/$TOOL"; then
    log "$TOOL: the downloaded $TOOL does not run here or is not $VERSION: not used"
    return 1
  fi
}

# build DIR: go build of the pinned module's command into DIR.
build() {
  local dir="$1" start=$SECONDS
  log "$TOOL: building $PACKAGE@$VERSION from the Go module proxy (Go $(go env GOVERSION), $(nproc) cores; cold: minutes)"
  (cd "$MODULE_DIR" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -modcacherw" \
    with_heartbeat "building $TOOL" go build -trimpath -ldflags "$(ldflags)" -o "$dir/$TOOL" "$PACKAGE") >&2
  reports_version "$dir/$TOOL" || { log "$TOOL: $dir/$TOOL does not report version $VERSION"; return 1; }
  log "$TOOL: built in $((SECONDS - start))s ($dir)"
}

if stored_install "$RELEASE_NAME" "$LINK" download; then
  log "$TOOL: $TOOL $VERSION downloaded into $TOOLS_STORE/$RELEASE_NAME (sha256 checked)"
  use "$LINK/$TOOL"
fi
rm -rf "${TOOLS_STORE:?}/$RELEASE_NAME" # a failed download keeps nothing
[[ -n "$BUILT_NAME" ]] ||
  die "$TOOL $VERSION is needed: install it (its GitHub release) or Go >= 1.26 to build it"
stored_install "$BUILT_NAME" "$LINK" build || die "$TOOL: building $PACKAGE@$VERSION failed (its output is above)"
use "$LINK/$TOOL"

#!/usr/bin/env bash
# Print the path of a kind binary at the version cluster/kind/go.mod pins,
# building it first into .cache/bin when there is none:
#   1. .cache/bin/kind, when it reports that version;
#   2. a kind on PATH that reports that version (a user's own install);
#   3. otherwise `go build` from the Go module proxy (cluster/kind/go.mod
#      and go.sum pin it; about 10-40 s, Go's default caches).
# Without Go it stops with a message that names what to install.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KIND_VERSION="$(mod_version "$REPO_ROOT/cluster/kind/go.mod" sigs.k8s.io/kind)"

# reports_version BIN: true when `BIN version` says our version.
reports_version() { [[ "$("$1" version 2>/dev/null)" == "kind $KIND_VERSION "* ]]; }

if [[ -x "$BIN_DIR/kind" ]] && reports_version "$BIN_DIR/kind"; then
  echo "$BIN_DIR/kind"
  exit 0
fi
on_path="$(command -v kind 2>/dev/null || true)"
if [[ -n "$on_path" && "$on_path" != "$BIN_DIR/kind" ]] && reports_version "$on_path"; then
  echo "$on_path"
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

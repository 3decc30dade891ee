#!/usr/bin/env bash
# Build vegeta, the constant-rate load tool of the admission benchmark, into
# .cache/bin at the version bench/tools/go.mod pins. Idempotent: a vegeta of
# that version already there is kept. Needs Go and the Go module proxy.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

MODULE_DIR="$REPO_ROOT/bench/tools"
VERSION="$(awk '$1 == "github.com/tsenart/vegeta/v12" {print $2; exit}' "$MODULE_DIR/go.mod")"
[[ -n "$VERSION" ]] || die "no github.com/tsenart/vegeta/v12 version in $MODULE_DIR/go.mod"

if [[ -x "$BIN_DIR/vegeta" ]] && "$BIN_DIR/vegeta" -version 2>/dev/null | grep -qx "Version: $VERSION"; then
  exit 0
fi
command -v go >/dev/null || die "go not found: the admission benchmark builds vegeta $VERSION with it"
export GOMODCACHE="$CACHE_DIR/go/mod" GOCACHE="$CACHE_DIR/go/build"
export GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0
log "building vegeta $VERSION into $BIN_DIR"
(cd "$MODULE_DIR" && go build -trimpath -ldflags "-X main.Version=$VERSION" -o "$BIN_DIR/vegeta" \
  github.com/tsenart/vegeta/v12)

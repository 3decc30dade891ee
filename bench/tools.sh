#!/usr/bin/env bash
# Build the benchmark's Go tools into .cache/bin from bench/tools/go.mod:
#   vegeta         the constant-rate load tool of the admission benchmark, at the pinned version
#                  (kept when .cache/bin already has that version);
#   bench-ceiling  the bare Go binder, the throughput ceiling (standard library only;
#                  go build's cache makes an unchanged rebuild take a moment).
# Needs Go and the Go module proxy (the first time).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

MODULE_DIR="$REPO_ROOT/bench/tools"
VERSION="$(awk '$1 == "github.com/tsenart/vegeta/v12" {print $2; exit}' "$MODULE_DIR/go.mod")"
[[ -n "$VERSION" ]] || die "no github.com/tsenart/vegeta/v12 version in $MODULE_DIR/go.mod"
command -v go >/dev/null || die "go not found: the benchmark builds vegeta $VERSION and its ceiling binder with it"
# Go's module and build caches stay in their default places, shared by every clone on the
# machine (content-addressed), as scripts/build-control-plane.sh has them.
export GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0
cd "$MODULE_DIR"

if ! "$BIN_DIR/vegeta" -version 2>/dev/null | grep -qx "Version: $VERSION"; then
  log "building vegeta $VERSION into $BIN_DIR"
  go build -trimpath -ldflags "-X main.Version=$VERSION" -o "$BIN_DIR/vegeta" github.com/tsenart/vegeta/v12
fi
go build -trimpath -o "$BIN_DIR/bench-ceiling" ./ceiling

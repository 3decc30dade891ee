#!/usr/bin/env bash
# `make install`: .venv with both apps (editable) and the dependency groups in
# INSTALL_GROUPS (default "test lint bench"), exactly as uv.lock pins them.
# uv checks every download against the lock's hashes; --frozen never
# re-resolves (a pyproject.toml that no longer matches uv.lock is an error,
# see `scripts/uv.sh lock`).
#
# Idempotent and fast: a stamp names the lock, the groups and the Python; when
# it matches, nothing runs. INSTALL_GROUPS="test lint" suits a CI job on a
# platform py-spy has no wheel for (Alpine).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VENV="$REPO_ROOT/.venv"
GROUPS_WANTED="${INSTALL_GROUPS:-test lint bench}"
PYTHON="$(host_python)"

inputs() {
  cat "$REPO_ROOT/uv.lock" "$REPO_ROOT/pyproject.toml" "$REPO_ROOT"/apps/*/pyproject.toml
  echo "groups: $GROUPS_WANTED"
  # The interpreter: its path, and the one .venv really runs (a pyenv shim
  # stays the same path across versions). No Python call: shims are slow.
  echo "python: $PYTHON $(readlink -f "$VENV/bin/python" 2>/dev/null)"
}
stamp="$VENV/.installed-$(inputs | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && -x "$VENV/bin/python" ]]; then
  exit 0
fi

group_args=()
for group in $GROUPS_WANTED; do group_args+=(--group "$group"); done
log "install: .venv with gpu-scheduler, gpu-scheduler-check and groups: $GROUPS_WANTED (uv.lock)"
# uv sync is exact: a group left out of INSTALL_GROUPS is removed again.
"$REPO_ROOT/scripts/uv.sh" sync --frozen --all-packages --no-default-groups "${group_args[@]}" \
  --python "$("$PYTHON" -c 'import sys; print(sys.executable)')" --project "$REPO_ROOT"
rm -f "$VENV"/.installed-*
# Named after the inputs as they are now that .venv exists (its interpreter is one).
touch "$VENV/.installed-$(inputs | sha256sum | cut -c1-16)"

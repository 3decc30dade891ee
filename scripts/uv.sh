#!/usr/bin/env bash
# The project's pinned uv: `scripts/uv.sh ARGS...` runs `uv ARGS...` from a
# tool venv in .cache/uv-tools, made on first use.
#
# uv cannot lock itself before it exists, so the venv is bootstrapped with the
# machine's python3 and pip from uv.lock's `tooling` group: uv, pip (for the
# wheelhouse) and packaging (marker evaluation), each pinned by version and
# installed with --require-hashes against the hashes uv.lock records. A change
# to those pins in uv.lock rebuilds the venv; otherwise this costs a hash of
# uv.lock.
# uv's own cache stays in its default place (~/.cache/uv), shared by clones.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TOOLS_VENV="$CACHE_DIR/uv-tools"
PYTHON="$(host_python)"
LOCK="$REPO_ROOT/uv.lock"

# tooling_requirements: pip requirement lines, with every hash uv.lock has for
# them, for the packages of the `tooling` group (which have no dependencies;
# a new pin that brings some is refused here rather than installed unchecked).
tooling_requirements() {
  "$PYTHON" - "$LOCK" <<'EOF'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    lock = tomllib.load(f)
group = lock["manifest"]["dependency-groups"]["tooling"]
packages = {p["name"]: p for p in lock["package"]}
for wanted in group:
    package = packages[wanted["name"]]
    if package.get("dependencies"):
        sys.exit(f"uv.lock: tooling package {wanted['name']} has dependencies; scripts/uv.sh installs none")
    hashes = [w["hash"] for w in package.get("wheels", [])]
    if "sdist" in package:
        hashes.append(package["sdist"]["hash"])
    print(f"{package['name']}=={package['version']} " + " ".join(f"--hash={h}" for h in hashes))
EOF
}

[[ -f "$LOCK" ]] || die "$LOCK is missing"
# Fast path without Python (a pyenv shim alone costs half a second): this
# exact uv.lock was already checked against the venv.
lock_seen="$TOOLS_VENV/.lock-$(sha256sum "$LOCK" | cut -c1-16)"
if [[ -f "$lock_seen" && -x "$TOOLS_VENV/bin/uv" ]]; then
  export UV_PYTHON_DOWNLOADS=never
  exec "$TOOLS_VENV/bin/uv" "$@"
fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null ||
  die "${PYTHON:-python3} is missing or older than 3.11: install Python 3.11+ (with its venv module) or set PYTHON"
requirements="$(tooling_requirements)"
stamp="$TOOLS_VENV/.installed-$(sha256sum <<<"$requirements" | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  log "uv: installing $(awk '{printf "%s ", $1}' <<<"$requirements")into $TOOLS_VENV (hash-checked against uv.lock)"
  rm -rf "$TOOLS_VENV"
  "$PYTHON" -m venv "$TOOLS_VENV" ||
    die "$PYTHON -m venv failed: install your Python's venv module (Debian/Ubuntu: apt-get install python3-venv)"
  "$TOOLS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary :all: -r /dev/stdin <<<"$requirements"
  touch "$stamp"
fi
rm -f "$TOOLS_VENV"/.lock-*
touch "$lock_seen"

# Never download a Python: the venvs use the machine's interpreter.
export UV_PYTHON_DOWNLOADS=never
exec "$TOOLS_VENV/bin/uv" "$@"

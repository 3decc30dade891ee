#!/bin/sh
# Runs inside an image's build stage (apps/*/Dockerfile): make /opt/venv from
# the wheelhouse alone, in two steps so that a change to the app's code
# rebuilds only the second:
#
#   image-venv.sh deps WHEELS       the locked dependencies
#   image-venv.sh app WHEELS APP    the app itself (a folder with pyproject.toml)
#
# WHEELS holds requirements.txt, build-requirements.txt and their wheels
# (scripts/wheelhouse.py). Nothing is fetched: pip runs with --no-index and
# --require-hashes, so every file is checked against uv.lock's hashes again.
# /opt/venv never gets pip or setuptools: they live in /opt/build-tools,
# which the final stage does not copy, and pip itself is first run from its
# own wheel (checked against the lock), so the base needs no pip or ensurepip.
set -eu
step="$1" wheels="$2"
offline="--no-index --find-links $wheels --only-binary=:all: --require-hashes --disable-pip-version-check --no-cache-dir"

deps() {
  python3 -m venv --without-pip /opt/venv
  python3 -m venv --without-pip /opt/build-tools
  version="$(sed -n 's/^pip==\([^ ]*\) .*/\1/p' "$wheels/build-requirements.txt")"
  pip_wheel="$wheels/pip-$version-py3-none-any.whl"
  digest="$(sha256sum "$pip_wheel" | cut -d' ' -f1)"
  grep -q "^pip==$version .*--hash=sha256:$digest" "$wheels/build-requirements.txt" || {
    echo "image-venv: $pip_wheel does not match the hashes uv.lock has for pip $version" >&2
    exit 1
  }
  # shellcheck disable=SC2086 # $offline is a list of options
  python3 "$pip_wheel/pip" --python /opt/build-tools/bin/python install --quiet $offline \
    -r "$wheels/build-requirements.txt"
  # shellcheck disable=SC2086
  /opt/build-tools/bin/pip --python /opt/venv/bin/python install --quiet $offline -r "$wheels/requirements.txt"
}

app() {
  # A wheel built with the locked setuptools (no isolation: there is no index
  # to fetch a build backend from), installed without dependencies: they are
  # all in already, extras included (requirements.txt is the export with them).
  /opt/build-tools/bin/pip wheel --quiet --no-index --no-deps --no-build-isolation --no-cache-dir \
    --wheel-dir /tmp/app-wheel "$1"
  /opt/build-tools/bin/pip --python /opt/venv/bin/python install --quiet --no-index --no-deps \
    --disable-pip-version-check --no-cache-dir /tmp/app-wheel/*.whl
  # pip compiled the bytecode while installing: nothing is written at run
  # time (the root filesystem is read-only). The venv is what the image promises:
  /opt/venv/bin/python -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ("pip", "setuptools")))' || {
    echo "image-venv: pip or setuptools ended up in /opt/venv" >&2
    exit 1
  }
}

case "$step" in
  deps) deps ;;
  app) app "$3" ;;
  *) echo "usage: image-venv.sh deps WHEELS | app WHEELS APP_DIR" >&2; exit 2 ;;
esac

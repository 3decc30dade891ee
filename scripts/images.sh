#!/usr/bin/env bash
# `make images`: build gpu-scheduler and gpu-scheduler-check from
# apps/*/Dockerfile, here and on any machine with Docker.
#
#   images.sh [build] [scheduler] [check]   build (default: both); skip an image
#                                           whose inputs are unchanged
#   images.sh base                          print the Python base image it would use
#   images.sh wheelhouse                    only download the wheels (.cache/wheelhouse/<app>)
#                                           for the base images.sh would use; with
#                                           IMAGE_PLATFORM=linux/amd64 (or linux/arm64), for
#                                           the pinned upstream image without asking Docker
#                                           (CI: kaniko then builds from them)
#
# Env:
#   SCHEDULER_IMAGE  tag of the scheduler image   (gpu-scheduler:dev)
#   CHECK_IMAGE      tag of the check image       (gpu-scheduler-check:dev)
#   IMAGE_PLATFORM   linux/amd64 or linux/arm64: the platform to build for
#                    (default: this machine's). Another platform's images are
#                    built under QEMU (scripts/binfmt.sh), from a base of that
#                    platform; Docker 20.10 may label them with this machine's
#                    platform all the same, which scripts/publish-images.sh
#                    corrects in the registry.
#   PYTHON_IMAGE     base image for both; unset: the Dockerfiles' pinned
#                    upstream python:3.11 image when it is present or can be
#                    pulled, else an offline Debian one (scripts/python-base.Dockerfile).
#                    PYTHON_IMAGE_AMD64, PYTHON_IMAGE_ARM64: the same for one
#                    platform, first (a base's Python must run that platform's
#                    machine, which is checked)
#   IMAGE_VERSION    org.opencontainers.image.version  (scripts/version.py: the release
#                    version every chart, app and Dockerfile declares)
#   IMAGE_SOURCE     org.opencontainers.image.source   (CI_PROJECT_URL, else the
#                    git remote `origin`, else the placeholder in the Dockerfiles)
# Output: progress on stderr; on success, the two image references on stdout
# (scheduler first), both present in the local Docker.
#
# Python packages come from a wheelhouse downloaded on the host
# (.cache/wheelhouse/<app>, scripts/wheelhouse.py), hash-checked against
# uv.lock, and `docker build` runs with --network none. Each image carries the
# label dev.gpu-scheduler.inputs: a hash of everything it is built from (base
# image id, Dockerfile, app sources, locked requirements, build arguments);
# an image whose label matches is not rebuilt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SCHEDULER_IMAGE="${SCHEDULER_IMAGE:-gpu-scheduler:dev}"
CHECK_IMAGE="${CHECK_IMAGE:-gpu-scheduler-check:dev}"
INPUTS_LABEL=dev.gpu-scheduler.inputs
STATE_DIR="$CACHE_DIR/images"
WHEELHOUSE="$CACHE_DIR/wheelhouse"
UPSTREAM_PYTHON="$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$REPO_ROOT/apps/scheduler/Dockerfile")"

need_docker() {
  command -v docker >/dev/null 2>&1 ||
    die "docker is not installed: '$1' needs a Docker engine (https://docs.docker.com/engine/install/)."
  docker info >/dev/null 2>&1 ||
    die "docker is installed but its daemon does not answer ('docker info' fails): start Docker, or check that your user may use it, then run '$1' again."
}

image_ref() { # app -> the tag it is built as
  case "$1" in
    scheduler) echo "$SCHEDULER_IMAGE" ;;
    check) echo "$CHECK_IMAGE" ;;
  esac
}

package_dir() { # app -> its Python package folder
  case "$1" in
    scheduler) echo gpu_scheduler ;;
    check) echo gpu_scheduler_check ;;
  esac
}

image_present() { docker image inspect "$1" >/dev/null 2>&1; }

# The platform this run builds for, its Debian architecture and its machine.
PLATFORM="${IMAGE_PLATFORM:-linux/$(platform_arch)}"
ARCH="${PLATFORM#linux/}"
case "$PLATFORM" in
  linux/amd64) MACHINE=x86_64 ;;
  linux/arm64) MACHINE=aarch64 ;;
  *) die "IMAGE_PLATFORM=$PLATFORM: choose linux/amd64 or linux/arm64" ;;
esac
# Is it this machine's own? Otherwise every container of the build runs under QEMU.
NATIVE=0
[[ "$(uname -m)" == "$MACHINE" ]] && NATIVE=1
# The base PYTHON_IMAGE_<ARCH> or PYTHON_IMAGE names, if any.
BASE_VARIABLE="PYTHON_IMAGE_${ARCH^^}"
[[ -n "${!BASE_VARIABLE:-}" ]] || BASE_VARIABLE=PYTHON_IMAGE

# offline_python_base: Debian's python3 on scripts/debian-base.sh's image of
# the platform, built once and tagged by a hash of its inputs. Prints its reference.
offline_python_base() {
  local debian dockerfile="$REPO_ROOT/scripts/python-base.Dockerfile" mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  # Called in $(...), where set -e does not reach: each failure stops here by hand.
  debian="$("$REPO_ROOT/scripts/debian-base.sh" "$ARCH")" || die "images: the offline Debian base ($ARCH) could not be built (above)"
  local ref
  ref="gpu-scheduler-python:3.11-bookworm-$(cat "$dockerfile" <(echo "$debian $mirror") | sha256sum | cut -c1-12)"
  if ! image_present "$ref"; then
    log "images: building the offline Python base $ref (Debian's python3 on $debian; apt over HTTP, about a minute; under QEMU, a few)"
    docker build --quiet --build-arg DEBIAN_IMAGE="$debian" --build-arg DEBIAN_MIRROR="$mirror" \
      -t "$ref" - <"$dockerfile" >/dev/null || die "images: building the offline Python base $ref failed (above)"
  fi
  echo "$ref"
}

# upstream_of_platform: the upstream default for another platform, pulled
# with --platform and kept under a tag of its own: Docker 20.10's store holds
# one image per tag, so the pull takes the upstream tag from this machine's
# image, which gets it back. Prints the reference; fails when it cannot be pulled.
upstream_of_platform() {
  local ref="gpu-scheduler-python:upstream-${UPSTREAM_PYTHON#python:}-$ARCH" previous pull_log
  if image_present "$ref"; then
    log "images: base $ref (the Dockerfiles' default for $PLATFORM, present locally)"
    echo "$ref"
    return
  fi
  previous="$(docker image inspect --format '{{.Id}}' "$UPSTREAM_PYTHON" 2>/dev/null || true)"
  log "images: pulling $UPSTREAM_PYTHON for $PLATFORM (the Dockerfiles' default)"
  if ! pull_log="$(timeout 600 docker pull --quiet --platform "$PLATFORM" "$UPSTREAM_PYTHON" 2>&1)"; then
    log "images: $UPSTREAM_PYTHON for $PLATFORM is not present and cannot be pulled ($(tail -n1 <<<"$pull_log"))"
    return 1
  fi
  docker tag "$UPSTREAM_PYTHON" "$ref"
  [[ -z "$previous" ]] || docker tag "$previous" "$UPSTREAM_PYTHON"
  log "images: base $ref (the Dockerfiles' default for $PLATFORM, pulled)"
  echo "$ref"
}

# choose_base: PYTHON_IMAGE_<ARCH> or PYTHON_IMAGE; else the upstream default
# if present or pullable; else the offline base. Says which and why on stderr.
choose_base() {
  if [[ -n "${!BASE_VARIABLE:-}" ]]; then
    log "images: base ${!BASE_VARIABLE} (set by $BASE_VARIABLE)"
    echo "${!BASE_VARIABLE}"
    return
  fi
  if ((!NATIVE)); then
    upstream_of_platform && return
  elif image_present "$UPSTREAM_PYTHON"; then
    log "images: base $UPSTREAM_PYTHON (the Dockerfiles' default, present locally)"
    echo "$UPSTREAM_PYTHON"
    return
  else
    local pull_log
    log "images: pulling $UPSTREAM_PYTHON (the Dockerfiles' default)"
    if pull_log="$(timeout 600 docker pull --quiet "$UPSTREAM_PYTHON" 2>&1)"; then
      log "images: base $UPSTREAM_PYTHON (the Dockerfiles' default, pulled)"
      echo "$UPSTREAM_PYTHON"
      return
    fi
    log "images: $UPSTREAM_PYTHON is not present and cannot be pulled ($(tail -n1 <<<"$pull_log"))"
  fi
  local base
  base="$(offline_python_base)" || exit 1
  log "images: base $base (made offline from Debian's python3; set PYTHON_IMAGE to choose another)"
  echo "$base"
}

# probe_target BASE: the base's Python as pip sees a platform (marker
# environment, glibc, machine, ABI), asked of the base itself; cached by image id.
probe_target() {
  local base="$1" id file
  id="$(docker image inspect --format '{{.Id}}' "$base")"
  file="$STATE_DIR/targets/${id#sha256:}.json"
  if [[ ! -s "$file" ]]; then
    mkdir -p "$(dirname "$file")"
    docker run --rm --network none --entrypoint python3 "$base" -c '
import json, os, platform, sys
glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")
print(json.dumps({
    "markers": {
        "implementation_name": sys.implementation.name,
        "implementation_version": platform.python_version(),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    },
    "machine": platform.machine(),
    "glibc": [int(glibc[0]), int(glibc[1])],
    "python_version": ".".join(platform.python_version_tuple()[:2]),
    "abi": "cp%d%d" % sys.version_info[:2],
}))' >"$file.tmp" || die "could not run python3 in $base to learn its platform"
    mv "$file.tmp" "$file"
  fi
  # A base of another platform would build images whose every binary is of
  # the wrong machine, under a platform that says otherwise.
  local machine
  machine="$(sed -n 's/.*"machine": "\([^"]*\)".*/\1/p' "$file")"
  [[ "$machine" == "$MACHINE" ]] ||
    die "images: the base $base runs ${machine:-an unknown machine}, not $MACHINE ($PLATFORM): set $BASE_VARIABLE to a $PLATFORM image, or PYTHON_IMAGE_${ARCH^^}"
  echo "$file"
}

# static_target PLATFORM: the pinned upstream image's Python as probe_target
# would report it, for a job without Docker: Debian bookworm (glibc 2.36) and
# the Python version of the tag.
static_target() {
  local machine file full minor
  case "$1" in
    linux/amd64) machine=x86_64 ;;
    linux/arm64) machine=aarch64 ;;
    *) die "IMAGE_PLATFORM=$1: choose linux/amd64 or linux/arm64" ;;
  esac
  [[ -z "${PYTHON_IMAGE:-}" || "$PYTHON_IMAGE" == "$UPSTREAM_PYTHON" ]] ||
    die "IMAGE_PLATFORM describes $UPSTREAM_PYTHON only; unset PYTHON_IMAGE or drop IMAGE_PLATFORM"
  full="$(sed -n 's/^python:\([0-9]*\.[0-9]*\.[0-9]*\)-slim-bookworm$/\1/p' <<<"$UPSTREAM_PYTHON")"
  [[ -n "$full" ]] || die "cannot read the Python version from $UPSTREAM_PYTHON"
  minor="${full%.*}"
  file="$STATE_DIR/targets/static-$machine-$full.json"
  mkdir -p "$(dirname "$file")"
  printf '%s\n' "{\"markers\": {\"implementation_name\": \"cpython\", \"implementation_version\": \"$full\",
 \"os_name\": \"posix\", \"platform_machine\": \"$machine\", \"platform_python_implementation\": \"CPython\",
 \"platform_release\": \"\", \"platform_system\": \"Linux\", \"platform_version\": \"\",
 \"python_full_version\": \"$full\", \"python_version\": \"$minor\", \"sys_platform\": \"linux\"},
 \"machine\": \"$machine\", \"glibc\": [2, 36], \"python_version\": \"$minor\", \"abi\": \"cp${minor/./}\"}" >"$file"
  echo "$file"
}

wheelhouse_for() { # app target
  "$TOOLS_PYTHON" "$REPO_ROOT/scripts/wheelhouse.py" --app "$1" --target "$2" --dest "$WHEELHOUSE/$1"
}

tool_venv() {
  "$REPO_ROOT/scripts/uv.sh" --version >/dev/null # makes the tool venv (pip, packaging) for the wheelhouse
  TOOLS_PYTHON="$CACHE_DIR/uv-tools/bin/python"
}

cmd_wheelhouse() {
  mkdir -p "$STATE_DIR"
  exec 8>"$STATE_DIR/.lock"
  flock 8
  tool_venv
  local target app
  if [[ -n "${IMAGE_PLATFORM:-}" ]]; then
    target="$(static_target "$IMAGE_PLATFORM")"
    log "images: wheels for $UPSTREAM_PYTHON on $IMAGE_PLATFORM (IMAGE_PLATFORM; Docker not asked)"
  else
    need_docker "scripts/images.sh wheelhouse"
    target="$(probe_target "$(choose_base)")"
  fi
  for app in scheduler check; do wheelhouse_for "$app" "$target"; done
}

# The files an app's image is built from, relative to the repository root.
inputs_of() {
  local app="$1"
  echo "apps/$app/Dockerfile" .dockerignore scripts/image-venv.sh "apps/$app/pyproject.toml"
  (cd "$REPO_ROOT" && find "apps/$app/$(package_dir "$app")" -type f ! -path '*/__pycache__/*' ! -name '*.py[cod]' | LC_ALL=C sort)
}

revision_of() { # app -> the last commit that changed its inputs, "-dirty" when they differ from it
  local app="$1" paths rev
  paths=("apps/$app/Dockerfile" "apps/$app/pyproject.toml" "apps/$app/$(package_dir "$app")" .dockerignore scripts/image-venv.sh uv.lock)
  rev="$(git -C "$REPO_ROOT" log -1 --format=%H -- "${paths[@]}" 2>/dev/null)" || true
  [[ -n "$rev" ]] || { echo unknown; return; }
  [[ -z "$(git -C "$REPO_ROOT" status --porcelain -- "${paths[@]}" 2>/dev/null)" ]] || rev+="-dirty"
  echo "$rev"
}

# source_url: a browsable https URL of this repository. An ssh remote
# (git@host:group/repo.git, ssh://git@host/group/repo.git) becomes its https
# form; a remote that is a local path or another scheme is no URL anyone
# outside this machine can open, so the Dockerfiles' placeholder is used.
source_url() {
  [[ -n "${IMAGE_SOURCE:-}" ]] && { echo "$IMAGE_SOURCE"; return; }
  [[ -n "${CI_PROJECT_URL:-}" ]] && { echo "$CI_PROJECT_URL"; return; }
  local remote
  remote="$(git -C "$REPO_ROOT" remote get-url origin 2>/dev/null)" || remote=""
  case "$remote" in
    https://*) ;;
    ssh://*) remote="https://${remote#ssh://}"; remote="${remote/\/\/*@//\/}" ;;
    *@*:*) remote="${remote#*@}"; remote="https://${remote/://}" ;;
    *) remote="" ;;
  esac
  remote="${remote%.git}"
  [[ -n "$remote" ]] && { echo "$remote"; return; }
  sed -n 's/^ARG SOURCE=//p' "$REPO_ROOT/apps/scheduler/Dockerfile"
}

build_one() {
  local app="$1" base="$2" target="$3" ref version revision source inputs_hash
  ref="$(image_ref "$app")"
  wheelhouse_for "$app" "$target"
  version="${IMAGE_VERSION:-$(python3 "$REPO_ROOT/scripts/version.py")}" || die "no release version (scripts/version.py)"
  revision="$(revision_of "$app")"
  source="$(source_url)"
  inputs_hash="$(
    cd "$REPO_ROOT"
    docker image inspect --format '{{.Id}}' "$base"
    echo "version=$version revision=$revision source=$source"
    inputs_of "$app" | xargs sha256sum
    sha256sum "$WHEELHOUSE/$app/requirements.txt" "$WHEELHOUSE/$app/build-requirements.txt" | cut -d' ' -f1
  )"
  inputs_hash="$(sha256sum <<<"$inputs_hash" | cut -c1-16)"
  local current
  current="$(docker image inspect --format "{{ index .Config.Labels \"$INPUTS_LABEL\" }}" "$ref" 2>/dev/null || true)"
  if [[ "$current" == "$inputs_hash" ]]; then
    log "images: $ref is up to date (inputs $inputs_hash)"
    return
  fi
  log "images: docker build $ref (base $base, inputs $inputs_hash, no network)"
  local start=$SECONDS old_id
  old_id="$(docker image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)"
  # --force-rm: no stopped container is left behind by a failed step.
  docker build --force-rm --network none --file "$REPO_ROOT/apps/$app/Dockerfile" --tag "$ref" \
    --build-arg PYTHON_IMAGE="$base" --build-arg VERSION="$version" \
    --build-arg REVISION="$revision" --build-arg SOURCE="$source" \
    --label "$INPUTS_LABEL=$inputs_hash" "$REPO_ROOT" >&2
  log "images: built $ref in $((SECONDS - start))s"
  # The image this one replaces is untagged now: remove it (and its layers
  # nothing else uses) unless a container still uses it.
  if [[ -n "$old_id" && "$old_id" != "$(docker image inspect --format '{{.Id}}' "$ref")" ]]; then
    docker rmi "$old_id" >/dev/null 2>&1 || true
  fi
}

cmd_build() {
  local apps=("$@")
  ((${#apps[@]})) || apps=(scheduler check)
  local app
  for app in "${apps[@]}"; do
    [[ "$app" == scheduler || "$app" == check ]] || die "unknown image '$app': choose scheduler or check"
  done
  need_docker "make images"
  mkdir -p "$STATE_DIR"
  # One build at a time per clone: the wheelhouse is shared.
  exec 8>"$STATE_DIR/.lock"
  flock 8
  tool_venv
  ((NATIVE)) || "$REPO_ROOT/scripts/binfmt.sh" ensure "$PLATFORM" ||
    die "images: $PLATFORM cannot be built on this $(uname -m) machine (above)"
  local base target
  base="$(choose_base)" || exit 1
  target="$(probe_target "$base")" || exit 1
  log "images: building for $PLATFORM$( ((NATIVE)) || echo ' under QEMU')"
  for app in "${apps[@]}"; do
    build_one "$app" "$base" "$target"
  done
  for app in "${apps[@]}"; do
    log "images: $(image_ref "$app"): $(docker image inspect --format '{{.Size}}' "$(image_ref "$app")" | awk '{printf "%.0f MB", $1 / 1e6}')"
  done
  for app in "${apps[@]}"; do image_ref "$app"; done
}

case "${1:-build}" in
  build) shift || true; cmd_build "$@" ;;
  scheduler | check) cmd_build "$@" ;;
  base) need_docker "scripts/images.sh base"; choose_base ;;
  wheelhouse) cmd_wheelhouse ;;
  *) die "usage: $0 [build] [scheduler] [check] | base | wheelhouse" ;;
esac

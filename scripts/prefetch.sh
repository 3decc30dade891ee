#!/usr/bin/env bash
# make test's downloads, ahead of the stages that need them: scripts/test.sh
# runs both parts beside lint and the unit tests, which keep the cores busy
# but not the network. On a new machine that is minutes; later, each step
# finds its work done and costs a second or two.
#
#   prefetch.sh go       every Go module our builds take (each tools module's
#                        go.mod: the local control plane, kwok, the 1.35 one, kind, Argo CD,
#                        kustomize, crane), into Go's module cache
#   prefetch.sh images   a Docker engine (scripts/docker-engine.sh ensure:
#                        installed and started only where it may, as root
#                        under CI=true), then the images' Python base
#                        (scripts/images.sh base: the upstream one pulled, or
#                        the offline Debian one made where no registry
#                        answers) and their wheelhouse
#
# It never fails the run: a step that fails here fails again, with its
# message, in the stage that needs it.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULES=(cluster/local cluster/local/kwok cluster/compat cluster/kind cluster/argocd cluster/argocd/kustomize cluster/crane cluster/prometheus)

go_modules() {
  command -v go >/dev/null || return 0
  for module in "${MODULES[@]}"; do
    start=$SECONDS
    (cd "$REPO_ROOT/$module" && GOFLAGS=-modcacherw go mod download) || log "prefetch: go mod download in $module failed"
    log "prefetch: the Go modules of $module ($((SECONDS - start))s)"
  done
}

images() {
  bash "$REPO_ROOT/scripts/docker-engine.sh" ensure || return 0
  start=$SECONDS
  bash "$REPO_ROOT/scripts/images.sh" base >/dev/null && bash "$REPO_ROOT/scripts/images.sh" wheelhouse >/dev/null ||
    log "prefetch: the images' base or wheelhouse failed"
  log "prefetch: the images' Python base and wheelhouse ($((SECONDS - start))s)"
}

case "${1:-}" in
  go) go_modules ;;
  images) images ;;
  *) die "usage: $0 go|images" ;;
esac
exit 0

#!/usr/bin/env bash
# promote: a release tag's images are the ones its pipeline tested. For each
# image, the digest that $CI_REGISTRY_IMAGE/<image>:$CI_COMMIT_SHORT_SHA names
# (the OCI index of one image per platform that build-image pushed, whose
# image for the runners' platform every test job ran) gets the tags
# $CI_COMMIT_TAG (vX.Y.Z) and X.Y.Z, the charts' default, by a manifest copy
# inside the registry (`crane tag`): nothing is pulled, rebuilt or re-pushed,
# so the release tag is that index, and through it the same platform images.
# The .gitlab-ci.yml job `promote` runs it once every test job has passed.
#
# crane is the Go module cluster/crane pins, run by `go tool` (built once into
# Go's build cache). It logs in with CI_REGISTRY_USER/CI_REGISTRY_PASSWORD
# when a password is set (a local registry takes none).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CI_REGISTRY_IMAGE:?the registry path the images are in}"
: "${CI_COMMIT_SHORT_SHA:?the commit whose images are promoted}"
: "${CI_COMMIT_TAG:?the release tag (vX.Y.Z) to promote to}"
[[ "$CI_COMMIT_TAG" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "promote: $CI_COMMIT_TAG is not a release tag vX.Y.Z"
VERSION="${CI_COMMIT_TAG#v}"
command -v go >/dev/null || die "promote: Go is needed to run crane (cluster/crane/go.mod); install Go 1.26+ or run crane yourself"

if [[ -n "${CI_REGISTRY_PASSWORD:-}" ]]; then
  printf '%s' "$CI_REGISTRY_PASSWORD" |
    crane auth login "${CI_REGISTRY:?}" --username "${CI_REGISTRY_USER:?}" --password-stdin >/dev/null
fi
log "promote: crane $(crane version) ($CI_REGISTRY_IMAGE, $CI_COMMIT_SHORT_SHA -> $CI_COMMIT_TAG, $VERSION)"
for image in gpu-scheduler gpu-scheduler-check; do
  tested="$CI_REGISTRY_IMAGE/$image:$CI_COMMIT_SHORT_SHA"
  digest="$(crane digest "$tested")" || die "promote: $tested is not in the registry (did build-image push it?)"
  for tag in "$CI_COMMIT_TAG" "$VERSION"; do
    crane tag "$CI_REGISTRY_IMAGE/$image@$digest" "$tag"
    promoted="$(crane digest "$CI_REGISTRY_IMAGE/$image:$tag")"
    [[ "$promoted" == "$digest" ]] || die "promote: $image:$tag is $promoted after the copy, not $digest"
  done
  log "promote: $image@$digest is :$CI_COMMIT_TAG and :$VERSION"
done

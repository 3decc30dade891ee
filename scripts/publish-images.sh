#!/usr/bin/env bash
# publish-images: the .gitlab-ci.yml job build-image. Both images, built for
# each platform of IMAGE_PLATFORMS by scripts/images.sh (another machine's
# platform under QEMU, scripts/binfmt.sh), pushed as
#   $CI_REGISTRY_IMAGE/<image>:$CI_COMMIT_SHORT_SHA-<arch>   one per platform
#   $CI_REGISTRY_IMAGE/<image>:$CI_COMMIT_SHORT_SHA          an OCI index of them
# Clients (containerd, Docker) pick their platform's image from the index;
# every test job runs the commit's tag, promote gives the index the release
# tags, sign signs it and each platform's image.
#
# Docker 20.10 writes this machine's platform into the config of an image
# built on a base of another platform (it ignores `docker import
# --platform`), so a pushed image whose config does not say its platform
# gets it set by `crane mutate --set-platform` (a new config, so a new
# digest) before the index is made; the index's descriptors carry the
# platform of each config (`crane index append`), and the index is checked
# before the job ends.
#
# Env: IMAGE_PLATFORMS   comma-separated, linux/amd64 and/or linux/arm64
#                        (default both); a platform that cannot be built here
#                        fails the job: a release is never quietly one platform short
#      CI_REGISTRY_IMAGE, CI_COMMIT_SHORT_SHA; CI_REGISTRY_USER and
#      CI_REGISTRY_PASSWORD log in when a password is set (docker and crane
#      share DOCKER_CONFIG)
# crane: the Go module cluster/crane pins (lib.sh), so Go is needed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CI_REGISTRY_IMAGE:?the registry path to push the images to}"
: "${CI_COMMIT_SHORT_SHA:?the commit whose images are built}"
IFS=, read -r -a PLATFORMS <<<"${IMAGE_PLATFORMS:-linux/amd64,linux/arm64}"
IMAGES=(gpu-scheduler gpu-scheduler-check)
SET_HOW="set the CI/CD variable IMAGE_PLATFORMS (docs/install.md, \"Image platforms\")"

((${#PLATFORMS[@]})) || die "build-image: IMAGE_PLATFORMS is empty: $SET_HOW to linux/amd64,linux/arm64 or one of them"
for platform in "${PLATFORMS[@]}"; do
  [[ "$platform" == linux/amd64 || "$platform" == linux/arm64 ]] ||
    die "build-image: IMAGE_PLATFORMS names '$platform': only linux/amd64 and linux/arm64 are built; $SET_HOW"
done
[[ "$(printf '%s\n' "${PLATFORMS[@]}" | sort -u | wc -l)" == "${#PLATFORMS[@]}" ]] ||
  die "build-image: IMAGE_PLATFORMS=${IMAGE_PLATFORMS:-} names a platform twice"
command -v go >/dev/null || die "build-image: Go is needed to run crane (cluster/crane/go.mod); install Go 1.26+"

# Before any build: a platform this runner cannot emulate fails now, saying so.
for platform in "${PLATFORMS[@]}"; do
  "$REPO_ROOT/scripts/binfmt.sh" ensure "$platform" ||
    die "build-image: $platform cannot be built on this $(uname -m) runner (above). Give build-image a runner that can (privileged, root: QEMU is registered then), or release without it: $SET_HOW to the platforms it can build"
done

if [[ -n "${CI_REGISTRY_PASSWORD:-}" ]]; then
  printf '%s' "$CI_REGISTRY_PASSWORD" |
    docker login --username "${CI_REGISTRY_USER:?}" --password-stdin "${CI_REGISTRY:?}" >/dev/null
fi

# config_platform REF: os/architecture[/variant] its config says.
config_platform() {
  crane config "$1" | python3 -c '
import json, sys
c = json.load(sys.stdin)
print("/".join(p for p in (c.get("os"), c.get("architecture"), c.get("variant")) if p))'
}

declare -A manifests # image -> "-m REF@DIGEST" for each platform
for platform in "${PLATFORMS[@]}"; do
  arch="${platform#linux/}"
  start=$SECONDS
  # Built under a local tag per platform that outlives the pipeline's own
  # tags (make pipeline removes those), so that images.sh finds an unchanged
  # image up to date next time instead of building it again (under QEMU, minutes).
  SCHEDULER_IMAGE="gpu-scheduler:build-$arch" CHECK_IMAGE="gpu-scheduler-check:build-$arch" \
    IMAGE_PLATFORM="$platform" "$REPO_ROOT/scripts/images.sh" build >/dev/null ||
    die "build-image: building the $platform images failed (above); to release without $platform, $SET_HOW"
  for image in "${IMAGES[@]}"; do
    ref="$CI_REGISTRY_IMAGE/$image:$CI_COMMIT_SHORT_SHA-$arch"
    docker tag "$image:build-$arch" "$ref"
    docker push --quiet "$ref" >/dev/null || die "build-image: docker push $ref failed (above)"
    said="$(config_platform "$ref")"
    if [[ "$said" != "$platform" ]]; then
      log "build-image: $ref says $said in its config (Docker's, not its binaries'): setting $platform"
      crane mutate --set-platform "$platform" --tag "$ref" "$ref" >/dev/null
      said="$(config_platform "$ref")"
      [[ "$said" == "$platform" ]] || die "build-image: $ref still says $said after crane mutate --set-platform $platform"
    fi
    manifests[$image]+=" -m $CI_REGISTRY_IMAGE/$image@$(crane digest "$ref")"
  done
  log "build-image: both images for $platform built and pushed in $((SECONDS - start))s"
done

# check_index REF: an index with exactly one image per wanted platform, each
# config saying the platform its descriptor names.
check_index() {
  local ref="$1" listed want
  listed="$(crane manifest "$ref" | python3 -c '
import json, sys
index = json.load(sys.stdin)
assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index.get("mediaType")
for m in index["manifests"]:
    p = m.get("platform") or {}
    print(m["digest"], "/".join(x for x in (p.get("os"), p.get("architecture"), p.get("variant")) if x))')" ||
    die "build-image: $ref is not an OCI index"
  want="$(printf '%s\n' "${PLATFORMS[@]}" | sort)"
  [[ "$(awk '{print $2}' <<<"$listed" | sort)" == "$want" ]] ||
    die "build-image: $ref lists $(awk '{print $2}' <<<"$listed" | tr '\n' ' ')but IMAGE_PLATFORMS is ${PLATFORMS[*]}"
  while read -r digest platform; do
    [[ "$(config_platform "${ref%:*}@$digest")" == "$platform" ]] ||
      die "build-image: in $ref, $digest is listed as $platform but its config says $(config_platform "${ref%:*}@$digest")"
  done <<<"$listed"
}

for image in "${IMAGES[@]}"; do
  index="$CI_REGISTRY_IMAGE/$image:$CI_COMMIT_SHORT_SHA"
  # shellcheck disable=SC2086 # one -m REF per platform
  crane index append ${manifests[$image]} --tag "$index" >/dev/null
  check_index "$index"
  log "build-image: $index is $(crane digest "$index"), an index of ${PLATFORMS[*]}"
done

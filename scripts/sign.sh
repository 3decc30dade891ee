#!/usr/bin/env bash
# sign: a release's images carry the project's signature and their SBOM. For
# each image, the digest promote gave the release tag (the one every test job
# ran: an OCI index of one image per platform, scripts/publish-images.sh) is
# signed with cosign, by digest, with --recursive: the index and each
# platform's image get a signature. syft's SBOM of each platform's image
# (SPDX JSON; the packages differ per platform) is attached to that image as a
# signed in-toto attestation (cosign attest --type spdxjson). All of it lands
# in the registry beside the image, so that
#   cosign verify --key cosign.pub IMAGE@DIGEST              (index or platform)
#   cosign verify-attestation --key cosign.pub --type spdxjson IMAGE@PLATFORM_DIGEST
# prove who released it and what it holds. Then each is verified here with
# the public key of the signing key (and with COSIGN_PUBLIC_KEY when set, the
# key users are told to verify with): a release whose key does not match what
# users hold fails here, not at their admission controller. The SBOMs
# (<image>-<version>-<arch>.spdx.json) and the public key are also left in
# $SIGN_OUT_DIR (.cache/release) as the job's artifacts. The .gitlab-ci.yml
# job `sign` runs it after promote.
#
# Key-based signing: keyless (Fulcio, OIDC) needs Sigstore's public services,
# and nothing here is written to a transparency log either (Rekor is public:
# a private project's image names would land there). So verifying needs
# --insecure-ignore-tlog (cosign's word for "trust the key alone").
#
# Env (CI/CD variables; docs/install.md):
#   COSIGN_PRIVATE_KEY  the key `cosign generate-key-pair` wrote: a File
#                       variable (its path) or the PEM text itself
#   COSIGN_PASSWORD     its password (masked), read by cosign itself
#   COSIGN_PUBLIC_KEY   optional, File or text: the public key users verify with
#   SIGN_PLAIN_HTTP=1   the registry speaks plain HTTP (make pipeline's)
#   CI_REGISTRY_IMAGE, CI_COMMIT_SHORT_SHA, CI_COMMIT_TAG as for promote;
#   CI_REGISTRY_USER/CI_REGISTRY_PASSWORD log in when a password is set.
# cosign and syft: scripts/signing-tools.sh (upstream release binaries, else
# built from the Go modules cluster/cosign and cluster/syft pin).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CI_REGISTRY_IMAGE:?the registry path the images are in}"
: "${CI_COMMIT_SHORT_SHA:?the commit whose images were promoted}"
: "${CI_COMMIT_TAG:?the release tag (vX.Y.Z) whose images are signed}"
OUT="${SIGN_OUT_DIR:-$CACHE_DIR/release}"
SETUP="set them in Settings > CI/CD > Variables (docs/install.md, \"Signed images\")"
[[ -n "${COSIGN_PRIVATE_KEY:-}" ]] ||
  die "sign: COSIGN_PRIVATE_KEY is not set: a release is signed with the project's key; make one with 'cosign generate-key-pair', then $SETUP"
# Without it cosign would ask on a terminal the job does not have.
[[ -n "${COSIGN_PASSWORD+set}" ]] || die "sign: COSIGN_PASSWORD is not set (the private key's password): $SETUP"
command -v go >/dev/null || die "sign: Go is needed to run crane (cluster/crane/go.mod); install Go 1.26+"

COSIGN="$("$REPO_ROOT/scripts/signing-tools.sh" cosign)"
SYFT="$("$REPO_ROOT/scripts/signing-tools.sh" syft)"

# key_ref VAR: what cosign's --key takes for VAR: a File variable's path, or
# env://VAR for a variable holding the PEM text.
key_ref() {
  local value="${!1}"
  if [[ -f "$value" ]]; then echo "$value"; else echo "env://$1"; fi
}

registry_flags=()
if [[ "${SIGN_PLAIN_HTTP:-0}" == 1 ]]; then
  registry_flags+=(--allow-http-registry)
  export SYFT_REGISTRY_INSECURE_USE_HTTP=true
fi
# syft would otherwise ask GitHub for a newer version of itself.
export SYFT_CHECK_FOR_APP_UPDATE=false
if [[ -n "${CI_REGISTRY_PASSWORD:-}" ]]; then
  # Into DOCKER_CONFIG, where cosign and syft look for it too.
  printf '%s' "$CI_REGISTRY_PASSWORD" |
    crane auth login "${CI_REGISTRY:?}" --username "${CI_REGISTRY_USER:?}" --password-stdin >/dev/null
fi

rm -rf "$OUT"
mkdir -p "$OUT"
# A signing config with no service: sign with the key alone, upload to no
# transparency log or timestamp authority (cosign v3 refuses --tlog-upload=false
# beside its default config from Sigstore's TUF repository).
"$COSIGN" signing-config create --out "$OUT/signing-config.json" >/dev/null
private="$(key_ref COSIGN_PRIVATE_KEY)"
"$COSIGN" public-key --key "$private" --outfile "$OUT/cosign.pub" >/dev/null
public_keys=("$OUT/cosign.pub")
[[ -z "${COSIGN_PUBLIC_KEY:-}" ]] || public_keys+=("$(key_ref COSIGN_PUBLIC_KEY)")
log "sign: cosign $("$COSIGN" version --json | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p'), syft $("$SYFT" version | awk '/^Version:/ {print $2}') ($CI_REGISTRY_IMAGE, $CI_COMMIT_TAG)"

# platforms_of REF: "DIGEST ARCH" for each image of the index REF (crane's
# table: digest, media type, os/arch); fails when REF is no index.
platforms_of() {
  local listed
  listed="$(crane index list "$1")" || return 1
  awk 'NR > 1 { split($3, platform, "/"); print $1, platform[2] }' <<<"$listed"
}

# verify WHAT REF: cosign's check of REF's signature (WHAT=signature) or SBOM
# attestation (WHAT=sbom) with each public key; its account goes to the log
# only when one fails.
verify() {
  local what="$1" ref="$2" key out
  local args=(verify)
  [[ "$what" == signature ]] || args=(verify-attestation --type spdxjson)
  for key in "${public_keys[@]}"; do
    out="$("$COSIGN" "${args[@]}" --key "$key" --insecure-ignore-tlog "${registry_flags[@]}" "$ref" 2>&1 >/dev/null)" ||
      { printf '%s\n' "$out" >&2; die "sign: the $what of $ref does not verify with $key"; }
  done
}

for image in gpu-scheduler gpu-scheduler-check; do
  digest="$(crane digest "$CI_REGISTRY_IMAGE/$image:$CI_COMMIT_TAG")" ||
    die "sign: $CI_REGISTRY_IMAGE/$image:$CI_COMMIT_TAG is not in the registry (did promote run?)"
  tested="$(crane digest "$CI_REGISTRY_IMAGE/$image:$CI_COMMIT_SHORT_SHA")"
  [[ "$digest" == "$tested" ]] || die "sign: $image:$CI_COMMIT_TAG is $digest, not the tested $tested"
  ref="$CI_REGISTRY_IMAGE/$image@$digest"
  platforms="$(platforms_of "$ref")" || die "sign: $ref is not the index build-image pushes (scripts/publish-images.sh)"
  [[ -n "$platforms" ]] || die "sign: the index $ref lists no image"
  "$COSIGN" sign --yes --recursive --key "$private" --signing-config "$OUT/signing-config.json" "${registry_flags[@]}" "$ref"
  verify signature "$ref"
  while read -r platform_digest arch; do
    platform_ref="$CI_REGISTRY_IMAGE/$image@$platform_digest"
    sbom="$OUT/$image-${CI_COMMIT_TAG#v}-$arch.spdx.json"
    "$SYFT" scan --quiet "registry:$platform_ref" --output "spdx-json=$sbom"
    "$COSIGN" attest --yes --key "$private" --signing-config "$OUT/signing-config.json" "${registry_flags[@]}" \
      --type spdxjson --predicate "$sbom" "$platform_ref"
    verify signature "$platform_ref"
    verify sbom "$platform_ref"
    log "sign: $platform_ref ($arch) signed, SBOM attached ($(basename "$sbom")); both verify"
  done <<<"$platforms"
  log "sign: $ref signed with its $(wc -l <<<"$platforms") platform images; every signature verifies with ${public_keys[*]}"
done
rm -f "$OUT/signing-config.json"

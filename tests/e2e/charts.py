"""The charts as `helm template` renders them, for the suites that run the product on this host.

Nothing rendered here is pulled: the product's commands run on this host, or on KWOK nodes
that run no container, so the charts' image.registry is left empty (they refuse their
placeholder registry even where no image is rendered).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from commands import run

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / ".cache" / "bin" / "helm"
KUBECTL = REPO / ".cache" / "bin" / "kubectl"
SCHEDULER_CHART = REPO / "charts" / "gpu-scheduler"
CHECK_CHART = REPO / "charts" / "gpu-scheduler-check"


def helm_template(release: str, chart: Path, namespace: str, *args: str) -> list[dict]:
    """The documents `helm template release chart --namespace namespace *args` renders, with
    image.registry empty unless `args` set another."""
    assert HELM.is_file(), f"{HELM} is missing: run `bash scripts/fetch-tools.sh`"
    argv = [HELM, "template", release, chart, "--namespace", namespace, "--set-string", "image.registry=", *args]
    result = run(argv, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"helm template {chart} {' '.join(args)} failed: {result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

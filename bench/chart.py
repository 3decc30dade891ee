"""What the benchmark takes from the chart as it is deployed, read from charts/gpu-scheduler/values.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from .paths import REPO

CHART = REPO / "charts" / "gpu-scheduler"
VALUES = CHART / "values.yaml"


def webhook_timeout_seconds(values: Path = VALUES) -> float:
    """webhook.timeoutSeconds: how long the apiserver waits for the webhook before it gives up
    (and, with failurePolicy Fail, refuses the pod)."""
    return yaml.safe_load(values.read_text())["webhook"]["timeoutSeconds"]


def webhook_workers(values: Path = VALUES) -> int:
    """webhook.workers: the worker processes the chart runs the webhook with."""
    return yaml.safe_load(values.read_text())["webhook"]["workers"]

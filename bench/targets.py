"""Checking the measured figures against bench/performance-config.yaml. Pure but for loading the file."""

from __future__ import annotations

import math
import operator
from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parent / "performance-config.yaml"

OPERATORS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
RUNS = ("bench", "scale")
PASS, MISS, NOT_MEASURED = "PASS", "MISS", "not measured"
FIELDS = ("metric", "description", "op", "threshold", "unit", "at")

# gpu-scheduler in bind mode (contenders.OURS_BIND: devices in the Binding, no admission call), issue 47's
# targets, kept here beside CONFIG's (which they join in load(); a metric CONFIG names itself is
# CONFIG's): against kube-scheduler matched with its default profile and at its defaults, the Go bare
# binder (the moonshot: the control plane's own limit), and every pod's Scheduled Event sent inside
# the measured window; at scheduler_perf's scale, in the same run, throughput and CPU per pod.
BIND_AT = "1000 pods, 100 nodes"
BIND_SCALE_AT = "10000 pods, 5000 nodes"
BIND_TARGETS = (
    {
        "metric": "cpu_ratio.total.bind_over_kube_matched",
        "description": "CPU per pod of a burst, bind mode: scheduler + control plane (no webhook), "
        "vs kube-scheduler matched (default profile)",
        "op": "<=",
        "threshold": 1.0,
        "unit": "x",
        "at": BIND_AT,
    },
    {
        "metric": "ratio.bind_over_kube_matched",
        "description": "burst throughput, bind mode, vs kube-scheduler matched (default profile)",
        "op": ">=",
        "threshold": 1.0,
        "unit": "x",
        "at": BIND_AT,
    },
    {
        "metric": "ratio.bind_over_kube_defaults",
        "description": "burst throughput, bind mode, vs kube-scheduler at its default client settings "
        "(qps 50, burst 100)",
        "op": ">=",
        "threshold": 2.0,
        "unit": "x",
        "at": BIND_AT,
    },
    {
        "metric": "ratio.bind_over_ceiling",
        "description": "burst throughput, bind mode, vs the bare binder in Go, the control plane's own limit "
        "(moonshot)",
        "op": ">=",
        "threshold": 0.9,
        "unit": "x",
        "at": BIND_AT,
    },
    {
        "metric": "ours_bind.latency_p99_s",
        "description": "create-to-bound latency p99 of the pod burst, bind mode",
        "op": "<",
        "threshold": 1.0,
        "unit": "s",
        "at": BIND_AT,
    },
    {
        "metric": "ours_bind.scheduled_event_share",
        "description": "pods of the burst whose Scheduled Event was sent inside the measured window, bind mode",
        "op": ">=",
        "threshold": 1.0,
        "unit": "x",
        "at": BIND_AT,
    },
    {
        "metric": "scale.ratio.bind_over_kube_matched",
        "description": "burst throughput at scheduler_perf's scale, bind mode, vs kube-scheduler matched "
        "(default profile)",
        "op": ">=",
        "threshold": 1.2,
        "unit": "x",
        "at": BIND_SCALE_AT,
        "run": "scale",
    },
    {
        "metric": "scale.cpu_ratio.total.bind_over_kube_matched",
        "description": "CPU per pod at scheduler_perf's scale, bind mode: scheduler + control plane, vs "
        "kube-scheduler matched (default profile), every window settled",
        "op": "<=",
        "threshold": 1.0,
        "unit": "x",
        "at": BIND_SCALE_AT,
        "run": "scale",
    },
)


def load(path: Path = CONFIG, run: str | None = None) -> list[dict]:
    """The targets (of one run kind, when given), BIND_TARGETS among them; a malformed entry is an
    error naming it."""
    targets = yaml.safe_load(path.read_text())["targets"]
    named = {t.get("metric") for t in targets}
    targets += [dict(t) for t in BIND_TARGETS if t["metric"] not in named]
    for position, target in enumerate(targets):
        missing = [f for f in FIELDS if f not in target]
        if missing:
            raise ValueError(f"{path}: target {position + 1}: missing {', '.join(missing)}")
        if target["op"] not in OPERATORS:
            raise ValueError(
                f"{path}: target {target['metric']}: op {target['op']!r} is not one of {', '.join(OPERATORS)}"
            )
        target.setdefault("run", "bench")
        if target["run"] not in RUNS:
            raise ValueError(
                f"{path}: target {target['metric']}: run {target['run']!r} is not one of {', '.join(RUNS)}"
            )
    return [t for t in targets if run is None or t["run"] == run]


def _measured(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def evaluate(targets: list[dict], metrics: dict[str, dict]) -> list[dict]:
    """Each target with the measured value, the scale it was measured at, and PASS/MISS.

    A figure that comes with a reason (a runner it reads had an incomplete
    round, the webhook was saturated: see summary.headline_metrics) is a MISS
    whatever its value, even when there is no value at all: the work it
    describes was not done, which is a failure, not an absence of data.
    """
    checked = []
    for target in targets:
        measured = metrics.get(target["metric"]) or {}
        value = measured.get("value")
        reason = measured.get("reason")
        if reason:
            status = MISS
        elif not _measured(value):
            status = NOT_MEASURED
        else:
            status = PASS if OPERATORS[target["op"]](value, target["threshold"]) else MISS
        checked.append(
            {**target, "value": value, "measured_at": measured.get("scale"), "status": status, "reason": reason}
        )
    return checked


def shortfall(target: dict) -> str:
    """Why a missed target was missed: by how much, in the target's terms, and the reason its
    figure could not pass, if it had one ("" when it was not missed)."""
    if target["status"] != MISS:
        return ""
    value, threshold = target["value"], target["threshold"]
    parts = []
    if _measured(value) and not OPERATORS[target["op"]](value, threshold):
        if target["op"] == "==":
            parts.append(f"{value:g} {target['unit']} instead of {threshold:g}")
        elif threshold and target["unit"] == "x":
            parts.append(f"{abs(value / threshold - 1) * 100:.0f}% {'over' if value > threshold else 'short'}")
        else:
            parts.append(f"{abs(value - threshold):.3g} {target['unit']} {'over' if value > threshold else 'short'}")
    if target.get("reason"):
        parts.append(target["reason"])
    return "; ".join(parts)

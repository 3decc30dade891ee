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


def load(path: Path = CONFIG, run: str | None = None) -> list[dict]:
    """The targets (of one run kind, when given); a malformed entry is an error naming it."""
    targets = yaml.safe_load(path.read_text())["targets"]
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

"""Checking the measured figures against bench/performance-config.yaml. Pure but for loading the file."""

from __future__ import annotations

import math
import operator
from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parent / "performance-config.yaml"

OPERATORS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
PASS, MISS, NOT_MEASURED = "PASS", "MISS", "not measured"


def load(path: Path = CONFIG) -> list[dict]:
    targets = yaml.safe_load(path.read_text())["targets"]
    for target in targets:
        if target["op"] not in OPERATORS:
            raise ValueError(
                f"{path}: target {target['metric']}: op {target['op']!r} is not one of {', '.join(OPERATORS)}"
            )
    return targets


def evaluate(targets: list[dict], metrics: dict[str, dict]) -> list[dict]:
    """Each target with the measured value, the scale it was measured at, and PASS/MISS."""
    checked = []
    for target in targets:
        measured = metrics.get(target["metric"])
        value = None if measured is None else measured["value"]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            status = NOT_MEASURED
        else:
            status = PASS if OPERATORS[target["op"]](value, target["threshold"]) else MISS
        checked.append(
            {**target, "value": value, "measured_at": measured["scale"] if measured else None, "status": status}
        )
    return checked

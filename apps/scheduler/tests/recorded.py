"""What kube-scheduler 1.37 said of the pods in testdata/kube_scheduler_messages.json (recorded
by record_kube_scheduler.py on the local control plane), read for the unit tests."""

from __future__ import annotations

import json
from pathlib import Path

KUBE_SCHEDULER = json.loads((Path(__file__).parent / "testdata" / "kube_scheduler_messages.json").read_text())
PINNED_NODE = KUBE_SCHEDULER["node"]


def failed_scheduling(case: str) -> str:
    return KUBE_SCHEDULER["cases"][case]["FailedScheduling"]


def reason_for_the_pinned_node(case: str) -> str:
    """The reason kube-scheduler gave for the one node the pod was pinned to: of a Filter, the
    reason counted once ("1 node(s) didn't ..."; the other nodes failed the pod's node
    affinity); of a PreFilter, its uncounted reason. The FitError reads
    "0/4 nodes are available: <reasons>. preemption: ..." (or ". not found" after a PreFilter)."""
    reasons = failed_scheduling(case).split(" nodes are available: ", 1)[1].split(". ", 1)[0].split(", ")
    counted = [r.removeprefix("1 ") for r in reasons if r.startswith("1 ")]
    if counted:
        (reason,) = counted
        return reason
    (reason,) = reasons
    return reason


def ours(reason: str, plugin: str, node: str = PINNED_NODE, line: int = 1, pre_filter: bool = False) -> str:
    """gpu-scheduler's message for that reason on the map's node."""
    counted = reason if pre_filter else f"1 {reason}"
    pins = f"The map (line {line}) pins the pod to node {node}, which {plugin} refused."
    return f"0/1 nodes are available: {counted}. {pins}"

"""/validate's checks of a gang workload (gpu-scheduler/gang on its pod template): shapes
that can never complete are refused at `kubectl apply`, indexes no pod can have are reported.

A gang is bound only once every index its map names has a pending pod (docs/gangs.md). A
StatefulSet with `podManagementPolicy: OrderedReady` (its default) creates pod N+1 only once
pod N is Running and Ready, and pod 0 of a gang is never bound before the last one exists: it
would wait forever. An Indexed Job whose parallelism is below its completions never has every
index pending at once either. Pure, like admission.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..placement.gang import GANG_ANNOTATION, is_gang_member

PARALLEL = "Parallel"


def refusal(kind: str, obj: Mapping, template: Mapping, what: str) -> str | None:
    """Why a gang workload can never complete, or None (also for workloads not in a gang)."""
    if not is_gang_member((template.get("metadata") or {}).get("annotations")):
        return None
    spec = obj.get("spec") or {}
    if kind == "StatefulSet":
        policy = spec.get("podManagementPolicy") or "OrderedReady"
        if policy != PARALLEL:
            return (
                f'{what} is a gang ({GANG_ANNOTATION}: "true") with podManagementPolicy {policy}: the '
                "StatefulSet would create each pod only once the one before runs, and no pod of a gang runs "
                f"before all exist, so it would never start; set podManagementPolicy: {PARALLEL}"
            )
    if kind == "Job":
        completions, parallelism = spec.get("completions"), spec.get("parallelism")
        if isinstance(completions, int) and isinstance(parallelism, int) and parallelism < completions:
            return (
                f'{what} is a gang ({GANG_ANNOTATION}: "true") with parallelism {parallelism} below its '
                f"completions {completions}: its pods would never all exist at once, and no pod of a gang runs "
                "before all exist; set parallelism to completions"
            )
    return None


def unreachable_indexes(kind: str, obj: Mapping, template: Mapping, indexes: list[int], what: str) -> str | None:
    """A warning when a gang's map names indexes that no pod of the workload can have (more
    lines than replicas): the gang would wait for them until its timeout."""
    if not is_gang_member((template.get("metadata") or {}).get("annotations")):
        return None
    spec = obj.get("spec") or {}
    if kind == "StatefulSet":
        ordinals = spec.get("ordinals")
        start = ordinals.get("start", 0) if isinstance(ordinals, Mapping) else 0
        count = spec.get("replicas", 1)
        field = "replicas"
    elif kind == "Job":
        start, count, field = 0, spec.get("completions", 1), "completions"
    else:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (start, count)):
        return None
    beyond = [i for i in indexes if not start <= i < start + count]
    if not beyond:
        return None
    shown = ", ".join(str(i) for i in beyond[:10]) + (f" and {len(beyond) - 10} more" if len(beyond) > 10 else "")
    return (
        f"{what} is a gang whose map names index {shown}, which no pod of it can have ({field} {count}): "
        "the gang will wait for those pods and never start; give the map one line per pod"
    )


def every_pod_line(template: Mapping, what: str) -> str | None:
    """A warning when a gang's map has a line for every pod (`*=...`): the gang's members are
    its map's indexes, and such a line names none, so the gang would wait forever."""
    if not is_gang_member((template.get("metadata") or {}).get("annotations")):
        return None
    return (
        f"{what} is a gang whose map has a line for every pod (`*=...`), which says nothing of how many pods "
        "the gang has: it will wait and never start; give the map one line per index (<index>=*:gpus=<count>)"
    )

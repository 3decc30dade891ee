"""Which gang a pod belongs to: the pods of one distributed job, placed all or none.

A workload opts in on its pod template with the annotation `gpu-scheduler/gang: "true"`.
Its gang is the pods of its controlling owner (a StatefulSet, a Job) in its namespace; a
bare pod has no owner, so it names a label in `gpu-scheduler/gang-label`, and its gang is
the pods of its namespace with the same value of that label. The gang's members are the
lines of its map: every index the map names must have a pod (docs/gangs.md).

Read from the pod alone (annotations, labels, owner): a scheduler that starts, or a new
leader, rebuilds every gang from the pods it lists, with no state of its own to recover.
Pure: no kubernetes import.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from .errors import PlacementError, quote
from .pod_index import pod_key

GANG_ANNOTATION = "gpu-scheduler/gang"
GANG_LABEL_ANNOTATION = "gpu-scheduler/gang-label"
# A node label key (rack, NVLink domain): a gang of count lines goes, when it can, to nodes
# that share one value of it.
GANG_TOPOLOGY_ANNOTATION = "gpu-scheduler/gang-topology"
_TRUE = "true"
_FALSE = "false"


class GangError(PlacementError):
    """The pod asks for a gang that cannot be told: a bad value, or no owner and no label."""


def is_gang_member(annotations: Mapping | None) -> bool:
    """Whether these annotations (a pod's, or a pod template's) opt in to gang placement."""
    value = (annotations or {}).get(GANG_ANNOTATION)
    return isinstance(value, str) and value.strip().lower() == _TRUE


def _controller(metadata: Mapping) -> Mapping | None:
    for ref in metadata.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def gang_of(pod: Mapping) -> str | None:
    """The pod's gang key (`<namespace>/<owner kind>/<owner name>`, or `<namespace>/<label>=<value>`
    for bare pods), or None when it is not in a gang. GangError when it asks for one that
    cannot be told."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    value = annotations.get(GANG_ANNOTATION)
    if value is None or (isinstance(value, str) and value.strip().lower() == _FALSE):
        return None
    if not is_gang_member(annotations):
        raise GangError(
            f'pod {pod_key(pod)}: annotation {GANG_ANNOTATION} is {quote(str(value))}; write "true" to place '
            'its workload\'s pods all or none, or "false"'
        )
    namespace = metadata.get("namespace") or "default"
    owner = _controller(metadata)
    if owner is not None:
        return f"{namespace}/{owner.get('kind')}/{owner.get('name')}"
    label = annotations.get(GANG_LABEL_ANNOTATION)
    if not isinstance(label, str) or not label:
        raise GangError(
            f'pod {pod_key(pod)} is in a gang ({GANG_ANNOTATION}: "true") but has no controller '
            f"(StatefulSet, Job) to group it by: name the label whose value groups its gang in the "
            f"annotation {GANG_LABEL_ANNOTATION}"
        )
    labels = metadata.get("labels") or {}
    if not isinstance(labels.get(label), str):
        raise GangError(
            f"pod {pod_key(pod)}: its {GANG_LABEL_ANNOTATION} names the label {quote(label)}, which the pod "
            "does not have: give every pod of the gang that label, with one value per gang"
        )
    return f"{namespace}/{label}={labels[label]}"


def gang_topology(pod: Mapping) -> str | None:
    """The node label key whose value the gang's count lines prefer to share, or None. GangError
    when it is not a label key."""
    from .requests import is_label_key

    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(GANG_TOPOLOGY_ANNOTATION)
    if value is None:
        return None
    if not isinstance(value, str) or not is_label_key(value.strip()):
        raise GangError(
            f"pod {pod_key(pod)}: annotation {GANG_TOPOLOGY_ANNOTATION} is {quote(str(value))}, not a node label "
            "key (e.g. topology.kubernetes.io/zone, or your rack label)"
        )
    return value.strip()


def gang_label(annotations: Mapping | None) -> str | None:
    """The label a bare pod's gang is grouped by (what the scheduler must keep of its labels)."""
    label = (annotations or {}).get(GANG_LABEL_ANNOTATION)
    return label if isinstance(label, str) and label else None


def created_at(pod: Mapping) -> float:
    """The pod's creationTimestamp as a Unix time (0 when absent or unreadable): gangs are
    served oldest first, and a gang's timeout runs from its newest pod's creation, both read
    from the pods so that a restarted scheduler reckons exactly as the one before."""
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(text, str):
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0

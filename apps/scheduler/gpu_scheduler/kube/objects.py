"""Pods cut down to what scheduling reads, so 10,000 cached pods stay small.

A pod from the API carries its whole spec and status (often kilobytes, plus
kubectl's last-applied annotation); decide() and the ledger read only the
identity, the map and placement annotations, the index label or annotation,
the owner kinds, the node and the phase.
"""

from __future__ import annotations

import sys

from gpu_scheduler.placement import MAP_ANNOTATION, PLACEMENT_ANNOTATION
from gpu_scheduler.placement.pod_index import JOB_INDEX_KEY, STATEFULSET_INDEX_LABEL

KEPT_ANNOTATIONS = (MAP_ANNOTATION, PLACEMENT_ANNOTATION, JOB_INDEX_KEY)
KEPT_LABELS = (STATEFULSET_INDEX_LABEL, JOB_INDEX_KEY)
TERMINAL_PHASES = ("Succeeded", "Failed")


def _kept(mapping: dict | None, keys: tuple[str, ...]) -> dict | None:
    if not mapping:
        return None
    # Every pod of a StatefulSet carries the same map text, which can be
    # long: interning stores it once instead of once per pod, and makes the
    # parser's cache lookups hash it once.
    kept = {k: sys.intern(mapping[k]) for k in keys if isinstance(mapping.get(k), str)}
    return kept or None


def trim_pod(pod: dict) -> dict:
    """The pod as API JSON, with only the fields scheduling reads."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    trimmed_meta = {
        "namespace": metadata.get("namespace"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }
    annotations = _kept(metadata.get("annotations"), KEPT_ANNOTATIONS)
    if annotations:
        trimmed_meta["annotations"] = annotations
    labels = _kept(metadata.get("labels"), KEPT_LABELS)
    if labels:
        trimmed_meta["labels"] = labels
    owners = [
        {"kind": ref.get("kind"), "controller": ref.get("controller")}
        for ref in metadata.get("ownerReferences") or ()
        if ref.get("controller")
    ]
    if owners:
        trimmed_meta["ownerReferences"] = owners
    if metadata.get("deletionTimestamp"):
        trimmed_meta["deletionTimestamp"] = metadata["deletionTimestamp"]
    return {
        "metadata": trimmed_meta,
        "spec": {"schedulerName": spec.get("schedulerName"), "nodeName": spec.get("nodeName") or ""},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def pod_key(pod: dict) -> str:
    metadata = pod["metadata"]
    return f"{metadata['namespace']}/{metadata['name']}"


def is_terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def node_name(node: dict) -> str:
    return (node.get("metadata") or {}).get("name") or ""

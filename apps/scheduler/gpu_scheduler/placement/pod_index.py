"""Which index a pod has, and so which line of the map is its own.

The index must be stable and given by Kubernetes, never guessed: a ReplicaSet
pod's random suffix can be all digits ("web-7d4b9-12345") and reading it as an
index would place the pod on an arbitrary line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .errors import PodIndexError, quote
from .numbers import MAX_INDEX, bounded_int, shown

STATEFULSET_INDEX_LABEL = "apps.kubernetes.io/pod-index"
JOB_INDEX_KEY = "batch.kubernetes.io/job-completion-index"

_TRAILING_INDEX = re.compile(r"-([0-9]+)$")
_DIGITS = re.compile(r"[0-9]+")
_SHOWN_NAME = 60


def pod_key(pod: Mapping, namespace: str | None = None) -> str:
    """`namespace/name` for messages; uses generateName when the name is not set yet."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or namespace or "default"
    name = meta.get("name") or (f"{meta['generateName']}<generated>" if meta.get("generateName") else "<unnamed>")
    return f"{ns}/{name}"


def controller_kind(pod: Mapping) -> str | None:
    """Kind of the pod's controlling owner, or None for a bare pod."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref.get("kind")
    return None


def _named(pod: Mapping, namespace: str | None) -> str:
    # A real pod's name has at most 253 characters; a hostile admission
    # request's may be megabytes, which a message must not repeat.
    key = pod_key(pod, namespace)
    return key if len(key) <= 2 * _SHOWN_NAME else f"{key[:_SHOWN_NAME]}...{key[-_SHOWN_NAME:]}"


def _bounded_index(digits: str, source: str, pod: Mapping, namespace: str | None) -> int:
    index = bounded_int(digits, MAX_INDEX)
    if index is None:
        raise PodIndexError(
            f"pod {_named(pod, namespace)}: the index {shown(digits)} from {source} is larger than {MAX_INDEX}, "
            "the largest a line of the map can give"
        )
    return index


def _index_value(value: object, source: str, pod: Mapping, namespace: str | None) -> int:
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return _bounded_index(value, source, pod, namespace)
    raise PodIndexError(f"pod {_named(pod, namespace)}: {source} is {quote(str(value))}, not a non-negative integer")


def pod_index(pod: Mapping, namespace: str | None = None) -> int:
    """The pod's index: StatefulSet label, Job completion index, then the name.

    `pod` is the pod as API JSON (camelCase). `namespace` names the pod in
    messages when its metadata has none (admission requests).
    """
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if STATEFULSET_INDEX_LABEL in labels:
        return _index_value(labels[STATEFULSET_INDEX_LABEL], f"label {STATEFULSET_INDEX_LABEL}", pod, namespace)
    if JOB_INDEX_KEY in labels:
        return _index_value(labels[JOB_INDEX_KEY], f"label {JOB_INDEX_KEY}", pod, namespace)
    if JOB_INDEX_KEY in annotations:
        return _index_value(annotations[JOB_INDEX_KEY], f"annotation {JOB_INDEX_KEY}", pod, namespace)

    kind = controller_kind(pod)
    if kind not in (None, "StatefulSet"):
        raise PodIndexError(
            f"pod {_named(pod, namespace)} is created by a {kind}, whose pods have no stable index; "
            "use a StatefulSet, an Indexed Job, or bare pods named <name>-<index>"
        )
    match = _TRAILING_INDEX.search(meta.get("name") or "")
    if match is None:
        raise PodIndexError(
            f"pod {_named(pod, namespace)} has no index: name it <name>-<index> "
            f"or set the label {STATEFULSET_INDEX_LABEL}"
        )
    return _bounded_index(match.group(1), "its name", pod, namespace)

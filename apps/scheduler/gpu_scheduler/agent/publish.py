"""What the agent writes on its Node for an inventory: a decision on plain data.

The write is one JSON merge patch of the annotation and the labels, so a
reader never sees the annotation of one inventory beside labels of another,
and nothing else of the Node is touched. Nothing is ever removed but the
model label of a node that no longer has a GPU to name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..scheduling.inventory import COUNT_LABEL, INVENTORY_ANNOTATION, MODEL_LABEL, Inventory

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class NodeUpdate:
    patch: dict  # a JSON merge patch of the Node
    changes: tuple[str, ...]  # what it changes, for the log: "label gpu-scheduler/gpu-count: 4 -> 8"


def node_update(node: Mapping, inventory: Inventory) -> NodeUpdate | None:
    """The patch that makes the Node publish `inventory`; None when it already does."""
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    wanted_annotation = inventory.to_annotation()
    wanted_labels: dict[str, str | None] = {MODEL_LABEL: None, **inventory.labels()}

    changes = []
    current_annotation = annotations.get(INVENTORY_ANNOTATION)
    if current_annotation != wanted_annotation:
        verb = "set" if current_annotation is None else "changed"
        changes.append(f"annotation {INVENTORY_ANNOTATION} {verb}")
    for key in (COUNT_LABEL, MODEL_LABEL):
        if labels.get(key) != wanted_labels[key]:
            changes.append(f"label {key}: {_shown(labels.get(key))} -> {_shown(wanted_labels[key])}")
    if not changes:
        return None
    if wanted_labels[MODEL_LABEL] is None and MODEL_LABEL not in labels:
        del wanted_labels[MODEL_LABEL]  # null would only remove what is not there
    patch = {"metadata": {"annotations": {INVENTORY_ANNOTATION: wanted_annotation}, "labels": wanted_labels}}
    return NodeUpdate(patch, tuple(changes))


def summary(inventory: Inventory) -> str:
    """The inventory in a few words, for the log: "4 GPUs (NVIDIA A100-SXM4-40GB), 2 MIG devices,
    NVLink between 0-1, 2-3"."""
    gpus = sorted(inventory.gpus, key=lambda gpu: gpu.index)
    models = ", ".join(dict.fromkeys(gpu.model for gpu in gpus))
    text = f"{len(gpus)} GPU{'' if len(gpus) == 1 else 's'}" + (f" ({models})" if models else "")
    migs = sum(len(gpu.mig_devices) for gpu in gpus)
    if migs:
        text += f", {migs} MIG device{'' if migs == 1 else 's'}"
    links = sorted(inventory.links, key=lambda link: (link.a, link.b))
    nvlinked = [f"{link.a}-{link.b}" for link in links if link.nvlinks]
    if nvlinked:
        text += f", NVLink between {', '.join(nvlinked)}"
    return text


def _shown(value: str | None) -> str:
    return "(none)" if value is None else value

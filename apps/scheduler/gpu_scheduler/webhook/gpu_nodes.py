"""The GPUs the nodes publish, kept by a watch of only the nodes that publish them.

Every pod's admission checks its line's devices against the GPUs its line's node
publishes (gpu-scheduler agent: the annotation gpu-scheduler/gpus, and the label
gpu-scheduler/gpu-count beside it). Asking kube-apiserver for that node at each
admission cost a GET per node and worker every 10 s, whether or not the node
publishes anything: 0.20 GETs per pod in make bench's 1,000-pod burst over 100
nodes, up to one per admission at 1,000 nodes. A list+watch of the nodes that carry
the count label (a server-side label selector) costs nothing per admission, and an
event per change of such a node; nodes without GPUs are never sent at all.

Until the watch has listed, and while it cannot be kept current (the informer says
so), admission reads the node as before (NodeReader). A node that publishes GPUs a
moment before its pods are created may be checked by neither: the scheduler checks
every pod's devices against its node's GPUs before it binds, whatever admission did.
"""

from __future__ import annotations

import threading

from ..kube.client import KubeClient
from ..kube.informer import Informer
from ..scheduling.inventory import COUNT_LABEL, INVENTORY_ANNOTATION, Inventory, InventoryError


def trim_node(node: dict) -> tuple[str, str | None]:
    """What the watch keeps of a node: its name and its inventory annotation's text."""
    metadata = node.get("metadata") or {}
    text = (metadata.get("annotations") or {}).get(INVENTORY_ANNOTATION)
    return metadata.get("name") or "", text if isinstance(text, str) else None


class PublishedGpus:
    """The inventory of every node that publishes one, from a list+watch (a WatchHandler);
    each annotation is parsed the first time admission asks for it. Thread-safe."""

    def __init__(self, client: KubeClient) -> None:
        self._lock = threading.Lock()
        self._texts: dict[str, str | None] = {}  # node -> its annotation's text
        self._parsed: dict[str, tuple[str, Inventory | None]] = {}  # node -> (text, its inventory)
        self.informer = Informer(client, "/api/v1/nodes", self, trim_node, name="gpu-nodes", label_selector=COUNT_LABEL)

    def start(self) -> None:
        self.informer.start()

    def current(self) -> bool:
        """Whether the watch has listed and is kept current: only then does it answer for
        every node (a node it does not hold publishes no GPUs)."""
        return self.informer.synced.is_set() and self.informer.current() is None

    def inventory(self, name: str) -> Inventory | None:
        """The GPUs node `name` publishes; None when it publishes none (or an unreadable
        inventory, which the scheduler reports)."""
        with self._lock:
            text = self._texts.get(name)
            parsed = self._parsed.get(name)
        if text is None:
            return None
        if parsed is not None and parsed[0] == text:
            return parsed[1]
        try:
            inventory = Inventory.from_annotation(text, f"node {name}'s annotation {INVENTORY_ANNOTATION}")
        except InventoryError:
            inventory = None
        with self._lock:
            if self._texts.get(name) == text:
                self._parsed[name] = (text, inventory)
        return inventory

    # -- WatchHandler -------------------------------------------------------------

    def replace(self, objects: list[tuple[str, str | None]], listed_at: float) -> None:
        with self._lock:
            self._texts = dict(objects)
            self._parsed = {name: kept for name, kept in self._parsed.items() if self._texts.get(name) == kept[0]}

    def upsert(self, obj: tuple[str, str | None]) -> None:
        name, text = obj
        with self._lock:
            self._texts[name] = text

    def delete(self, obj: tuple[str, str | None]) -> None:
        # Deleted, or no longer labelled: it publishes nothing now.
        name, _ = obj
        with self._lock:
            self._texts.pop(name, None)
            self._parsed.pop(name, None)

"""What the webhook reads of a node: its alias label and its published GPUs.

A pod created with spec.nodeName set, whose map line names another node, needs
the alias (no scheduler runs for such a pod, so only admission can say that its
containers would get another node's devices): a GET of that one node, kept a
few seconds. A pod whose line names a node that publishes its GPUs (gpu-scheduler
agent) has its devices checked against them: from a watch of only the nodes that
publish GPUs (gpu_nodes.py), or, until that watch is current, from the same GET.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from urllib.parse import quote

from ..kube.client import ApiError, KubeClient
from ..scheduling.inventory import INVENTORY_ANNOTATION, Inventory, InventoryError
from .gpu_nodes import PublishedGpus

# A node's alias label rarely changes; a few seconds of staleness only delays
# when a relabelled node's pods are judged by the new label.
CACHE_SECONDS = 10.0
# Well inside the webhook's own timeoutSeconds (chart default 10), so that an
# apiserver too slow to answer gets a warning, not a failed admission.
READ_TIMEOUT_SECONDS = 2.0
# A GET with this query is answered from kube-apiserver's watch cache, not by a quorum
# read from etcd; this reader keeps what it reads for seconds anyway.
FROM_WATCH_CACHE = {"resourceVersion": "0"}


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node as admission sees it: None for a node that does not exist."""

    name: str
    alias: str | None
    inventory: Inventory | None = None  # its published GPUs; None when none (or unreadable)


class NodeReadError(Exception):
    """The node could not be read (no answer, forbidden, ...): nothing is known of it."""


class NodeReader:
    """GET /api/v1/nodes/<name> from the apiserver's cache (a 404 confirmed from etcd),
    kept per name for CACHE_SECONDS; thread-safe."""

    def __init__(
        self, client: KubeClient, alias_label: str, clock=time.monotonic, published: PublishedGpus | None = None
    ) -> None:
        self._client = client
        self._alias_label = alias_label
        self._clock = clock
        self._published = published
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, NodeFacts | None]] = {}

    @property
    def alias_label(self) -> str:
        return self._alias_label

    def node(self, name: str) -> NodeFacts | None:
        """The node called `name`, or None when there is none; NodeReadError when unknown."""
        now = self._clock()
        with self._lock:
            cached = self._cache.get(name)
        if cached and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        facts = self._read(name)
        with self._lock:
            self._cache[name] = (now, facts)
        return facts

    def inventory(self, name: str) -> Inventory | None:
        """The GPUs node `name` publishes: from the watch of the nodes that publish GPUs
        while it is current (gpu_nodes.py), else from a read of the node; None when it
        publishes none or is no node. NodeReadError when it cannot be known."""
        if self._published is not None and self._published.current():
            return self._published.inventory(name)
        facts = self.node(name)
        return None if facts is None else facts.inventory

    def _read(self, name: str) -> NodeFacts | None:
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        deadline = time.monotonic() + READ_TIMEOUT_SECONDS
        node = self._get(name, path, FROM_WATCH_CACHE, deadline)
        if node is None:
            # A 404 refuses a pod created on that node, and the cache may not yet hold
            # a node created a moment ago: etcd confirms it.
            node = self._get(name, path, None, deadline)
        if node is None:
            return None
        metadata = node.get("metadata") or {}
        alias = (metadata.get("labels") or {}).get(self._alias_label)
        return NodeFacts(name, alias if isinstance(alias, str) else None, _inventory(name, metadata))

    def _get(self, name: str, path: str, query: dict[str, str] | None, deadline: float) -> dict | None:
        """The node, or None for a 404; NodeReadError for any other failure."""
        try:
            return self._client.call("GET", path, query=query, timeout=max(deadline - time.monotonic(), 0.001))
        except ApiError as err:
            if err.status == 404:
                return None
            raise NodeReadError(f"could not read node {name}: {err}") from None


def _inventory(name: str, metadata: dict) -> Inventory | None:
    text = (metadata.get("annotations") or {}).get(INVENTORY_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        return Inventory.from_annotation(text, f"node {name}'s annotation {INVENTORY_ANNOTATION}")
    except InventoryError:
        # The scheduler reports an unreadable inventory; admission checks nothing against it.
        return None

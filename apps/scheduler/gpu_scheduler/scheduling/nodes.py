"""The nodes a map may name, found by name or by alias label, and what scheduling reads of them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..placement import PlacementError
from .inventory import INVENTORY_ANNOTATION, Inventory, InventoryError

DEFAULT_ALIAS_LABEL = "gpu-node-name"
GPU_RESOURCE = "nvidia.com/gpu"


class NodeResolutionError(PlacementError):
    """The map's node cannot be turned into exactly one node of the cluster."""


class NodeNotFoundError(NodeResolutionError):
    pass


class AmbiguousAliasError(NodeResolutionError):
    pass


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule, PreferNoSchedule or NoExecute


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What scheduling needs of a node; a fraction of the API object's size.

    `allocatable` is in canonical units (cpu in millicores, memory and storage
    in bytes, everything else in units); kube.objects.node_info fills it,
    since parsing quantities is the Kubernetes client's job, not this layer's.
    """

    name: str
    alias: str | None
    ready: bool
    not_ready_message: str
    unschedulable: bool
    gpus: int  # nvidia.com/gpu capacity, 0 when not advertised
    gpus_advertised: bool = False  # whether the node reports nvidia.com/gpu at all
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, int] = field(default_factory=dict)
    # The GPUs `gpu-scheduler agent` publishes (None: none published, or unreadable, and
    # then inventory_problem says why it could not be read).
    inventory: Inventory | None = None
    inventory_problem: str | None = None

    @classmethod
    def from_api(cls, node: Mapping, alias_label: str = DEFAULT_ALIAS_LABEL) -> NodeInfo:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        ready, message = False, "it reports no Ready condition"
        for cond in status.get("conditions") or ():
            if cond.get("type") == "Ready":
                ready = cond.get("status") == "True"
                message = cond.get("message") or cond.get("reason") or f"Ready={cond.get('status')}"
                break
        capacity = status.get("capacity") or {}
        try:
            gpus = int(capacity.get(GPU_RESOURCE, 0))
        except (TypeError, ValueError):
            gpus = 0
        labels = meta.get("labels") or {}
        inventory, problem = _inventory(meta)
        taints = tuple(
            Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
            for t in spec.get("taints") or ()
            if isinstance(t, Mapping)
        )
        return cls(
            name=meta.get("name", ""),
            alias=labels.get(alias_label),
            ready=ready,
            not_ready_message=message,
            unschedulable=bool(spec.get("unschedulable")),
            gpus=gpus,
            gpus_advertised=GPU_RESOURCE in capacity,
            labels=dict(labels),
            taints=taints,
            inventory=inventory,
            inventory_problem=problem,
        )


def _inventory(meta: Mapping) -> tuple[Inventory | None, str | None]:
    text = (meta.get("annotations") or {}).get(INVENTORY_ANNOTATION)
    if text is None:
        return None, None
    try:
        return Inventory.from_annotation(text, f"node {meta.get('name', '')}'s annotation {INVENTORY_ANNOTATION}"), None
    except InventoryError as err:
        return None, str(err)


class NodeIndex:
    """Nodes by name and by alias label, kept current by a watch."""

    def __init__(self, alias_label: str = DEFAULT_ALIAS_LABEL) -> None:
        self.alias_label = alias_label
        self._by_name: dict[str, NodeInfo] = {}
        self._by_alias: dict[str, set[str]] = {}
        # Told the name of each node stored or deleted (scheduling.free_index).
        self.on_change: Callable[[str], None] | None = None

    def upsert(self, node: NodeInfo | Mapping) -> NodeInfo:
        """Stores the node (a NodeInfo, or API JSON read with NodeInfo.from_api); returns its NodeInfo."""
        info = node if isinstance(node, NodeInfo) else NodeInfo.from_api(node, self.alias_label)
        self._forget_alias(self._by_name.get(info.name))
        self._by_name[info.name] = info
        if info.alias is not None:
            self._by_alias.setdefault(info.alias, set()).add(info.name)
        if self.on_change is not None:
            self.on_change(info.name)
        return info

    def delete(self, name: str) -> NodeInfo | None:
        info = self._by_name.pop(name, None)
        self._forget_alias(info)
        if self.on_change is not None:
            self.on_change(name)
        return info

    def _forget_alias(self, info: NodeInfo | None) -> None:
        if info is None or info.alias is None:
            return
        names = self._by_alias.get(info.alias)
        if names is not None:
            names.discard(info.name)
            if not names:
                del self._by_alias[info.alias]

    def get(self, name: str) -> NodeInfo | None:
        return self._by_name.get(name)

    def all(self) -> Iterable[NodeInfo]:
        return self._by_name.values()

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def resolve(self, map_node: str) -> NodeInfo:
        """The node the map means: a node of that name, else the one node with that alias."""
        info = self._by_name.get(map_node)
        if info is not None:
            return info
        names = self._by_alias.get(map_node)
        if not names:
            raise NodeNotFoundError(
                f"node {map_node} not found: no node has that name or the label {self.alias_label}={map_node}"
            )
        if len(names) > 1:
            raise AmbiguousAliasError(
                f"the label {self.alias_label}={map_node} is on {len(names)} nodes "
                f"({', '.join(sorted(names))}); an alias must name exactly one node"
            )
        return self._by_name[next(iter(names))]

    def matches(self, map_node: str, node_name: str) -> bool:
        """Whether a change to `node_name` can affect pods whose map names `map_node`."""
        if map_node == node_name:
            return True
        info = self._by_name.get(node_name)
        return info is not None and info.alias == map_node

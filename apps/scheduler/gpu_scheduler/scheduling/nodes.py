"""The nodes a map may name, found by name or by alias label, and whether they can take a pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..placement import PlacementError

DEFAULT_ALIAS_LABEL = "gpu-node-name"
GPU_RESOURCE = "nvidia.com/gpu"


class NodeResolutionError(PlacementError):
    """The map's node cannot be turned into exactly one node of the cluster."""


class NodeNotFoundError(NodeResolutionError):
    pass


class AmbiguousAliasError(NodeResolutionError):
    pass


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What scheduling needs of a node; a fraction of the API object's size."""

    name: str
    alias: str | None
    ready: bool
    not_ready_message: str
    unschedulable: bool
    gpus: int

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
        return cls(
            name=meta.get("name", ""),
            alias=(meta.get("labels") or {}).get(alias_label),
            ready=ready,
            not_ready_message=message,
            unschedulable=bool(spec.get("unschedulable")),
            gpus=gpus,
        )


def unschedulable_reason(node: NodeInfo) -> str | None:
    """Why no pod may be bound to this node now, or None."""
    if not node.ready:
        return f"node {node.name} is not Ready ({node.not_ready_message})"
    if node.unschedulable:
        return f"node {node.name} is cordoned (spec.unschedulable=true)"
    return None


class NodeIndex:
    """Nodes by name and by alias label, kept current by a watch."""

    def __init__(self, alias_label: str = DEFAULT_ALIAS_LABEL) -> None:
        self.alias_label = alias_label
        self._by_name: dict[str, NodeInfo] = {}
        self._by_alias: dict[str, set[str]] = {}

    def upsert(self, node: Mapping) -> NodeInfo:
        info = NodeInfo.from_api(node, self.alias_label)
        self._forget_alias(self._by_name.get(info.name))
        self._by_name[info.name] = info
        if info.alias is not None:
            self._by_alias.setdefault(info.alias, set()).add(info.name)
        return info

    def delete(self, name: str) -> NodeInfo | None:
        info = self._by_name.pop(name, None)
        self._forget_alias(info)
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

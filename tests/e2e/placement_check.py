"""Did each pod land where its map says? One row per pod, as the API server stores it."""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import container_env
from .workloads import Expected

STATEFULSET_INDEX_LABEL = "apps.kubernetes.io/pod-index"
# KWOK reports a bound pod Running; on KinD its containers really run.
WANTED_PHASE = "Running"


def shown(value: str | None) -> str:
    """A value for the table: <unset> without an entry, "" for an empty one (a fieldRef before the bind)."""
    if value is None:
        return "<unset>"
    return value or '""'


@dataclass(frozen=True)
class PodPlacement:
    pod: str
    index: int
    expected: Expected | None
    node: str  # spec.nodeName
    map_node: str  # the name a map uses for that node (its gpu-node-name label)
    phase: str
    # What each container sees (cluster.container_env): its literal, or the devices the bind
    # wrote for its fieldRef ("" before the bind); None without an entry.
    cuda_by_container: dict[str, str | None]

    @property
    def cuda(self) -> str:
        """The one CUDA_VISIBLE_DEVICES all containers see, or what each sees when they differ."""
        values = set(self.cuda_by_container.values())
        if len(values) == 1:
            return shown(next(iter(values)))
        return ", ".join(f"{name}={shown(value)}" for name, value in self.cuda_by_container.items())

    @property
    def node_shown(self) -> str:
        if not self.node:
            return "<unbound>"
        return self.node if self.map_node == self.node else f"{self.node} ({self.map_node})"

    def problems(self) -> list[str]:
        if self.expected is None:
            return [f"index {self.index} is not in the map"]
        found = []
        if self.map_node != self.expected.node:
            found.append(f"node {self.node_shown}, expected {self.expected.node}")
        wrong = {n: v for n, v in self.cuda_by_container.items() if v != self.expected.devices}
        if wrong or not self.cuda_by_container:
            found.append(f"CUDA_VISIBLE_DEVICES {self.cuda}, expected {self.expected.devices} in every container")
        if self.phase != WANTED_PHASE:
            found.append(f"phase {self.phase or '<none>'}, expected {WANTED_PHASE}")
        return found


def statefulset_placements(
    pods: list[dict], expected: dict[int, Expected], aliases: dict[str, str]
) -> list[PodPlacement]:
    """One row per StatefulSet pod, by index; `aliases` from cluster.node_aliases()."""
    rows = []
    for pod in pods:
        node = pod["spec"].get("nodeName") or ""
        index = int(pod["metadata"]["labels"][STATEFULSET_INDEX_LABEL])
        rows.append(
            PodPlacement(
                pod=pod["metadata"]["name"],
                index=index,
                expected=expected.get(index),
                node=node,
                map_node=aliases.get(node, node),
                phase=(pod.get("status") or {}).get("phase") or "",
                cuda_by_container=container_env(pod),
            )
        )
    return sorted(rows, key=lambda row: row.index)


def table(rows: list[PodPlacement]) -> str:
    """A fixed-width table: pod, index, node (expected), CUDA_VISIBLE_DEVICES (expected), phase, verdict."""
    header = ("POD", "INDEX", "NODE", "EXPECTED NODE", "CUDA_VISIBLE_DEVICES", "EXPECTED", "PHASE", "OK")
    lines = [header]
    for row in rows:
        expected = row.expected or Expected("-", "-")
        problems = row.problems()
        lines.append(
            (
                row.pod,
                str(row.index),
                row.node_shown,
                expected.node,
                row.cuda,
                expected.devices,
                row.phase,
                "yes" if not problems else "NO: " + "; ".join(problems),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)) + "  " + line[-1]
        for line in lines
    )

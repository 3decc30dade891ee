"""kube-scheduler's NodeResourcesFit filter, on plain data.

Quantities arrive already parsed into canonical integers (cpu in millicores,
memory and storage in bytes, extended resources in units): kube.objects does
that with the Kubernetes client's own quantity parser. A pod fits a node when
one more pod is within the node's `pods` allocatable and, for every resource
the pod requests, the request is within allocatable minus what the pods
already on the node (of every scheduler, and the ones this scheduler has
assumed) request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

# A pod's requests: (resource, amount) pairs with amount > 0, sorted; a tuple so
# that thousands of cached pods share nothing mutable and stay small.
Requests = tuple[tuple[str, int], ...]


def requests_of(amounts: Mapping[str, int]) -> Requests:
    return tuple(sorted((name, amount) for name, amount in amounts.items() if amount > 0))


@dataclass(slots=True)
class NodeUsage:
    """What the pods on one node request together."""

    pods: int = 0
    requested: dict[str, int] = field(default_factory=dict)

    def add(self, requests: Requests) -> None:
        self.pods += 1
        for name, amount in requests:
            self.requested[name] = self.requested.get(name, 0) + amount

    def remove(self, requests: Requests) -> None:
        self.pods -= 1
        for name, amount in requests:
            left = self.requested.get(name, 0) - amount
            if left > 0:
                self.requested[name] = left
            else:
                self.requested.pop(name, None)

    def empty(self) -> bool:
        return self.pods <= 0 and not self.requested


EMPTY_USAGE = NodeUsage()


def insufficient(requests: Iterable[tuple[str, int]], allocatable: Mapping[str, int], usage: NodeUsage) -> list[str]:
    """kube-scheduler's reasons ("Too many pods", "Insufficient cpu", ...) why the pod does not fit; [] if it does."""
    reasons = []
    if usage.pods + 1 > allocatable.get(PODS, 0):
        reasons.append("Too many pods")
    for name, amount in requests:
        if name == PODS:
            continue
        if amount > allocatable.get(name, 0) - usage.requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons

"""Which GPUs are held, by which pods, and what to do when a map asks for a held one."""

from __future__ import annotations

import enum
from collections.abc import Iterable


class SharingPolicy(enum.Enum):
    ALLOW = "allow"  # bind silently: the user shares GPUs on purpose
    WARN = "warn"  # bind, and say with a Warning event which pod holds the GPU
    DENY = "deny"  # refuse until the holder ends

    @classmethod
    def parse(cls, value: str) -> SharingPolicy:
        try:
            return cls(value.lower())
        except ValueError:
            choices = "|".join(p.value for p in cls)
            raise ValueError(f"--gpu-sharing must be one of {choices}, got {value!r}") from None


class GpuLedger:
    """(node, device) pairs held by bound pods that have not ended."""

    def __init__(self) -> None:
        self._by_pod: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._holders: dict[tuple[str, str], set[str]] = {}

    def hold(self, pod_key: str, node: str, devices: Iterable[str]) -> None:
        self.release(pod_key)
        devices = tuple(devices)
        self._by_pod[pod_key] = (node, devices)
        for device in devices:
            self._holders.setdefault((node, device), set()).add(pod_key)

    def release(self, pod_key: str) -> bool:
        held = self._by_pod.pop(pod_key, None)
        if held is None:
            return False
        node, devices = held
        for device in devices:
            holders = self._holders.get((node, device))
            if holders is not None:
                holders.discard(pod_key)
                if not holders:
                    del self._holders[(node, device)]
        return True

    def holds(self, pod_key: str) -> bool:
        return pod_key in self._by_pod

    def node_of(self, pod_key: str) -> str | None:
        """The node on which the pod holds GPUs, or None."""
        held = self._by_pod.get(pod_key)
        return held[0] if held else None

    def conflicts(self, pod_key: str, node: str, devices: Iterable[str]) -> list[tuple[str, str]]:
        """(other pod, device) for each requested device another pod holds on that node."""
        found = []
        for device in devices:
            for other in sorted(self._holders.get((node, device), ())):
                if other != pod_key:
                    found.append((other, device))
        return found

    def held_per_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node, _device in self._holders:
            counts[node] = counts.get(node, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self._by_pod)

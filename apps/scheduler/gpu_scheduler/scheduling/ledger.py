"""Which GPUs are held, by which pods, and what to do when a map asks for a held one.

Holds are keyed by pod UID, never by name: a pod deleted and recreated under
the same name is another pod, and the old one's late DELETED event must not
free the new one's GPUs. Devices are compared by placement.device_identity, so
`0` and `00`, or a UUID in upper and lower case, are one GPU.

GPU 0, that GPU's GPU-<uuid> and a MIG-<uuid> on it are one GPU too, and
without an inventory of each node's GPUs the ledger cannot tell. So it also
says which other pods hold devices on a node written another way
(placement.device_spelling; spelling_conflicts): --gpu-sharing=deny refuses
those as it refuses a held GPU, since they may be one.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from ..placement import device_identity, device_spelling


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
    """(node, device) pairs held by pods, by UID; each pod's name is kept for messages."""

    def __init__(self) -> None:
        self._by_pod: dict[str, tuple[str, str, tuple[str, ...]]] = {}  # uid -> (pod key, node, device identities)
        self._holders: dict[tuple[str, str], set[str]] = {}  # (node, device identity) -> uids
        # node -> spelling -> uid -> the pod's first device written that way, as written
        self._spelled: dict[str, dict[str, dict[str, str]]] = {}

    def hold(self, uid: str, pod_key: str, node: str, devices: Iterable[str]) -> None:
        """The pod holds these GPUs on this node (replacing what it held before)."""
        self.release(uid)
        devices = tuple(devices)
        identities = tuple(dict.fromkeys(device_identity(d) for d in devices))
        if not identities:
            return
        self._by_pod[uid] = (pod_key, node, identities)
        for device in identities:
            self._holders.setdefault((node, device), set()).add(uid)
        spellings = self._spelled.setdefault(node, {})
        for device in devices:
            spellings.setdefault(device_spelling(device), {}).setdefault(uid, device)

    def release(self, uid: str) -> str | None:
        """Frees the pod's GPUs; returns the node they were on, or None if it held none."""
        held = self._by_pod.pop(uid, None)
        if held is None:
            return None
        _, node, identities = held
        for device in identities:
            holders = self._holders.get((node, device))
            if holders is not None:
                holders.discard(uid)
                if not holders:
                    del self._holders[(node, device)]
        spellings = self._spelled.get(node, {})
        for spelling in {device_spelling(device) for device in identities}:
            spelled = spellings.get(spelling)
            if spelled is not None:
                spelled.pop(uid, None)
                if not spelled:
                    del spellings[spelling]
        if not spellings:
            self._spelled.pop(node, None)
        return node

    def holds(self, uid: str) -> bool:
        return uid in self._by_pod

    def node_of(self, uid: str) -> str | None:
        """The node on which the pod holds GPUs, or None."""
        held = self._by_pod.get(uid)
        return held[1] if held else None

    def conflicts(self, uid: str, node: str, devices: Iterable[str]) -> list[tuple[str, str]]:
        """(other pod's key, device as requested) for each device another pod holds on that node."""
        found = []
        for device in devices:
            holders = self._holders.get((node, device_identity(device)), ())
            for other in sorted(self._by_pod[h][0] for h in holders if h != uid):
                found.append((other, device))
        return found

    def spelling_conflicts(self, uid: str, node: str, devices: Iterable[str]) -> list[tuple[str, str, str]]:
        """(other pod's key, a device it holds, a device asked) for each other pod that holds
        devices on that node written another way (placement.device_spelling) than devices
        asked: they may be one GPU. One entry per pod and pair of spellings."""
        asked: dict[str, str] = {}
        for device in devices:
            asked.setdefault(device_spelling(device), device)
        found = []
        for spelling, spelled in self._spelled.get(node, {}).items():
            for asked_spelling, device in asked.items():
                if asked_spelling != spelling:
                    others = sorted((self._by_pod[h][0], held) for h, held in spelled.items() if h != uid)
                    found.extend((other, held, device) for other, held in others)
        return found

    def holders(self) -> dict[tuple[str, str], frozenset[str]]:
        """(node, device identity) -> UIDs holding it: for invariant checks and debugging."""
        return {where: frozenset(uids) for where, uids in self._holders.items()}

    def held_per_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node, _device in self._holders:
            counts[node] = counts.get(node, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self._by_pod)

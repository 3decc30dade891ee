"""Which GPUs are held, by which pods, and what to do when a map asks for a held one.

Holds are keyed by pod UID, never by name: a pod deleted and recreated under
the same name is another pod, and the old one's late DELETED event must not
free the new one's GPUs. Devices are compared by placement.device_identity, so
`0` and `00`, or a UUID in upper and lower case, are one GPU.

GPU 0, that GPU's GPU-<uuid> and a MIG-<uuid> on it are one GPU too. Where a
node publishes its inventory (scheduling.inventory, written by `gpu-scheduler
agent`), every device is resolved to the physical GPU it is: one key per GPU,
and one per MIG device under its GPU, so a whole GPU conflicts with each of
its MIG devices while two MIG devices of one GPU do not conflict. Without an
inventory the ledger cannot tell, so it also says which other pods hold
devices on the node written another way (placement.device_spelling;
spelling_conflicts): --gpu-sharing=deny refuses those as it refuses a held
GPU, since they may be one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Set

from ..placement import device_identity, device_spelling
from .inventory import Inventory

_NOTHING: frozenset[str] = frozenset()


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
    """(node, GPU key) pairs held by pods, by UID; each pod's name is kept for messages.

    A key is the device's identity where the node has no inventory, else the
    physical GPU's UUID ("gpu-..."), or "<gpu uuid>/<mig uuid>" for a MIG device;
    a device the inventory does not know keeps its identity.
    """

    def __init__(self) -> None:
        # uid -> (pod key, node, devices as written, one per identity)
        self._by_pod: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        self._keys: dict[str, frozenset[str]] = {}  # uid -> the keys it holds
        self._holders: dict[tuple[str, str], set[str]] = {}  # (node, key) -> uids
        self._mig_keys: dict[tuple[str, str], set[str]] = {}  # (node, gpu key) -> its MIG keys held
        self._node_keys: dict[str, set[str]] = {}  # node -> the keys held on it (for count lines)
        # Told the node whose held keys changed (scheduling.free_index keeps its order by them).
        self.on_node_change: Callable[[str], None] | None = None
        # node -> spelling -> uid -> the pod's first device written that way, as written
        self._spelled: dict[str, dict[str, dict[str, str]]] = {}
        self._inventories: dict[str, Inventory] = {}  # node -> its published GPUs

    # -- inventories ----------------------------------------------------------------------------

    def set_inventory(self, node: str, inventory: Inventory | None) -> bool:
        """The node's GPUs as it publishes them (None: unknown). The pods on the node are
        held again under the new keys; returns whether anything changed."""
        if self._inventories.get(node) == inventory:
            return False
        if inventory is None:
            self._inventories.pop(node, None)
        else:
            self._inventories[node] = inventory
        for uid, (key, held_node, devices) in list(self._by_pod.items()):
            if held_node == node:
                self.hold(uid, key, node, devices)
        return True

    def inventory(self, node: str) -> Inventory | None:
        return self._inventories.get(node)

    def key(self, node: str, device: str) -> str:
        """The key under which a device of a node is held (its physical GPU where known)."""
        return self._key(node, device)[0]

    def _key(self, node: str, device: str) -> tuple[str, str | None]:
        """(key, the key of its GPU when the device is a MIG device, else None)."""
        inventory = self._inventories.get(node)
        ref = inventory.resolve(device) if inventory is not None else None
        if ref is None:
            return device_identity(device), None
        gpu = ref.gpu_uuid.lower()
        if ref.mig_uuid is None:
            return gpu, None
        return f"{gpu}/{ref.mig_uuid.lower()}", gpu

    # -- holding --------------------------------------------------------------------------------

    def hold(self, uid: str, pod_key: str, node: str, devices: Iterable[str]) -> None:
        """The pod holds these GPUs on this node (replacing what it held before)."""
        self.release(uid)
        unique: dict[str, str] = {}  # identity -> the device as first written
        for device in devices:
            unique.setdefault(device_identity(device), device)
        devices = tuple(unique.values())
        if not devices:
            return
        self._by_pod[uid] = (pod_key, node, devices)
        keys = set()
        for device in devices:
            key, gpu = self._key(node, device)
            keys.add(key)
            self._holders.setdefault((node, key), set()).add(uid)
            self._node_keys.setdefault(node, set()).add(key)
            if gpu is not None:
                self._mig_keys.setdefault((node, gpu), set()).add(key)
        self._keys[uid] = frozenset(keys)
        if self.on_node_change is not None:
            self.on_node_change(node)
        spellings = self._spelled.setdefault(node, {})
        for device in devices:
            spellings.setdefault(device_spelling(device), {}).setdefault(uid, device)

    def release(self, uid: str) -> str | None:
        """Frees the pod's GPUs; returns the node they were on, or None if it held none."""
        held = self._by_pod.pop(uid, None)
        if held is None:
            return None
        _, node, devices = held
        for key in self._keys.pop(uid):
            holders = self._holders.get((node, key))
            if holders is not None:
                holders.discard(uid)
                if not holders:
                    del self._holders[(node, key)]
                    self._forget_mig_key(node, key)
                    held_here = self._node_keys[node]
                    held_here.discard(key)
                    if not held_here:
                        del self._node_keys[node]
        spellings = self._spelled.get(node, {})
        for spelling in {device_spelling(device) for device in devices}:
            spelled = spellings.get(spelling)
            if spelled is not None:
                spelled.pop(uid, None)
                if not spelled:
                    del spellings[spelling]
        if not spellings:
            self._spelled.pop(node, None)
        if self.on_node_change is not None:
            self.on_node_change(node)
        return node

    def _forget_mig_key(self, node: str, key: str) -> None:
        gpu, slash, _ = key.partition("/")
        if not slash:
            return
        keys = self._mig_keys.get((node, gpu))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._mig_keys[(node, gpu)]

    def held_keys(self, node: str) -> Set[str]:
        """The keys held on the node by any pod (empty when none): a count line's free GPUs are
        the node's others. Read only; kept as holds come and go."""
        return self._node_keys.get(node, _NOTHING)

    def holds(self, uid: str) -> bool:
        return uid in self._by_pod

    def node_of(self, uid: str) -> str | None:
        """The node on which the pod holds GPUs, or None."""
        held = self._by_pod.get(uid)
        return held[1] if held else None

    # -- conflicts ------------------------------------------------------------------------------

    def conflicts(self, uid: str, node: str, devices: Iterable[str]) -> list[tuple[str, str]]:
        """(other pod's key, device as requested) for each device another pod holds on that
        node: the same GPU or MIG device, a MIG device of a GPU asked whole, or the whole GPU
        of a MIG device asked."""
        found = []
        for device in devices:
            key, gpu = self._key(node, device)
            overlapping = {key, gpu} if gpu is not None else {key, *self._mig_keys.get((node, key), ())}
            holders = set().union(*(self._holders.get((node, k), ()) for k in overlapping if k))
            for other in sorted(self._by_pod[h][0] for h in holders if h != uid):
                found.append((other, device))
        return found

    def spelling_conflicts(self, uid: str, node: str, devices: Iterable[str]) -> list[tuple[str, str, str]]:
        """(other pod's key, a device it holds, a device asked) for each other pod that holds
        devices on that node written another way (placement.device_spelling) than devices
        asked: they may be one GPU. One entry per pod and pair of spellings. None on a node
        that publishes its inventory: there every device is resolved to its GPU."""
        if node in self._inventories:
            return []
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
        """(node, GPU key) -> UIDs holding it: for invariant checks and debugging."""
        return {where: frozenset(uids) for where, uids in self._holders.items()}

    def held(self) -> list[tuple[str, str, str]]:
        """(node, GPU key, holding pod's key) for every GPU held, sorted: who holds what."""
        return sorted((node, key, self._by_pod[uid][0]) for (node, key), uids in self._holders.items() for uid in uids)

    def held_per_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node, _device in self._holders:
            counts[node] = counts.get(node, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self._by_pod)

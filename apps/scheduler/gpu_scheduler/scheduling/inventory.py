"""A node's GPUs, as `gpu-scheduler agent` reads them from NVML and publishes them on its Node.

The agent writes Inventory.to_annotation() into the node's gpu-scheduler/gpus
annotation; the scheduler reads it back with Inventory.from_annotation() and
turns the devices a map names into GPUs of that node with Inventory.resolve().
docs/gpu-inventory.md describes the format. Pure data: no NVML, no API client.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from ..placement import (
    GPU_UUID,
    MAX_DEVICE_ORDINAL,
    MIG_INSTANCE,
    MIG_UUID,
    ORDINAL,
    device_identity,
    device_spelling,
    is_device,
    may_be_alias,
)
from ..placement.grammar import MAX_LABEL_VALUE
from ..placement.numbers import bounded_int

INVENTORY_ANNOTATION = "gpu-scheduler/gpus"
MODEL_LABEL = "gpu-scheduler/gpu-model"
COUNT_LABEL = "gpu-scheduler/gpu-count"
# The annotation's format. A reader refuses a newer one rather than guess at
# it; fields it does not know within its own version are ignored, so adding
# one needs no new version.
FORMAT_VERSION = 1

# How two GPUs reach each other, nearest first: directly by NVLink, else
# NVML's topology level of their closest common PCIe ancestor (one switch,
# several switches, the host bridge, one NUMA node, across NUMA nodes).
NVLINK = "NVLINK"
COMMON_ANCESTORS = (NVLINK, "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM")

# NVML gives GPU instance and compute instance ids as unsigned ints.
_MAX_INSTANCE_ID = 2**32 - 1
# Far beyond any GPU's memory, but a bound: a number a reader can hold exactly.
_MAX_MEMORY_MIB = 2**53
_SHOWN_CHARS = 60


class InventoryError(ValueError):
    """An inventory annotation that cannot be read; the message says where and what is wrong."""


@dataclass(frozen=True, slots=True)
class MigDevice:
    uuid: str  # MIG-<uuid>, or MIG-GPU-<gpu uuid>/<gi>/<ci> from drivers before R470
    profile: str  # e.g. "3g.20gb"
    gpu_instance_id: int
    compute_instance_id: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int  # NVML's index, which is nvidia-smi's and the map's ordinal
    uuid: str  # GPU-<uuid>
    pci_bus_id: str
    model: str  # e.g. "NVIDIA A100-SXM4-40GB"
    memory_mib: int
    numa_node: int | None = None  # None where NVML cannot tell
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class Link:
    """How GPUs a and b (indexes, a < b) are connected."""

    a: int
    b: int
    nvlinks: int  # active NVLinks between the two
    common_ancestor: str  # one of COMMON_ANCESTORS; NVLINK exactly when nvlinks > 0


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """The GPU (and MIG device) of a node that one device of a map names."""

    gpu_index: int
    gpu_uuid: str
    mig_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class Inventory:
    driver_version: str
    gpus: tuple[Gpu, ...]
    links: tuple[Link, ...] = ()

    def to_annotation(self) -> str:
        """Compact JSON, the same text for the same GPUs: the agent writes only when it changes."""
        document = {
            "version": FORMAT_VERSION,
            "driver": self.driver_version,
            "gpus": [_gpu_document(gpu) for gpu in sorted(self.gpus, key=lambda gpu: gpu.index)],
            "links": [
                {"gpus": [link.a, link.b], "nvlinks": link.nvlinks, "commonAncestor": link.common_ancestor}
                for link in sorted(self.links, key=lambda link: (link.a, link.b))
            ],
        }
        return json.dumps(document, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str, where: str) -> Inventory:
        """The inventory in an annotation's text; InventoryError naming `where` (e.g. "node
        node3's annotation gpu-scheduler/gpus") and the place in the JSON that is wrong."""
        if not isinstance(text, str):
            raise InventoryError(f"{where}: expected the annotation's JSON text, got {type(text).__name__}")
        try:
            document = json.loads(text)
        except ValueError as err:  # JSONDecodeError, or an integer of thousands of digits
            raise InventoryError(f"{where}: not valid JSON: {err}") from None
        return _Reader(where).inventory(document)

    def labels(self) -> dict[str, str]:
        """The node labels that go with the annotation, for selectors and `kubectl get -L`.
        Without a GPU (or with a model name of no usable character) there is no model label."""
        labels = {COUNT_LABEL: str(len(self.gpus))}
        models = Counter(gpu.model for gpu in sorted(self.gpus, key=lambda gpu: gpu.index))
        if models:
            # most_common keeps the first GPU's model first among equally common ones.
            value = label_value(models.most_common(1)[0][0])
            if value:
                labels[MODEL_LABEL] = value
        return labels

    def resolve(self, device: str) -> DeviceRef | None:
        """The GPU a map's device names on this node, or None when the node has no such device.

        A device is written as the map writes it: an ordinal ("0"), a GPU UUID, a MIG UUID,
        or a MIG device as drivers before R470 named it (MIG-GPU-<gpu uuid>/<gi>/<ci>);
        a UUID's hex digits in either letter case. A token the map would refuse names nothing."""
        if not is_device(device):
            return None
        spelling = device_spelling(device)
        identity = device_identity(device)
        if spelling == ORDINAL:
            return next((_ref(gpu) for gpu in self.gpus if str(gpu.index) == identity), None)
        if spelling == GPU_UUID:
            return next((_ref(gpu) for gpu in self.gpus if gpu.uuid.lower() == identity), None)
        for gpu in self.gpus:
            for mig in gpu.mig_devices:
                if mig.uuid.lower() == identity:
                    return _ref(gpu, mig)
        if spelling == MIG_INSTANCE:
            return self._resolve_mig_instance(identity)
        return None

    def _resolve_mig_instance(self, identity: str) -> DeviceRef | None:
        """MIG-GPU-<gpu uuid>/<gi>/<ci>: the MIG device by its GPU and instance ids, so that
        the old spelling finds a MIG device the driver reports by its MIG-<uuid>."""
        gpu_uuid, gi_text, ci_text = identity.removeprefix("mig-").split("/")
        gi, ci = bounded_int(gi_text, _MAX_INSTANCE_ID), bounded_int(ci_text, _MAX_INSTANCE_ID)
        for gpu in self.gpus:
            if gpu.uuid.lower() != gpu_uuid:
                continue
            for mig in gpu.mig_devices:
                if (mig.gpu_instance_id, mig.compute_instance_id) == (gi, ci):
                    return _ref(gpu, mig)
        return None

    def describe(self) -> str:
        """The node's GPUs in one line, for messages that say what a node has:
        "0 GPU-... (NVIDIA A100-SXM4-40GB; MIG 0/MIG-... 3g.20gb), 1 GPU-... (...)"."""
        if not self.gpus:
            return "no GPUs"
        return ", ".join(_describe_gpu(gpu) for gpu in sorted(self.gpus, key=lambda gpu: gpu.index))


def label_value(text: str) -> str:
    """`text` as a valid label value: spaces become '-', other characters a label value
    cannot hold are dropped, at most 63 characters, starting and ending alphanumeric."""
    kept = "".join(c for c in text.replace(" ", "-") if c.isascii() and (c.isalnum() or c in "-_."))
    value = kept[:MAX_LABEL_VALUE].strip("-_.")
    return value if may_be_alias(value) else ""


def _ref(gpu: Gpu, mig: MigDevice | None = None) -> DeviceRef:
    return DeviceRef(gpu.index, gpu.uuid, mig.uuid if mig else None)


def _describe_gpu(gpu: Gpu) -> str:
    details = gpu.model
    if gpu.mig_devices:
        migs = ", ".join(f"{gpu.index}/{mig.uuid} {mig.profile}" for mig in _sorted_migs(gpu))
        details += f"; MIG {migs}"
    elif gpu.mig_enabled:
        details += "; MIG enabled, no MIG devices"
    return f"{gpu.index} {gpu.uuid} ({details})"


def _sorted_migs(gpu: Gpu) -> list[MigDevice]:
    return sorted(gpu.mig_devices, key=lambda mig: (mig.gpu_instance_id, mig.compute_instance_id, mig.uuid))


def _gpu_document(gpu: Gpu) -> dict[str, object]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "pciBusId": gpu.pci_bus_id,
        "model": gpu.model,
        "memoryMiB": gpu.memory_mib,
        "numaNode": gpu.numa_node,
        "mig": {
            "enabled": gpu.mig_enabled,
            "devices": [
                {
                    "uuid": mig.uuid,
                    "profile": mig.profile,
                    "gpuInstance": mig.gpu_instance_id,
                    "computeInstance": mig.compute_instance_id,
                    "memoryMiB": mig.memory_mib,
                }
                for mig in _sorted_migs(gpu)
            ],
        },
    }


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


class _Reader:
    """Reads the annotation's JSON into an Inventory; every error names `where` and the
    path in the JSON (gpus[2].uuid)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, problem: str) -> NoReturn:
        raise InventoryError(f"{self.where}: {path}: {problem}")

    def inventory(self, document: object) -> Inventory:
        if not isinstance(document, Mapping):
            raise InventoryError(f"{self.where}: expected a JSON object, got {_shown(document)}")
        self._check_version(document)
        driver = self.string(document, "driver", "driver")
        gpus = tuple(self.gpu(item, f"gpus[{i}]") for i, item in enumerate(self.array(document, "gpus", "gpus")))
        self._check_unique_gpus(gpus)
        indexes = {gpu.index for gpu in gpus}
        links = tuple(
            self.link(item, f"links[{i}]", indexes) for i, item in enumerate(self.array(document, "links", "links"))
        )
        self._check_unique_links(links)
        return Inventory(driver, gpus, links)

    def _check_version(self, document: Mapping) -> None:
        version = self.integer(document, "version", "version", minimum=1, maximum=None)
        if version > FORMAT_VERSION:
            raise InventoryError(
                f"{self.where}: version {version} is newer than this gpu-scheduler understands "
                f"({FORMAT_VERSION}); run a scheduler at least as new as the agent that wrote it"
            )

    def gpu(self, item: object, path: str) -> Gpu:
        item = self.object(item, path)
        index = self.integer(item, "index", f"{path}.index", maximum=MAX_DEVICE_ORDINAL)
        uuid = self.string(item, "uuid", f"{path}.uuid")
        if device_spelling(uuid) != GPU_UUID or not is_device(uuid):
            self.fail(f"{path}.uuid", f"expected a string starting with GPU- (GPU-<uuid>), got {_shown(uuid)}")
        numa_node = item.get("numaNode")
        if "numaNode" not in item:
            self.fail(f"{path}.numaNode", "missing (null when the node's NUMA node is not known)")
        if numa_node is not None:
            numa_node = self.integer(item, "numaNode", f"{path}.numaNode", maximum=_MAX_INSTANCE_ID)
        mig = self.object(item.get("mig"), f"{path}.mig")
        enabled = mig.get("enabled")
        if not isinstance(enabled, bool):
            self.fail(f"{path}.mig.enabled", f"expected true or false, got {_shown(enabled)}")
        devices = tuple(
            self.mig_device(device, f"{path}.mig.devices[{i}]")
            for i, device in enumerate(self.array(mig, "devices", f"{path}.mig.devices"))
        )
        if devices and not enabled:
            self.fail(f"{path}.mig.devices", f"{len(devices)} MIG devices on a GPU whose MIG mode is disabled")
        self._check_unique_instances(devices, f"{path}.mig.devices")
        return Gpu(
            index=index,
            uuid=uuid,
            pci_bus_id=self.string(item, "pciBusId", f"{path}.pciBusId"),
            model=self.string(item, "model", f"{path}.model"),
            memory_mib=self.integer(item, "memoryMiB", f"{path}.memoryMiB", maximum=_MAX_MEMORY_MIB),
            numa_node=numa_node,
            mig_enabled=enabled,
            mig_devices=devices,
        )

    def mig_device(self, item: object, path: str) -> MigDevice:
        item = self.object(item, path)
        uuid = self.string(item, "uuid", f"{path}.uuid")
        if device_spelling(uuid) not in (MIG_UUID, MIG_INSTANCE) or not is_device(uuid):
            self.fail(
                f"{path}.uuid",
                f"expected a string starting with MIG- (MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>), got {_shown(uuid)}",
            )
        return MigDevice(
            uuid=uuid,
            profile=self.string(item, "profile", f"{path}.profile"),
            gpu_instance_id=self.integer(item, "gpuInstance", f"{path}.gpuInstance", maximum=_MAX_INSTANCE_ID),
            compute_instance_id=self.integer(
                item, "computeInstance", f"{path}.computeInstance", maximum=_MAX_INSTANCE_ID
            ),
            memory_mib=self.integer(item, "memoryMiB", f"{path}.memoryMiB", maximum=_MAX_MEMORY_MIB),
        )

    def link(self, item: object, path: str, indexes: set[int]) -> Link:
        item = self.object(item, path)
        pair = item.get("gpus")
        valid = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(index, int) and not isinstance(index, bool) for index in pair)
            and pair[0] < pair[1]
        )
        if not valid:
            self.fail(f"{path}.gpus", f"expected [a, b], two GPU indexes with a < b, got {_shown(pair)}")
        for index in pair:
            if index not in indexes:
                self.fail(f"{path}.gpus", f"GPU {index} is not in gpus")
        nvlinks = self.integer(item, "nvlinks", f"{path}.nvlinks", maximum=_MAX_INSTANCE_ID)
        ancestor = self.string(item, "commonAncestor", f"{path}.commonAncestor")
        if ancestor not in COMMON_ANCESTORS:
            self.fail(
                f"{path}.commonAncestor", f"expected one of {', '.join(COMMON_ANCESTORS)}, got {_shown(ancestor)}"
            )
        if (ancestor == NVLINK) != (nvlinks > 0):
            self.fail(
                f"{path}.commonAncestor",
                f"{ancestor} with {nvlinks} NVLinks; it is {NVLINK} exactly when the GPUs share an NVLink",
            )
        return Link(pair[0], pair[1], nvlinks, ancestor)

    def _check_unique_gpus(self, gpus: tuple[Gpu, ...]) -> None:
        by_index: dict[int, int] = {}
        by_uuid: dict[str, int] = {}
        mig_uuids: dict[str, str] = {}
        for i, gpu in enumerate(gpus):
            if gpu.index in by_index:
                self.fail(f"gpus[{i}].index", f"{gpu.index} is also gpus[{by_index[gpu.index]}].index")
            by_index[gpu.index] = i
            uuid = gpu.uuid.lower()
            if uuid in by_uuid:
                self.fail(f"gpus[{i}].uuid", f"{gpu.uuid} is also gpus[{by_uuid[uuid]}].uuid")
            by_uuid[uuid] = i
            for j, mig in enumerate(gpu.mig_devices):
                path = f"gpus[{i}].mig.devices[{j}].uuid"
                if mig.uuid.lower() in mig_uuids:
                    self.fail(path, f"{mig.uuid} is also {mig_uuids[mig.uuid.lower()]}")
                mig_uuids[mig.uuid.lower()] = path

    def _check_unique_instances(self, devices: tuple[MigDevice, ...], path: str) -> None:
        seen: dict[tuple[int, int], int] = {}
        for j, mig in enumerate(devices):
            key = (mig.gpu_instance_id, mig.compute_instance_id)
            if key in seen:
                self.fail(
                    f"{path}[{j}]",
                    f"GPU instance {key[0]} / compute instance {key[1]} is also {path}[{seen[key]}]'s",
                )
            seen[key] = j

    def _check_unique_links(self, links: tuple[Link, ...]) -> None:
        seen: dict[tuple[int, int], int] = {}
        for i, link in enumerate(links):
            if (link.a, link.b) in seen:
                self.fail(f"links[{i}].gpus", f"[{link.a}, {link.b}] is also links[{seen[link.a, link.b]}].gpus")
            seen[link.a, link.b] = i

    def object(self, value: object, path: str) -> Mapping:
        if not isinstance(value, Mapping):
            self.fail(path, f"expected an object, got {_shown(value)}")
        return value

    def array(self, item: Mapping, key: str, path: str) -> list:
        value = item.get(key)
        if not isinstance(value, list):
            self.fail(path, "missing" if key not in item else f"expected a list, got {_shown(value)}")
        return value

    def string(self, item: Mapping, key: str, path: str) -> str:
        value = item.get(key)
        if not isinstance(value, str):
            self.fail(path, "missing" if key not in item else f"expected a string, got {_shown(value)}")
        return value

    def integer(self, item: Mapping, key: str, path: str, *, minimum: int = 0, maximum: int | None) -> int:
        value = item.get(key)
        if key not in item:
            self.fail(path, "missing")
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(path, f"expected an integer, got {_shown(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f"at least {minimum}" if maximum is None else f"within {minimum}..{maximum}"
            self.fail(path, f"expected an integer {bounds}, got {_shown(value)}")
        return value

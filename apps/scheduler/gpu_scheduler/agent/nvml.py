"""This node's GPUs read from NVML (libnvidia-ml.so.1, through nvidia-ml-py's pynvml).

pynvml loads the library on the first nvmlInit and looks for it the way the
dynamic linker does (LD_LIBRARY_PATH, then the system's library cache), so a
test points LD_LIBRARY_PATH at a fake library before the process starts.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pynvml

from ..scheduling.inventory import NVLINK, Gpu, Inventory, Link, MigDevice

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
# NVML's topology levels (nvmlGpuTopologyLevel_t) by the names the inventory uses.
# INTERNAL is two GPUs on one board (a K80, say), behind the board's own switch: as
# near as SINGLE, the nearest PCIe level.
_TOPOLOGY_NAMES = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "SINGLE",
    pynvml.NVML_TOPOLOGY_SINGLE: "SINGLE",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "MULTIPLE",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "HOSTBRIDGE",
    pynvml.NVML_TOPOLOGY_NODE: "NODE",
    pynvml.NVML_TOPOLOGY_SYSTEM: "SYSTEM",
}
# What is assumed of two GPUs whose path NVML does not tell (a level this code does
# not know, or no answer): the farthest, so nothing counts on a closeness unproven.
_UNKNOWN_TOPOLOGY = "SYSTEM"


class NvmlUnavailable(Exception):
    """NVML cannot be used on this node at all: no driver library, or it will not start."""


class NvmlReadError(Exception):
    """NVML started but a query failed; the message names the GPU and the query."""


def read_inventory() -> Inventory:
    """Every GPU of this node, its MIG devices and how each pair is connected."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise NvmlUnavailable(
            "libnvidia-ml.so.1 not found: no NVIDIA driver on this node "
            "(or its libraries are not mounted into this container)"
        ) from None
    except pynvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML did not start (nvmlInit: {err})") from None
    try:
        return _read()
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            # What was read stands; the next read starts NVML afresh.
            log.debug("nvmlShutdown failed: %s", err)


@contextmanager
def _querying(what: str) -> Iterator[None]:
    """Turns an NVML error into NvmlReadError saying what was being read."""
    try:
        yield
    except pynvml.NVMLError as err:
        raise NvmlReadError(f"NVML could not read {what}: {err}") from None


def _read() -> Inventory:
    with _querying("the driver version"):
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
    with _querying("the number of GPUs"):
        count = pynvml.nvmlDeviceGetCount()
    handles = []
    gpus = []
    for index in range(count):
        with _querying(f"GPU {index}"):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            handles.append(handle)
            gpus.append(_gpu(index, handle))
    peers = []
    for index, handle in enumerate(handles):
        with _querying(f"the NVLinks of GPU {index}"):
            peers.append(_nvlink_peers(handle))
    links = []
    for a, b in itertools.combinations(range(count), 2):
        with _querying(f"the PCIe topology between GPUs {a} and {b}"):
            links.append(_link(gpus[a], handles[a], gpus[b], handles[b], peers[a]))
    return Inventory(driver, tuple(gpus), tuple(links))


def _gpu(index: int, handle) -> Gpu:
    mig_enabled = _mig_enabled(handle)
    return Gpu(
        index=index,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
        model=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_mib=pynvml.nvmlDeviceGetMemoryInfo(handle).total // _MIB,
        numa_node=_numa_node(handle),
        mig_enabled=mig_enabled,
        mig_devices=tuple(_mig_devices(handle)) if mig_enabled else (),
    )


def _numa_node(handle) -> int | None:
    """The GPU's NUMA node; None where the driver (or this pynvml) cannot say."""
    query = getattr(pynvml, "nvmlDeviceGetNumaNodeId", None)
    if query is None:
        return None
    try:
        node = query(handle)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return None
    return node if node >= 0 else None


def _mig_enabled(handle) -> bool:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return False  # a GPU without MIG, or a driver from before it
    return current == pynvml.NVML_DEVICE_MIG_ENABLE


def _mig_devices(handle) -> Iterator[MigDevice]:
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue  # a slot no MIG device occupies
        name = _text(pynvml.nvmlDeviceGetName(mig))
        # "NVIDIA A100-SXM4-40GB MIG 3g.20gb": the profile follows " MIG ".
        _model, marker, profile = name.rpartition(" MIG ")
        yield MigDevice(
            uuid=_text(pynvml.nvmlDeviceGetUUID(mig)),
            profile=profile if marker else name,
            gpu_instance_id=pynvml.nvmlDeviceGetGpuInstanceId(mig),
            compute_instance_id=pynvml.nvmlDeviceGetComputeInstanceId(mig),
            memory_mib=pynvml.nvmlDeviceGetMemoryInfo(mig).total // _MIB,
        )


def _link(gpu_a: Gpu, handle_a, gpu_b: Gpu, handle_b, peers_of_a: Counter[str]) -> Link:
    nvlinks = peers_of_a[pci_key(gpu_b.pci_bus_id)]
    if nvlinks:
        return Link(gpu_a.index, gpu_b.index, nvlinks, NVLINK)
    try:
        level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handle_a, handle_b)
    except pynvml.NVMLError_NotSupported:
        return Link(gpu_a.index, gpu_b.index, 0, _UNKNOWN_TOPOLOGY)
    return Link(gpu_a.index, gpu_b.index, 0, _TOPOLOGY_NAMES.get(level, _UNKNOWN_TOPOLOGY))


def _nvlink_peers(handle) -> Counter[str]:
    """How many active NVLinks of this GPU end at each PCI device (by pci_key)."""
    peers: Counter[str] = Counter()
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if not pynvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
            remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except pynvml.NVMLError_FunctionNotFound:
            break  # a driver without NVLink queries
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            # No NVLink on this GPU, or a link number past the ones it has. Cheap to ask
            # about the rest: some GPUs leave gaps among their link numbers.
            continue
        peers[pci_key(_text(remote.busId))] += 1
    return peers


def pci_key(bus_id: str) -> str:
    """A PCI bus id in one spelling: NVML writes the domain with 8 or 4 hex digits
    ("00000000:07:00.0", "0000:07:00.0"), in either letter case."""
    domain, colon, rest = bus_id.strip().lower().partition(":")
    if not colon:
        return bus_id.strip().lower()
    try:
        return f"{int(domain, 16):08x}:{rest}"
    except ValueError:
        return bus_id.strip().lower()


def _text(value: str | bytes) -> str:
    # pynvml returns str on Python 3, but older releases returned bytes.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

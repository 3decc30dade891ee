"""The fake libnvidia-ml.so.1 through the real pynvml bindings: what each layout's GPUs look like to NVML's callers.

Expected values come from the layout files themselves (read here with Python's json), so a change to a layout or a
wrong answer of the library fails. The rules that derive values (topology levels, MIG counts, NVLink states) are
the ones layouts/README.md states.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pynvml  # only its constants and structs here: the library is loaded in the subprocesses
import pytest
from commands import run, tail

from .library import BUILD, LAYOUT_NAMES, LIBRARY, SOURCE, layout_path, load_layout

# Everything pynvml reads for one layout, as JSON; failed calls as the NVMLError subclass's name.
SNAPSHOT = r"""
import json
import pynvml as n


def attempt(call, *args):
    try:
        return call(*args)
    except n.NVMLError as err:
        return type(err).__name__


def text(value):
    return value.decode() if isinstance(value, bytes) else value


n.nvmlInit()
handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
maps = open("/proc/self/maps").read().split("\n")
out = {
    "library": sorted({line.split()[-1] for line in maps if "libnvidia-ml" in line}),
    "driver_version": n.nvmlSystemGetDriverVersion(),
    "cuda_driver_version": n.nvmlSystemGetCudaDriverVersion(),
    "cuda_driver_version_v2": n.nvmlSystemGetCudaDriverVersion_v2(),
    "gpus": [],
}
for handle in handles:
    pci = n.nvmlDeviceGetPciInfo(handle)
    memory = n.nvmlDeviceGetMemoryInfo(handle)
    memory_v2 = n.nvmlDeviceGetMemoryInfo(handle, version=n.nvmlMemory_v2)
    uuid = n.nvmlDeviceGetUUID(handle)
    states = [attempt(n.nvmlDeviceGetNvLinkState, handle, link) for link in range(n.NVML_NVLINK_MAX_LINKS)]
    gpu = {
        "index": n.nvmlDeviceGetIndex(handle),
        "minor_number": n.nvmlDeviceGetMinorNumber(handle),
        "uuid": uuid,
        "name": n.nvmlDeviceGetName(handle),
        "bus_id": text(pci.busId),
        "bus_id_legacy": text(pci.busIdLegacy),
        "pci_fields": [pci.domain, pci.bus, pci.device],
        "memory": [memory.total, memory.free, memory.used],
        "memory_v2": [memory_v2.total, memory_v2.reserved, memory_v2.free, memory_v2.used],
        "numa_node": n.nvmlDeviceGetNumaNodeId(handle),
        "is_mig": n.nvmlDeviceIsMigDeviceHandle(handle).value,
        "mig_mode": attempt(n.nvmlDeviceGetMigMode, handle),
        "max_mig_devices": n.nvmlDeviceGetMaxMigDeviceCount(handle),
        "mig_slot_past_max": attempt(n.nvmlDeviceGetMigDeviceHandleByIndex, handle, 7),
        "gpu_instance_id": attempt(n.nvmlDeviceGetGpuInstanceId, handle),
        "mig_devices": [],
        "nvlink_states": states,
        "nvlink_remotes": {
            str(link): text(n.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            for link, state in enumerate(states)
            if state == n.NVML_NVLINK_STATE_ACTIVE
        },
        "topology": [n.nvmlDeviceGetTopologyCommonAncestor(handle, other) for other in handles],
        "index_by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(uuid)),
        "index_by_bus_id": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(text(pci.busId))),
        "index_by_legacy_bus_id": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(text(pci.busIdLegacy).lower())),
    }
    for slot in range(gpu["max_mig_devices"]):
        mig = attempt(n.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if isinstance(mig, str):
            gpu["mig_devices"].append(mig)
            continue
        mig_uuid = n.nvmlDeviceGetUUID(mig)
        gpu["mig_devices"].append({
            "uuid": mig_uuid,
            "name": n.nvmlDeviceGetName(mig),
            "memory_total": n.nvmlDeviceGetMemoryInfo(mig).total,
            "gpu_instance_id": n.nvmlDeviceGetGpuInstanceId(mig),
            "compute_instance_id": n.nvmlDeviceGetComputeInstanceId(mig),
            "is_mig": n.nvmlDeviceIsMigDeviceHandle(mig).value,
            "parent_uuid": n.nvmlDeviceGetUUID(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)),
            "uuid_by_uuid": n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByUUID(mig_uuid)),
            "pci_info": attempt(n.nvmlDeviceGetPciInfo, mig),
        })
    out["gpus"].append(gpu)
n.nvmlShutdown()
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=LAYOUT_NAMES)
def node(request, python_json) -> tuple[dict, dict]:
    """(the layout as the file says, what pynvml read through the fake library)"""
    return load_layout(request.param), python_json(SNAPSHOT, layout_path(request.param))


def mig_capable(gpu: dict) -> bool:
    return "A100" in gpu["name"] or "H100" in gpu["name"]


def expected_topology(a: dict, b: dict) -> int:
    if a is b:
        return pynvml.NVML_TOPOLOGY_INTERNAL
    if a.get("pcie_switch") and a.get("pcie_switch") == b.get("pcie_switch"):
        return pynvml.NVML_TOPOLOGY_SINGLE
    if a["numa_node"] == b["numa_node"]:
        return pynvml.NVML_TOPOLOGY_NODE
    return pynvml.NVML_TOPOLOGY_SYSTEM


def test_the_calls_reach_the_fake_library(node, fake_nvml_dir):
    _, seen = node
    assert seen["library"] == [str((fake_nvml_dir / LIBRARY).resolve())]


def test_driver_and_cuda_versions(node):
    layout, seen = node
    assert seen["driver_version"] == layout["driver_version"]
    assert seen["cuda_driver_version"] == layout["cuda_driver_version"]
    assert seen["cuda_driver_version_v2"] == layout["cuda_driver_version"]


def test_gpus_in_layout_order_with_uuid_name_bus_id_memory_and_numa_node(node):
    layout, seen = node
    assert len(seen["gpus"]) == len(layout["gpus"])
    for index, (want, got) in enumerate(zip(layout["gpus"], seen["gpus"], strict=True)):
        bus_id = want["pci_bus_id"].upper()
        domain, bus, device = (int(part, 16) for part in re.split("[:.]", bus_id)[:3])
        assert got["index"] == got["minor_number"] == index
        assert got["uuid"] == want["uuid"]
        assert got["name"] == want["name"]
        assert got["bus_id"] == bus_id
        assert got["bus_id_legacy"] == f"{domain:04X}:{bus:02X}:{device:02X}.0"
        assert got["pci_fields"] == [domain, bus, device]
        assert got["memory"] == [want["memory_total"], want["memory_total"], 0]
        assert got["memory_v2"] == [want["memory_total"], 0, want["memory_total"], 0]
        assert got["numa_node"] == want["numa_node"]
        assert got["is_mig"] == 0


def test_handles_by_uuid_and_by_bus_id_are_the_gpus_own(node):
    _, seen = node
    for index, gpu in enumerate(seen["gpus"]):
        assert gpu["index_by_uuid"] == gpu["index_by_bus_id"] == gpu["index_by_legacy_bus_id"] == index


def test_mig_mode_and_mig_devices(node):
    layout, seen = node
    for want, got in zip(layout["gpus"], seen["gpus"], strict=True):
        mode = want.get("mig_mode", 0)
        migs = want.get("mig_devices", [])
        assert got["mig_mode"] == ([mode, mode] if mig_capable(want) else "NVMLError_NotSupported")
        assert got["max_mig_devices"] == (7 if mode == 1 else 0)
        assert got["gpu_instance_id"] == "NVMLError_NotSupported"
        past_max = "NVMLError_InvalidArgument" if mig_capable(want) else "NVMLError_NotSupported"
        assert got["mig_slot_past_max"] == past_max
        empty_slots = ["NVMLError_NotFound"] * (got["max_mig_devices"] - len(migs))
        assert (
            got["mig_devices"]
            == [
                {
                    "uuid": mig["uuid"],
                    "name": mig["name"],
                    "memory_total": mig["memory_total"],
                    "gpu_instance_id": mig["gpu_instance_id"],
                    "compute_instance_id": mig["compute_instance_id"],
                    "is_mig": 1,
                    "parent_uuid": want["uuid"],
                    "uuid_by_uuid": mig["uuid"],
                    "pci_info": "NVMLError_NotSupported",
                }
                for mig in migs
            ]
            + empty_slots
        )


def test_nvlink_states_and_remote_bus_ids(node):
    layout, seen = node
    for want, got in zip(layout["gpus"], seen["gpus"], strict=True):
        links = {link["link"]: link["remote_pci_bus_id"].upper() for link in want.get("nvlinks", [])}
        if links:
            active, inactive = pynvml.NVML_NVLINK_STATE_ACTIVE, pynvml.NVML_NVLINK_STATE_INACTIVE
            states = [active if link in links else inactive for link in range(pynvml.NVML_NVLINK_MAX_LINKS)]
        else:
            states = ["NVMLError_NotSupported"] * pynvml.NVML_NVLINK_MAX_LINKS
        assert got["nvlink_states"] == states
        assert got["nvlink_remotes"] == {str(link): bus_id for link, bus_id in links.items()}


def test_topology_levels_for_every_pair(node):
    layout, seen = node
    gpus = layout["gpus"]
    for a, got in zip(gpus, seen["gpus"], strict=True):
        assert got["topology"] == [expected_topology(a, b) for b in gpus]


def test_the_layouts_are_the_machines_the_cluster_tests_expect():
    """node1..node4 as the Kubernetes tests name them: models, counts, switches, NUMA, MIG and NVLink."""
    layouts = {name: load_layout(name) for name in LAYOUT_NAMES}
    a100, t4, h100 = "NVIDIA A100-SXM4-40GB", "Tesla T4", "NVIDIA H100 80GB HBM3"

    def column(name: str, key: str, default=None) -> list:
        return [gpu.get(key, default) for gpu in layouts[name]["gpus"]]

    assert column("node1", "name") == [a100] * 4
    assert column("node1", "pcie_switch") == ["sw0", "sw0", "sw1", "sw1"]
    assert column("node1", "numa_node") == [0, 0, 1, 1]
    # Four GPUs each, as the KinD workers advertise (scripts/kind.sh) and the task's map needs
    # (node3:0,1,2, node4:3).
    assert column("node2", "name") == [t4] * 4
    assert len(set(column("node2", "numa_node"))) == 2
    assert column("node3", "name") == [a100] * 4
    assert column("node3", "mig_mode", 0) == [1, 0, 0, 0]
    profiles = [mig["name"].rsplit(" ", 1)[1] for mig in layouts["node3"]["gpus"][0]["mig_devices"]]
    assert profiles == ["3g.20gb", "2g.10gb", "1g.5gb"]
    assert column("node4", "name") == [h100] * 4
    bus_ids = column("node4", "pci_bus_id")
    for index, links in enumerate(column("node4", "nvlinks", [])):
        peer = index ^ 1  # 0<->1, 2<->3
        assert sorted(link["link"] for link in links) == [0, 1, 2, 3]
        assert {link["remote_pci_bus_id"] for link in links} == {bus_ids[peer]}
    for name in ("node1", "node2", "node3"):
        assert column(name, "nvlinks", []) == [[]] * len(layouts[name]["gpus"])
    for name in ("node1", "node2", "node4"):
        assert set(column(name, "mig_mode", 0)) == {0}

    uuids = [gpu["uuid"] for layout in layouts.values() for gpu in layout["gpus"]]
    for layout in layouts.values():
        uuids += [mig["uuid"] for gpu in layout["gpus"] for mig in gpu.get("mig_devices", [])]
    assert len(set(uuids)) == len(uuids), "every made-up GPU and MIG device has a UUID of its own"
    for value in uuids:
        assert value[:4] in ("GPU-", "MIG-") and str(uuid.UUID(value[4:])) == value[4:], value


# --- init, shutdown, errors -------------------------------------------------------------------------------------


def test_init_and_shutdown_are_reference_counted(python_json):
    code = r"""
import ctypes, json
import pynvml as n

lib = ctypes.CDLL("libnvidia-ml.so.1")
count = ctypes.c_uint()
out = {"before_init": lib.nvmlDeviceGetCount_v2(ctypes.byref(count))}
n.nvmlInit()
n.nvmlInit()
n.nvmlShutdown()
out["after_one_shutdown"] = n.nvmlDeviceGetCount()
n.nvmlShutdown()
for name in ("count", "shutdown"):
    try:
        n.nvmlDeviceGetCount() if name == "count" else n.nvmlShutdown()
        out[name + "_after_two"] = "no error"
    except n.NVMLError as err:
        out[name + "_after_two"] = type(err).__name__
out["init_v2"] = lib.nvmlInit_v2()
out["count_after_init_v2"] = n.nvmlDeviceGetCount()
out["shutdown"] = lib.nvmlShutdown()
print(json.dumps(out))
"""
    gpus = len(load_layout("node1")["gpus"])
    assert python_json(code, layout_path("node1")) == {
        "before_init": pynvml.NVML_ERROR_UNINITIALIZED,
        "after_one_shutdown": gpus,
        "count_after_two": "NVMLError_Uninitialized",
        "shutdown_after_two": "NVMLError_Uninitialized",
        "init_v2": pynvml.NVML_SUCCESS,
        "count_after_init_v2": gpus,
        "shutdown": pynvml.NVML_SUCCESS,
    }


INIT_ERROR = r"""
import pynvml as n
try:
    n.nvmlInit()
    print("no error")
except n.NVMLError as err:
    print(type(err).__name__)
"""


def test_no_layout_is_a_machine_without_the_driver(run_python):
    result = run_python(INIT_ERROR)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "NVMLError_DriverNotLoaded", "")


def test_a_missing_layout_file_is_a_machine_without_the_driver_and_says_which_file(run_python, tmp_path):
    missing = tmp_path / "nowhere.json"
    result = run_python(INIT_ERROR, missing)
    assert (result.returncode, result.stdout.strip()) == (0, "NVMLError_DriverNotLoaded"), tail(result)
    assert result.stderr.count("\n") == 1 and str(missing) in result.stderr, result.stderr


def node1_with(change) -> str:
    layout = load_layout("node1")
    change(layout)
    return json.dumps(layout, indent=2)


def set_gpu(index: int, key: str, value):
    return lambda layout: layout["gpus"][index].__setitem__(key, value)


MINIMAL = '{"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": []}'
NODE1 = load_layout("node1")
NODE2 = load_layout("node2")
QUOTE, BACKSLASH = '"', "\\"
MIG_ON = '"mig_mode": 1'


def gpu_object_at(text: str, layout: dict, index: int) -> int:
    """Where gpus[index]'s object starts in text (found by its bus id, which the cases leave alone)."""
    return text.rindex("{", 0, text.index(layout["gpus"][index]["pci_bus_id"]))


# (id, layout text, what the stderr line holds after "fake-nvml: <file>: " as a function of the text, its ending).
MALFORMED = [
    ("empty file", "", lambda t: "byte 0: unexpected end of file", "or null)"),
    ("trailing comma", MINIMAL[:-1] + ", }", lambda t: f"byte {t.rindex('}')}: trailing comma", "before '}'"),
    ("unterminated string", '{"driver_version": "550', lambda t: f"byte {t.rindex(QUOTE)}: unterminated", None),
    ("bad escape", MINIMAL.replace("550.54.15", r"550\q"), lambda t: f"byte {t.index(BACKSLASH)}: invalid", None),
    ("lone surrogate", MINIMAL.replace("550.54.15", r"\udc00"), lambda t: f"byte {t.index(BACKSLASH)}: lone", None),
    ("raw newline", MINIMAL.replace("550.54.15", "550\n"), lambda t: f"byte {t.index(chr(10))}: control", None),
    ("end in \\u", '{"driver_version": "\\u12', lambda t: f"byte {len(t)}: unexpected end of file", "after \\u"),
    ("end after \\", '{"driver_version": "550\\', lambda t: f"byte {t.rindex(QUOTE)}: unterminated string", None),
    ("end in a literal", "[tru", lambda t: "byte 1: expected a value", None),
    ("end after minus", "[-", lambda t: "byte 2: unexpected end of file, expected a digit", None),
    ("fraction", MINIMAL.replace("12040", "12.4"), lambda t: f"byte {t.index('12.4')}: only integers", None),
    ("leading zero", MINIMAL.replace("12040", "012040"), lambda t: f"byte {t.index('012')}: leading zeros", None),
    ("missing colon", MINIMAL.replace('"gpus":', '"gpus"'), lambda t: f"byte {t.index('[]')}: expected ':'", None),
    ("content after", MINIMAL + " {}", lambda t: f"byte {len(MINIMAL) + 1}: unexpected content", None),
    ("duplicate key", MINIMAL[:-1] + ', "gpus": []}', lambda t: f"byte {t.rindex(QUOTE + 'gpus')}: duplicate", None),
    ("deep nesting", "[" * 40 + "]" * 40, lambda t: "byte 32: nested deeper than 32 levels", None),
    ("not an object", "[]", lambda t: "top level (byte 0): expected an object, got an array", None),
    (
        "unknown key",
        node1_with(set_gpu(1, "mig_mdoe", 1)),
        lambda t: f"gpus[1] (byte {t.index(QUOTE + 'mig_mdoe')}): ",
        'unknown key "mig_mdoe"',
    ),
    (
        "missing key",
        node1_with(lambda layout: layout["gpus"][2].pop("uuid")),
        lambda t: f"gpus[2] (byte {gpu_object_at(t, NODE1, 2)}): ",
        'missing key "uuid"',
    ),
    (
        "wrong type",
        node1_with(set_gpu(0, "memory_total", "40GB")),
        lambda t: f"gpus[0].memory_total (byte {t.index(QUOTE + '40GB')}): ",
        "expected an integer, got a string",
    ),
    (
        "bad bus id",
        node1_with(set_gpu(3, "pci_bus_id", "0000:90:00.0")),
        lambda t: f"gpus[3].pci_bus_id (byte {t.index(QUOTE + '0000:90')}): ",
        'is not a PCI bus id like "00000000:07:00.0"',
    ),
    (
        "upper-case uuid",
        node1_with(set_gpu(0, "uuid", NODE1["gpus"][0]["uuid"].upper())),
        lambda t: f"gpus[0].uuid (byte {t.index(NODE1['gpus'][0]['uuid'].upper()) - 1}): ",
        "followed by a lower-case 8-4-4-4-12 hex UUID",
    ),
    (
        "duplicate uuid",
        node1_with(set_gpu(3, "uuid", NODE1["gpus"][1]["uuid"])),
        lambda t: f"gpus[3] (byte {gpu_object_at(t, NODE1, 3)}): ",
        "same uuid as gpus[1]",
    ),
    (
        "MIG on a T4",
        json.dumps({**NODE2, "gpus": [{**NODE2["gpus"][0], "mig_mode": 1}]}),
        lambda t: f"gpus[0].mig_mode (byte {t.index(MIG_ON) + len(MIG_ON) - 1}): ",
        'MIG needs a MIG-capable GPU (a name with A100 or H100), not "Tesla T4"',
    ),
    (
        "link out of range",
        node1_with(set_gpu(0, "nvlinks", [{"link": 36, "remote_pci_bus_id": "00000000:0F:00.0"}])),
        lambda t: f"gpus[0].nvlinks[0].link (byte {t.index(': 36') + 2}): ",
        "36 is out of range [0, 35]",
    ),
]


@pytest.mark.parametrize(("text", "where", "ending"), [case[1:] for case in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_malformed_layout_is_an_unknown_error_and_one_line_naming_file_place_and_problem(
    run_python, tmp_path, text, where, ending
):
    layout = tmp_path / "layout.json"
    layout.write_text(text)
    result = run_python(INIT_ERROR, layout)
    assert (result.returncode, result.stdout.strip()) == (0, "NVMLError_Unknown"), tail(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"fake-nvml: {layout}: {where(text)}"), f"{lines[0]!r} vs {where(text)!r}"
    assert ending is None or lines[0].endswith(ending), lines[0]


def test_strings_with_escapes_are_decoded(python_json, tmp_path):
    layout = load_layout("node2")
    name = 'Tesla "T4" \\ caf\u00e9 \U0001f680/\t'
    layout["gpus"][0]["name"] = name
    path = tmp_path / "layout.json"
    path.write_text(json.dumps(layout, ensure_ascii=True).replace("/", "\\/"))
    assert "\\ud83d\\ude80" in path.read_text() and "\\/" in path.read_text()
    code = (
        "import json, pynvml as n; n.nvmlInit();print(json.dumps(n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByIndex(0))))"
    )
    assert python_json(code, path) == name


def test_bad_indexes_unknown_devices_and_wrong_handles(python_json):
    code = r"""
import json
import pynvml as n

def attempt(call, *args):
    try:
        call(*args)
        return "no error"
    except n.NVMLError as err:
        return type(err).__name__

n.nvmlInit()
gpu = n.nvmlDeviceGetHandleByIndex(0)
mig = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
print(json.dumps({
    "index_past_count": attempt(n.nvmlDeviceGetHandleByIndex, n.nvmlDeviceGetCount()),
    "link_past_max": attempt(n.nvmlDeviceGetNvLinkState, gpu, n.NVML_NVLINK_MAX_LINKS),
    "unknown_uuid": attempt(n.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000"),
    "unknown_bus_id": attempt(n.nvmlDeviceGetHandleByPciBusId, "00000000:42:00.0"),
    "not_a_bus_id": attempt(n.nvmlDeviceGetHandleByPciBusId, "gpu zero"),
    "parent_of_a_gpu": attempt(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, gpu),
    "mig_of_a_mig": attempt(n.nvmlDeviceGetMigDeviceHandleByIndex, mig, 0),
    "index_of_a_mig": attempt(n.nvmlDeviceGetIndex, mig),
    "topology_with_a_mig": attempt(n.nvmlDeviceGetTopologyCommonAncestor, gpu, mig),
    "memory_v2_wrong_version": attempt(n.nvmlDeviceGetMemoryInfo, gpu, n.nvmlMemory_v2 + 1),
}))
"""
    assert python_json(code, layout_path("node3")) == {
        "index_past_count": "NVMLError_InvalidArgument",
        "link_past_max": "NVMLError_InvalidArgument",
        "unknown_uuid": "NVMLError_NotFound",
        "unknown_bus_id": "NVMLError_NotFound",
        "not_a_bus_id": "NVMLError_InvalidArgument",
        "parent_of_a_gpu": "NVMLError_InvalidArgument",
        "mig_of_a_mig": "NVMLError_NotSupported",
        "index_of_a_mig": "NVMLError_NotSupported",
        "topology_with_a_mig": "NVMLError_NotSupported",
        "memory_v2_wrong_version": "NVMLError_ArgumentVersionMismatch",
    }


def test_null_pointers_foreign_handles_and_small_buffers_through_the_c_api(python_json):
    """What pynvml never passes: NULL, a pointer that is no handle, buffers one byte short."""
    code = r"""
import ctypes, json
import pynvml as n

n.nvmlInit()
lib = ctypes.CDLL("libnvidia-ml.so.1")
gpu = n.nvmlDeviceGetHandleByIndex(0)
uuid = n.nvmlDeviceGetUUID(gpu).encode()
version = n.nvmlSystemGetDriverVersion().encode()
foreign = ctypes.cast(ctypes.pointer(ctypes.c_uint(0)), n.c_nvmlDevice_t)
inside = ctypes.cast(ctypes.cast(gpu, ctypes.c_void_p).value + 1, n.c_nvmlDevice_t)

def uuid_into(size):
    return lib.nvmlDeviceGetUUID(gpu, ctypes.create_string_buffer(size), ctypes.c_uint(size))

print(json.dumps({
    "count_null": lib.nvmlDeviceGetCount_v2(None),
    "handle_null": lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0), None),
    "uuid_null_buffer": lib.nvmlDeviceGetUUID(gpu, None, ctypes.c_uint(96)),
    "by_uuid_null": lib.nvmlDeviceGetHandleByUUID(None, ctypes.byref(n.c_nvmlDevice_t())),
    "pci_null": lib.nvmlDeviceGetPciInfo_v3(gpu, None),
    "mig_mode_null": lib.nvmlDeviceGetMigMode(gpu, None, None),
    "topology_null": lib.nvmlDeviceGetTopologyCommonAncestor(gpu, gpu, None),
    "null_handle": lib.nvmlDeviceGetUUID(None, ctypes.create_string_buffer(96), ctypes.c_uint(96)),
    "foreign_handle": lib.nvmlDeviceGetName(foreign, ctypes.create_string_buffer(96), ctypes.c_uint(96)),
    "misaligned_handle": lib.nvmlDeviceGetName(inside, ctypes.create_string_buffer(96), ctypes.c_uint(96)),
    "uuid_one_short": uuid_into(len(uuid)),
    "uuid_exact": uuid_into(len(uuid) + 1),
    "driver_version_one_short": lib.nvmlSystemGetDriverVersion(
        ctypes.create_string_buffer(len(version)), ctypes.c_uint(len(version))
    ),
}))
"""
    result = python_json(code, layout_path("node1"))
    invalid, short = pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert result == {
        "count_null": invalid,
        "handle_null": invalid,
        "uuid_null_buffer": invalid,
        "by_uuid_null": invalid,
        "pci_null": invalid,
        "mig_mode_null": invalid,
        "topology_null": invalid,
        "null_handle": invalid,
        "foreign_handle": invalid,
        "misaligned_handle": invalid,
        "uuid_one_short": short,
        "uuid_exact": pynvml.NVML_SUCCESS,
        "driver_version_one_short": short,
    }


def test_error_strings_are_the_ones_pynvml_knows(python_json):
    code = r"""
import json
import pynvml as n

n.nvmlInit()
print(json.dumps({code: n.nvmlErrorString(code) for code in n.NVMLError._errcode_to_string}))
"""
    # Built before the library is asked anything: pynvml's own table, which str(NVMLError) prints.
    expected = {str(code): message for code, message in pynvml.NVMLError._errcode_to_string.items()}
    assert python_json(code, layout_path("node1")) == expected


def test_the_call_log_proves_each_call_went_through_the_fake(run_python, tmp_path):
    log = tmp_path / "calls.log"
    code = "import pynvml as n; n.nvmlInit(); n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(1)); n.nvmlShutdown()"
    result = run_python(code, layout_path("node2"), log=log)
    assert result.returncode == 0, tail(result)
    assert log.read_text().splitlines() == [
        "nvmlInitWithFlags",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetUUID",
        "nvmlShutdown",
    ]


# --- the library file and its build -------------------------------------------------------------------------------

EXPORTS = {
    "nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString",
    "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetTopologyCommonAncestor",
}  # fmt: skip


def test_exports_only_the_nvml_api_pynvml_resolves_and_needs_only_libc(fake_nvml_dir):
    library = fake_nvml_dir / LIBRARY
    symbols = run(["nm", "-D", "--defined-only", library])
    assert symbols.returncode == 0, tail(symbols)
    exported = {line.split()[-1] for line in symbols.stdout.splitlines() if line.strip()}
    assert exported == EXPORTS
    resolved = set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', Path(pynvml.__file__).read_text()))
    # nvmlInit and nvmlInit_v2 are the C entry points nvml.h maps nvmlInit to; pynvml uses nvmlInitWithFlags.
    assert EXPORTS - {"nvmlInit", "nvmlInit_v2"} <= resolved
    dynamic = run(["readelf", "-d", library])
    assert re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", dynamic.stdout) == ["libc.so.6"], dynamic.stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dynamic.stdout


def test_build_skips_when_the_stamp_matches_and_rebuilds_when_not(tmp_path):
    first = run(["bash", BUILD], env={**os.environ, "CACHE_DIR": str(tmp_path)}, timeout=180)
    library = tmp_path / "fake-nvml" / LIBRARY
    assert (first.returncode, first.stdout.strip()) == (0, str(library)), tail(first)
    built = library.stat().st_mtime_ns

    again = run(["bash", BUILD, library.parent], timeout=180)
    assert (again.returncode, again.stdout.strip()) == (0, str(library)), tail(again)
    assert library.stat().st_mtime_ns == built, "a matching stamp skips the build"

    stamps = [path for path in library.parent.iterdir() if path.name != LIBRARY]
    assert len(stamps) == 1 and not stamps[0].name.startswith(".lib"), stamps
    stamps[0].write_text("something else\n")
    rebuilt = run(["bash", BUILD, library.parent], timeout=180)
    assert rebuilt.returncode == 0, tail(rebuilt)
    assert library.stat().st_mtime_ns != built, "a stale stamp rebuilds"


def test_build_without_gcc_says_to_install_it(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    result = run([shutil.which("bash"), BUILD, tmp_path / "out"], env={"PATH": str(bin_dir)})
    assert result.returncode == 1, tail(result)
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, tail(result)
    assert "install gcc" in result.stderr
    assert not (tmp_path / "out").exists()


# A C program that drives every call over a list of layouts (good and malformed): built together with the
# library's source under AddressSanitizer, LeakSanitizer and UBSan, so a leak on shutdown, an overrun in the JSON
# reader or undefined behaviour fails the run.
SANITIZER_DRIVER = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { char legacy[16]; unsigned int domain, bus, device, id, subsystem; char bus_id[32]; } pci_t;
typedef struct { unsigned long long total, free, used; } memory_t;
int nvmlInitWithFlags(unsigned int);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetHandleByUUID(const char *, nvmlDevice_t *);
int nvmlDeviceGetHandleByPciBusId_v2(const char *, nvmlDevice_t *);
int nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t, pci_t *);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, memory_t *);
int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t, unsigned int *);
int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t, unsigned int, nvmlDevice_t *);
int nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned int, int *);
int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned int, pci_t *);
int nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t, nvmlDevice_t, int *);

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        setenv("FAKE_NVML_LAYOUT", argv[i], 1);
        for (int round = 0; round < 2; round++) {  /* a second init after the last shutdown reads the file again */
            int ret = nvmlInitWithFlags(0), ret2 = ret == 0 ? nvmlInitWithFlags(0) : ret;
            unsigned int count = 0;
            if (ret == 0)
                nvmlDeviceGetCount_v2(&count);
            for (unsigned int g = 0; g < count; g++) {
                nvmlDevice_t gpu, other, mig;
                char text[96];
                pci_t pci;
                memory_t memory;
                unsigned int max = 0;
                int value;
                nvmlDeviceGetHandleByIndex_v2(g, &gpu);
                nvmlDeviceGetUUID(gpu, text, sizeof text);
                nvmlDeviceGetHandleByUUID(text, &other);
                nvmlDeviceGetName(gpu, text, sizeof text);
                nvmlDeviceGetPciInfo_v3(gpu, &pci);
                nvmlDeviceGetHandleByPciBusId_v2(pci.bus_id, &other);
                nvmlDeviceGetMemoryInfo(gpu, &memory);
                nvmlDeviceGetMaxMigDeviceCount(gpu, &max);
                for (unsigned int m = 0; m < max; m++)
                    if (nvmlDeviceGetMigDeviceHandleByIndex(gpu, m, &mig) == 0)
                        nvmlDeviceGetName(mig, text, sizeof text);
                for (unsigned int link = 0; link < 36; link++)
                    if (nvmlDeviceGetNvLinkState(gpu, link, &value) == 0 && value == 1)
                        nvmlDeviceGetNvLinkRemotePciInfo_v2(gpu, link, &pci);
                for (unsigned int o = 0; o < count; o++) {
                    nvmlDeviceGetHandleByIndex_v2(o, &other);
                    nvmlDeviceGetTopologyCommonAncestor(gpu, other, &value);
                }
            }
            printf("%s %d %d %u\n", argv[i], ret, ret2, count);
            if (ret == 0 && (nvmlShutdown() != 0 || nvmlShutdown() != 0))
                return 2;
        }
    }
    return 0;
}
"""


def test_no_leak_or_memory_error_under_sanitizers_for_any_layout(tmp_path):
    driver = tmp_path / "driver.c"
    driver.write_text(SANITIZER_DRIVER)
    program = tmp_path / "driver"
    flags = ["-std=c11", "-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-pthread"]
    build = run(["gcc", *flags, "-o", program, driver, SOURCE], timeout=180)
    assert build.returncode == 0, tail(build)

    layouts = [layout_path(name) for name in LAYOUT_NAMES] + [tmp_path / "missing.json"]
    for index, (_, text, _, _) in enumerate(MALFORMED):
        layouts.append(tmp_path / f"malformed-{index}.json")
        layouts[-1].write_text(text)
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    result = subprocess.run([program, *layouts], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 0, tail(result)
    assert "Sanitizer" not in result.stderr and "runtime error" not in result.stderr, tail(result)
    # Each good layout came up (twice) with all its GPUs, each bad one failed.
    lines = [line.split() for line in result.stdout.splitlines()]
    assert len(lines) == 2 * len(layouts)
    for path, ret, ret2, count in lines:
        if Path(path).name.startswith("node"):
            assert (ret, ret2, int(count)) == ("0", "0", len(load_layout(Path(path).stem)["gpus"])), path
        else:
            assert ret != "0" and int(count) == 0, path

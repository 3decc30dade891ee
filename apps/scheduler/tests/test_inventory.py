"""The node GPU inventory: its annotation format, every way it is refused, and how a map's
devices resolve against it (scheduling/inventory.py)."""

from __future__ import annotations

import json

import pytest
from gpu_scheduler.scheduling.inventory import (
    COUNT_LABEL,
    INVENTORY_ANNOTATION,
    MODEL_LABEL,
    DeviceRef,
    Gpu,
    Inventory,
    InventoryError,
    MigDevice,
    label_value,
)
from inventories import A100, GPU0, GPU1, GPU2, INVENTORY, MIG_A, MIG_B

WHERE = "node node3's annotation gpu-scheduler/gpus"


def document() -> dict:
    """The inventory's annotation as JSON, for a test to break one field of."""
    return json.loads(INVENTORY.to_annotation())


def read(doc: object) -> Inventory:
    return Inventory.from_annotation(json.dumps(doc), WHERE)


# --- the format -------------------------------------------------------------------------------


def test_annotation_is_compact_json_in_the_documented_shape():
    text = INVENTORY.to_annotation()
    assert " " not in text.replace(A100, "").replace("NVIDIA H100 80GB HBM3", "")
    assert json.loads(text) == {
        "version": 1,
        "driver": "550.54.15",
        "gpus": [
            {
                "index": 0,
                "uuid": GPU0,
                "pciBusId": "00000000:07:00.0",
                "model": A100,
                "memoryMiB": 40960,
                "numaNode": 0,
                "mig": {
                    "enabled": True,
                    "devices": [
                        {
                            "uuid": MIG_A,
                            "profile": "3g.20gb",
                            "gpuInstance": 1,
                            "computeInstance": 0,
                            "memoryMiB": 20096,
                        },
                        {
                            "uuid": MIG_B,
                            "profile": "2g.10gb",
                            "gpuInstance": 5,
                            "computeInstance": 0,
                            "memoryMiB": 9984,
                        },
                    ],
                },
            },
            {
                "index": 1,
                "uuid": GPU1,
                "pciBusId": "00000000:0F:00.0",
                "model": A100,
                "memoryMiB": 40960,
                "numaNode": 0,
                "mig": {"enabled": False, "devices": []},
            },
            {
                "index": 2,
                "uuid": GPU2,
                "pciBusId": "00000000:47:00.0",
                "model": "NVIDIA H100 80GB HBM3",
                "memoryMiB": 81559,
                "numaNode": 1,
                "mig": {"enabled": False, "devices": []},
            },
        ],
        "links": [
            {"gpus": [0, 1], "nvlinks": 12, "commonAncestor": "NVLINK"},
            {"gpus": [0, 2], "nvlinks": 0, "commonAncestor": "SYSTEM"},
            {"gpus": [1, 2], "nvlinks": 0, "commonAncestor": "SYSTEM"},
        ],
    }
    assert text.startswith('{"version":1,"driver":"550.54.15","gpus":[{"index":0,"uuid":')


def test_annotation_round_trips():
    assert Inventory.from_annotation(INVENTORY.to_annotation(), WHERE) == INVENTORY


def test_same_gpus_in_another_order_give_the_same_text():
    """The agent writes only when the text changes: NVML's order must not change it."""
    shuffled = Inventory(
        INVENTORY.driver_version,
        tuple(
            Gpu(g.index, g.uuid, g.pci_bus_id, g.model, g.memory_mib, g.numa_node, g.mig_enabled, g.mig_devices[::-1])
            for g in reversed(INVENTORY.gpus)
        ),
        tuple(reversed(INVENTORY.links)),
    )
    assert shuffled.to_annotation() == INVENTORY.to_annotation()


def test_unknown_numa_node_is_null_and_reads_back_as_none():
    gpu = Gpu(0, GPU0, "00000000:07:00.0", A100, 40960, None, False, ())
    inventory = Inventory("550.54.15", (gpu,))
    assert json.loads(inventory.to_annotation())["gpus"][0]["numaNode"] is None
    assert Inventory.from_annotation(inventory.to_annotation(), WHERE).gpus[0].numa_node is None


def test_a_node_without_gpus_round_trips():
    empty = Inventory("550.54.15", ())
    assert empty.to_annotation() == '{"version":1,"driver":"550.54.15","gpus":[],"links":[]}'
    assert Inventory.from_annotation(empty.to_annotation(), WHERE) == empty


def test_fields_a_reader_does_not_know_are_ignored():
    doc = document()
    doc["futureField"] = {"x": 1}
    doc["gpus"][1]["clocksMHz"] = 1410
    assert read(doc) == INVENTORY


def test_annotation_name():
    assert INVENTORY_ANNOTATION == "gpu-scheduler/gpus"


# --- what is refused, and the message that says where -----------------------------------------


def refused(doc_or_text: object) -> str:
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    with pytest.raises(InventoryError) as caught:
        Inventory.from_annotation(text, WHERE)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message.startswith(WHERE + ": "), message
    return message.removeprefix(WHERE + ": ")


def broken(path: list, value: object = ..., *, delete: bool = False) -> dict:
    """The document with the field at `path` set to value (or deleted)."""
    doc = document()
    target = doc
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


def test_text_that_is_not_json_is_refused():
    assert refused("{not json").startswith("not valid JSON: ")


def test_no_annotation_text_at_all_is_refused():
    with pytest.raises(InventoryError, match=f"^{WHERE}: expected the annotation's JSON text, got NoneType$"):
        Inventory.from_annotation(None, WHERE)


def test_an_integer_of_thousands_of_digits_is_refused_as_not_json():
    assert refused('{"version":' + "9" * 5000 + "}").startswith("not valid JSON: ")


def test_a_document_that_is_not_an_object_is_refused():
    assert refused([1, 2]) == "expected a JSON object, got [1, 2]"


def test_a_newer_version_is_refused_with_both_versions():
    assert refused(broken(["version"], 2)) == (
        "version 2 is newer than this gpu-scheduler understands (1); "
        "run a scheduler at least as new as the agent that wrote it"
    )


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["version"], 0, "version: expected an integer at least 1, got 0"),
        (["version"], "1", 'version: expected an integer, got "1"'),
        (["version"], True, "version: expected an integer, got true"),
        (["driver"], 550, "driver: expected a string, got 550"),
        (["gpus"], {}, "gpus: expected a list, got {}"),
        (["gpus", 1], "GPU 1", 'gpus[1]: expected an object, got "GPU 1"'),
        (["gpus", 2, "index"], -1, "gpus[2].index: expected an integer within 0..2147483647, got -1"),
        (["gpus", 2, "index"], 2**31, "gpus[2].index: expected an integer within 0..2147483647, got 2147483648"),
        (["gpus", 2, "index"], 2.0, "gpus[2].index: expected an integer, got 2.0"),
        (
            ["gpus", 2, "uuid"],
            "abc",
            'gpus[2].uuid: expected a string starting with GPU- (GPU-<uuid>), got "abc"',
        ),
        (
            ["gpus", 2, "uuid"],
            "GPU-12",
            'gpus[2].uuid: expected a string starting with GPU- (GPU-<uuid>), got "GPU-12"',
        ),
        (
            ["gpus", 2, "uuid"],
            MIG_A,
            f'gpus[2].uuid: expected a string starting with GPU- (GPU-<uuid>), got "{MIG_A}"',
        ),
        (["gpus", 2, "pciBusId"], None, "gpus[2].pciBusId: expected a string, got null"),
        (["gpus", 2, "model"], ["A100"], 'gpus[2].model: expected a string, got ["A100"]'),
        (["gpus", 2, "memoryMiB"], "80GB", 'gpus[2].memoryMiB: expected an integer, got "80GB"'),
        (["gpus", 2, "numaNode"], -1, "gpus[2].numaNode: expected an integer within 0..4294967295, got -1"),
        (["gpus", 2, "mig"], None, "gpus[2].mig: expected an object, got null"),
        (["gpus", 2, "mig", "enabled"], "no", 'gpus[2].mig.enabled: expected true or false, got "no"'),
        (["gpus", 2, "mig", "devices"], None, "gpus[2].mig.devices: expected a list, got null"),
        (["gpus", 0, "mig", "devices", 1], 7, "gpus[0].mig.devices[1]: expected an object, got 7"),
        (
            ["gpus", 0, "mig", "devices", 1, "uuid"],
            GPU1,
            "gpus[0].mig.devices[1].uuid: expected a string starting with MIG- "
            f'(MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>), got "{GPU1}"',
        ),
        (["gpus", 0, "mig", "devices", 1, "profile"], 3, "gpus[0].mig.devices[1].profile: expected a string, got 3"),
        (
            ["gpus", 0, "mig", "devices", 1, "gpuInstance"],
            -5,
            "gpus[0].mig.devices[1].gpuInstance: expected an integer within 0..4294967295, got -5",
        ),
        (
            ["gpus", 0, "mig", "devices", 1, "computeInstance"],
            None,
            "gpus[0].mig.devices[1].computeInstance: expected an integer, got null",
        ),
        (
            ["gpus", 0, "mig", "devices", 1, "memoryMiB"],
            "9984",
            'gpus[0].mig.devices[1].memoryMiB: expected an integer, got "9984"',
        ),
        (["links"], "none", 'links: expected a list, got "none"'),
        (["links", 2], [1, 2], "links[2]: expected an object, got [1, 2]"),
        (["links", 2, "gpus"], [2, 1], "links[2].gpus: expected [a, b], two GPU indexes with a < b, got [2, 1]"),
        (["links", 2, "gpus"], [1, 1], "links[2].gpus: expected [a, b], two GPU indexes with a < b, got [1, 1]"),
        (["links", 2, "gpus"], [1], "links[2].gpus: expected [a, b], two GPU indexes with a < b, got [1]"),
        (
            ["links", 2, "gpus"],
            [1, True],
            "links[2].gpus: expected [a, b], two GPU indexes with a < b, got [1, true]",
        ),
        (["links", 2, "gpus"], [1, 7], "links[2].gpus: GPU 7 is not in gpus"),
        (["links", 2, "nvlinks"], -1, "links[2].nvlinks: expected an integer within 0..4294967295, got -1"),
        (
            ["links", 2, "commonAncestor"],
            "PIX",
            'links[2].commonAncestor: expected one of NVLINK, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM, got "PIX"',
        ),
        (
            ["links", 2, "commonAncestor"],
            "NVLINK",
            "links[2].commonAncestor: NVLINK with 0 NVLinks; it is NVLINK exactly when the GPUs share an NVLink",
        ),
        (
            ["links", 0, "commonAncestor"],
            "NODE",
            "links[0].commonAncestor: NODE with 12 NVLinks; it is NVLINK exactly when the GPUs share an NVLink",
        ),
    ],
)
def test_a_wrong_field_is_named_with_its_path(path, value, message):
    assert refused(broken(path, value)) == message


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (["version"], "version: missing"),
        (["driver"], "driver: missing"),
        (["gpus"], "gpus: missing"),
        (["links"], "links: missing"),
        (["gpus", 1, "index"], "gpus[1].index: missing"),
        (["gpus", 1, "uuid"], "gpus[1].uuid: missing"),
        (["gpus", 1, "pciBusId"], "gpus[1].pciBusId: missing"),
        (["gpus", 1, "model"], "gpus[1].model: missing"),
        (["gpus", 1, "memoryMiB"], "gpus[1].memoryMiB: missing"),
        (["gpus", 1, "numaNode"], "gpus[1].numaNode: missing (null when the node's NUMA node is not known)"),
        (["gpus", 1, "mig"], "gpus[1].mig: expected an object, got null"),
        (["gpus", 1, "mig", "enabled"], "gpus[1].mig.enabled: expected true or false, got null"),
        (["gpus", 1, "mig", "devices"], "gpus[1].mig.devices: missing"),
        (["gpus", 0, "mig", "devices", 0, "uuid"], "gpus[0].mig.devices[0].uuid: missing"),
        (["gpus", 0, "mig", "devices", 0, "profile"], "gpus[0].mig.devices[0].profile: missing"),
        (["gpus", 0, "mig", "devices", 0, "gpuInstance"], "gpus[0].mig.devices[0].gpuInstance: missing"),
        (["gpus", 0, "mig", "devices", 0, "computeInstance"], "gpus[0].mig.devices[0].computeInstance: missing"),
        (["gpus", 0, "mig", "devices", 0, "memoryMiB"], "gpus[0].mig.devices[0].memoryMiB: missing"),
        (["links", 0, "gpus"], "links[0].gpus: expected [a, b], two GPU indexes with a < b, got null"),
        (["links", 0, "nvlinks"], "links[0].nvlinks: missing"),
        (["links", 0, "commonAncestor"], "links[0].commonAncestor: missing"),
    ],
)
def test_a_missing_field_is_named_with_its_path(path, message):
    assert refused(broken(path, delete=True)) == message


def test_mig_devices_on_a_gpu_with_mig_disabled_are_refused():
    assert refused(broken(["gpus", 0, "mig", "enabled"], False)) == (
        "gpus[0].mig.devices: 2 MIG devices on a GPU whose MIG mode is disabled"
    )


def test_a_gpu_index_given_twice_is_refused():
    assert refused(broken(["gpus", 2, "index"], 0)) == "gpus[2].index: 0 is also gpus[0].index"


def test_a_gpu_uuid_given_twice_is_refused_in_any_letter_case():
    assert refused(broken(["gpus", 2, "uuid"], GPU0.upper())) == (f"gpus[2].uuid: {GPU0.upper()} is also gpus[0].uuid")


def test_a_mig_uuid_given_twice_is_refused_even_on_another_gpu():
    doc = document()
    doc["gpus"][1]["mig"] = {"enabled": True, "devices": [dict(doc["gpus"][0]["mig"]["devices"][1])]}
    assert refused(doc) == f"gpus[1].mig.devices[0].uuid: {MIG_B} is also gpus[0].mig.devices[1].uuid"


def test_one_mig_instance_given_twice_is_refused():
    assert refused(broken(["gpus", 0, "mig", "devices", 1, "gpuInstance"], 1)) == (
        "gpus[0].mig.devices[1]: GPU instance 1 / compute instance 0 is also gpus[0].mig.devices[0]'s"
    )


def test_a_gpu_pair_given_twice_is_refused():
    assert refused(broken(["links", 2, "gpus"], [0, 1])) == "links[2].gpus: [0, 1] is also links[0].gpus"


def test_the_old_mig_spelling_is_accepted_as_a_mig_uuid():
    old = f"MIG-{GPU0}/1/0"
    inventory = read(broken(["gpus", 0, "mig", "devices", 0, "uuid"], old))
    assert inventory.gpus[0].mig_devices[0].uuid == old


def test_a_long_bad_value_is_cut_in_the_message():
    message = refused(broken(["gpus", 2, "uuid"], "x" * 500))
    assert len(message) < 200
    assert message.endswith('"' + "x" * 59 + "...")


# --- resolve: a map's device to a GPU of this node ---------------------------------------------


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("0", DeviceRef(0, GPU0, None)),
        ("2", DeviceRef(2, GPU2, None)),
        ("002", DeviceRef(2, GPU2, None)),
        (GPU1, DeviceRef(1, GPU1, None)),
        (GPU1.upper(), DeviceRef(1, GPU1, None)),
        ("GPU-" + GPU1[4:].upper(), DeviceRef(1, GPU1, None)),
        (MIG_A, DeviceRef(0, GPU0, MIG_A)),
        (MIG_B.upper(), DeviceRef(0, GPU0, MIG_B)),
        (f"MIG-{GPU0}/1/0", DeviceRef(0, GPU0, MIG_A)),
        (f"MIG-{GPU0.upper()}/5/0", DeviceRef(0, GPU0, MIG_B)),
        (f"MIG-GPU-{GPU0[4:].upper()}/005/00", DeviceRef(0, GPU0, MIG_B)),
    ],
)
def test_each_spelling_of_a_device_resolves_to_its_gpu(device, expected):
    assert INVENTORY.resolve(device) == expected


@pytest.mark.parametrize(
    "device",
    [
        "3",  # no GPU 3
        "99999999999999999999999",
        "GPU-0a1b2c3d-0000-4000-8000-0000000000ff",  # another node's GPU
        "MIG-5e6f7a8b-0000-4000-8000-0000000000ff",
        f"MIG-{GPU0}/2/0",  # no such GPU instance
        f"MIG-{GPU0}/1/1",  # no such compute instance
        f"MIG-{GPU1}/1/0",  # MIG is off on GPU 1
        f"MIG-{GPU0}/{'9' * 5000}/0",  # instance ids of thousands of digits
        "",
        "-1",
        "GPU-12",
        "nonsense",
        # The map writes the GPU-, MIG- and MIG-GPU- prefixes in capitals (only the hex digits
        # may be either case), so these spell no device at all.
        "gpu-" + GPU1[4:],
        "mig-" + MIG_B[4:],
        f"mig-{GPU0.lower()}/5/0",
    ],
)
def test_a_device_the_node_does_not_have_resolves_to_none(device):
    assert INVENTORY.resolve(device) is None


def test_a_mig_device_reported_in_the_old_spelling_resolves_by_either_spelling_of_its_own():
    old = f"MIG-{GPU0}/1/0"
    gpu = Gpu(0, GPU0, "00000000:07:00.0", A100, 40960, 0, True, (MigDevice(old, "3g.20gb", 1, 0, 20096),))
    inventory = Inventory("470.57.02", (gpu,))
    assert inventory.resolve(old.upper()) == DeviceRef(0, GPU0, old)
    assert inventory.resolve(MIG_A) is None  # its MIG-<uuid> is unknown to this driver's inventory


# --- describe and labels -----------------------------------------------------------------------


def test_describe_lists_gpus_with_their_mig_devices():
    assert INVENTORY.describe() == (
        f"0 {GPU0} ({A100}; MIG 0/{MIG_A} 3g.20gb, 0/{MIG_B} 2g.10gb), "
        f"1 {GPU1} ({A100}), "
        f"2 {GPU2} (NVIDIA H100 80GB HBM3)"
    )


def test_describe_says_when_mig_is_on_without_devices_and_when_there_are_no_gpus():
    gpu = Gpu(0, GPU0, "00000000:07:00.0", A100, 40960, 0, True, ())
    assert Inventory("550", (gpu,)).describe() == f"0 {GPU0} ({A100}; MIG enabled, no MIG devices)"
    assert Inventory("550", ()).describe() == "no GPUs"


def test_labels_give_the_count_and_the_most_common_model():
    assert INVENTORY.labels() == {COUNT_LABEL: "3", MODEL_LABEL: "NVIDIA-A100-SXM4-40GB"}
    assert (COUNT_LABEL, MODEL_LABEL) == ("gpu-scheduler/gpu-count", "gpu-scheduler/gpu-model")


def test_with_models_equally_common_the_label_names_the_first_gpus():
    gpus = (
        Gpu(1, GPU1, "b", "NVIDIA H100 80GB HBM3", 1, None),
        Gpu(0, GPU0, "a", "Tesla T4", 1, None),
    )
    assert Inventory("550", gpus).labels()[MODEL_LABEL] == "Tesla-T4"


def test_a_node_without_gpus_has_a_count_of_zero_and_no_model_label():
    assert Inventory("550", ()).labels() == {COUNT_LABEL: "0"}


@pytest.mark.parametrize(
    ("model", "value"),
    [
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA-GeForce-RTX-4090"),
        ("Quadro RTX 8000 (rev. A)", "Quadro-RTX-8000-rev.-A"),
        ("NVIDIA H100 80GB HBM3/PCIe", "NVIDIA-H100-80GB-HBM3PCIe"),
        (" Tesla V100 ", "Tesla-V100"),
        ("Tésla V100", "Tsla-V100"),
        ("A" * 70, "A" * 63),
        ("A" * 62 + " B", "A" * 62),  # cut at 63 characters, then no '-' at the end
        ("(!)", ""),
        ("", ""),
    ],
)
def test_model_becomes_a_valid_label_value(model, value):
    assert label_value(model) == value


def test_a_model_with_no_usable_character_gives_no_model_label():
    gpu = Gpu(0, GPU0, "a", "(?)", 1, None)
    assert Inventory("550", (gpu,)).labels() == {COUNT_LABEL: "1"}

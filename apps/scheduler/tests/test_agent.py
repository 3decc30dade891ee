"""`gpu-scheduler agent`: what it writes on its Node, when it writes nothing, and how it
behaves without NVML; NVML itself read from the fake libnvidia-ml.so.1 of tests/fake_nvml.

Reading NVML happens in a subprocess: pynvml loads the library once per process, found
through LD_LIBRARY_PATH, and the layout the fake reports is chosen by FAKE_NVML_LAYOUT.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from e2e.cluster import write_kubeconfig
from e2e.waiting import wait_until
from fake_nvml import library
from gpu_scheduler.agent.nvml import NvmlReadError, NvmlUnavailable, pci_key
from gpu_scheduler.agent.publish import MERGE_PATCH, node_update, summary
from gpu_scheduler.agent.runner import Agent, Outcome
from gpu_scheduler.kube.client import ApiError
from gpu_scheduler.scheduling.inventory import (
    COUNT_LABEL,
    INVENTORY_ANNOTATION,
    MODEL_LABEL,
    Gpu,
    Inventory,
    Link,
    MigDevice,
)
from inventories import A100, GPU0, GPU1, MIG_A
from kubernetes.config.config_exception import ConfigException

CLI = str(Path(sys.executable).with_name("gpu-scheduler"))
REPO = Path(__file__).resolve().parents[3]
FAKE_NVML = REPO / "tests" / "fake_nvml"
LAYOUTS = sorted((FAKE_NVML / "layouts").glob("node*.json"))
MIB = 1024 * 1024

TWO_GPUS = Inventory(
    "550.54.15",
    (
        Gpu(0, GPU0, "00000000:07:00.0", A100, 40960, 0, True, (MigDevice(MIG_A, "3g.20gb", 1, 0, 20096),)),
        Gpu(1, GPU1, "00000000:0F:00.0", A100, 40960, 0, False, ()),
    ),
    (Link(0, 1, 12, "NVLINK"),),
)


def node(annotations: dict | None = None, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node3", "annotations": dict(annotations or {}), "labels": dict(labels or {})},
        "spec": {},
    }


def published(inventory: Inventory, **extra_labels: str) -> dict:
    """A Node that publishes `inventory` already."""
    return node({INVENTORY_ANNOTATION: inventory.to_annotation()}, {**inventory.labels(), **extra_labels})


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- the decision: which patch for which Node ---------------------------------------------------


def test_a_node_that_publishes_nothing_gets_the_annotation_and_both_labels_in_one_merge_patch():
    update = node_update(node(labels={"kubernetes.io/hostname": "node3"}), TWO_GPUS)
    assert update is not None
    assert update.patch == {
        "metadata": {
            "annotations": {INVENTORY_ANNOTATION: TWO_GPUS.to_annotation()},
            "labels": {COUNT_LABEL: "2", MODEL_LABEL: "NVIDIA-A100-SXM4-40GB"},
        }
    }
    assert update.changes == (
        "annotation gpu-scheduler/gpus set",
        "label gpu-scheduler/gpu-count: (none) -> 2",
        "label gpu-scheduler/gpu-model: (none) -> NVIDIA-A100-SXM4-40GB",
    )


def test_a_node_that_publishes_the_same_inventory_gets_no_patch():
    assert node_update(published(TWO_GPUS, **{"kubernetes.io/hostname": "node3"}), TWO_GPUS) is None


def test_a_node_without_metadata_maps_is_handled_like_an_empty_one():
    assert node_update({"metadata": {"name": "node3"}}, TWO_GPUS).patch["metadata"]["labels"][COUNT_LABEL] == "2"


def test_a_changed_label_alone_is_written_back_with_the_rest():
    current = published(TWO_GPUS)
    current["metadata"]["labels"][COUNT_LABEL] = "8"
    update = node_update(current, TWO_GPUS)
    assert update.changes == ("label gpu-scheduler/gpu-count: 8 -> 2",)
    assert update.patch["metadata"]["labels"] == {COUNT_LABEL: "2", MODEL_LABEL: "NVIDIA-A100-SXM4-40GB"}
    assert merge_patch(current, update.patch) == published(TWO_GPUS)


def test_a_changed_inventory_changes_the_annotation():
    current = published(TWO_GPUS)
    one_gpu = Inventory("550.54.15", TWO_GPUS.gpus[1:])
    update = node_update(current, one_gpu)
    assert update.changes == ("annotation gpu-scheduler/gpus changed", "label gpu-scheduler/gpu-count: 2 -> 1")
    assert merge_patch(current, update.patch) == published(one_gpu)


def test_an_annotation_with_the_same_content_in_other_text_is_rewritten_in_the_agents_text():
    current = published(TWO_GPUS)
    current["metadata"]["annotations"][INVENTORY_ANNOTATION] = json.dumps(json.loads(TWO_GPUS.to_annotation()))
    assert node_update(current, TWO_GPUS).changes == ("annotation gpu-scheduler/gpus changed",)


def test_a_node_that_lost_its_gpus_loses_its_model_label():
    no_gpus = Inventory("550.54.15", ())
    current = published(TWO_GPUS, other="kept")
    update = node_update(current, no_gpus)
    assert update.patch["metadata"]["labels"] == {COUNT_LABEL: "0", MODEL_LABEL: None}
    assert "label gpu-scheduler/gpu-model: NVIDIA-A100-SXM4-40GB -> (none)" in update.changes
    assert merge_patch(current, update.patch)["metadata"]["labels"] == {COUNT_LABEL: "0", "other": "kept"}


def test_no_model_label_is_removed_when_there_is_none():
    update = node_update(node(), Inventory("550.54.15", ()))
    assert update.patch["metadata"]["labels"] == {COUNT_LABEL: "0"}
    assert node_update(published(Inventory("550.54.15", ())), Inventory("550.54.15", ())) is None


def test_the_patch_touches_nothing_but_the_agents_keys():
    current = published(TWO_GPUS, **{"kubernetes.io/hostname": "node3"})
    current["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "0"
    current["metadata"]["labels"][COUNT_LABEL] = "1"
    result = merge_patch(current, node_update(current, TWO_GPUS).patch)
    assert result["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] == "0"
    assert result["metadata"]["labels"]["kubernetes.io/hostname"] == "node3"


def test_summary_names_count_models_mig_devices_and_nvlink_pairs():
    assert summary(TWO_GPUS) == f"2 GPUs ({A100}), 1 MIG device, NVLink between 0-1"
    assert summary(Inventory("550", ())) == "0 GPUs"


@pytest.mark.parametrize(
    ("bus_id", "key"),
    [
        ("00000000:07:00.0", "00000000:07:00.0"),
        ("0000:07:00.0", "00000000:07:00.0"),
        ("00000000:3B:00.0", "00000000:3b:00.0"),
        ("not a bus id", "not a bus id"),
        ("zz:07:00.0", "zz:07:00.0"),
    ],
)
def test_pci_bus_ids_compare_in_one_spelling(bus_id, key):
    assert pci_key(bus_id) == key


# --- the cycle, with NVML and the API server stood in for ---------------------------------------


class FakeClient:
    """KubeClient.call against one Node held in memory; records every request."""

    def __init__(self, current: dict | None, patch_error: ApiError | None = None) -> None:
        self.node = current
        self.requests: list[tuple[str, str, dict]] = []
        self._patch_error = patch_error

    def call(self, method: str, path: str, **kwargs) -> dict:
        self.requests.append((method, path, kwargs))
        if self.node is None:
            raise ApiError(method, path, 404, b'{"message":"nodes \\"node3\\" not found"}')
        if method == "GET":
            return self.node
        if self._patch_error:
            raise self._patch_error
        assert kwargs["content_type"] == MERGE_PATCH
        self.node = merge_patch(self.node, kwargs["body"])
        return self.node


def reader(*results):
    """An NVML reader that gives (or raises) each result in turn."""
    pending = list(results)

    def read() -> Inventory:
        result = pending.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    return read


def agent_with(client: FakeClient, *reads, connect=None) -> Agent:
    return Agent("node3", reader(*reads), connect or (lambda: client), retry_seconds=60)


def test_a_cycle_publishes_then_finds_nothing_to_write():
    client = FakeClient(node())
    agent = agent_with(client, TWO_GPUS, TWO_GPUS)
    assert agent.cycle() is Outcome.PUBLISHED
    assert agent.cycle() is Outcome.UNCHANGED
    assert [(method, path) for method, path, _ in client.requests] == [
        ("GET", "/api/v1/nodes/node3"),
        ("PATCH", "/api/v1/nodes/node3"),
        ("GET", "/api/v1/nodes/node3"),
    ]
    assert client.node == published(TWO_GPUS)


def test_the_published_change_is_logged_at_info(caplog):
    caplog.set_level("INFO", logger="gpu_scheduler.agent")
    agent_with(FakeClient(node()), TWO_GPUS).cycle()
    assert caplog.messages == [
        f"node node3 publishes 2 GPUs ({A100}), 1 MIG device, NVLink between 0-1 "
        "(annotation gpu-scheduler/gpus set; label gpu-scheduler/gpu-count: (none) -> 2; "
        "label gpu-scheduler/gpu-model: (none) -> NVIDIA-A100-SXM4-40GB)"
    ]


def test_without_nvml_one_warning_no_api_contact_and_the_published_inventory_stays(caplog):
    caplog.set_level("DEBUG", logger="gpu_scheduler.agent")
    client = FakeClient(published(TWO_GPUS))
    unavailable = NvmlUnavailable("libnvidia-ml.so.1 not found: no NVIDIA driver on this node")
    connects = []
    agent = agent_with(client, unavailable, unavailable, unavailable, connect=lambda: connects.append(1) or client)
    assert [agent.cycle() for _ in range(3)] == [Outcome.NO_NVML] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "NVML is not available on node node3: libnvidia-ml.so.1 not found: no NVIDIA driver on this node; "
        "nothing is published, and an inventory published before is left as it is; trying again in 60 s"
    ]
    assert connects == [] and client.requests == []
    assert client.node == published(TWO_GPUS)


def test_nvml_that_appears_later_is_announced_and_published(caplog):
    caplog.set_level("INFO", logger="gpu_scheduler.agent")
    client = FakeClient(node())
    agent = agent_with(client, NvmlUnavailable("not yet"), TWO_GPUS)
    assert agent.cycle() is Outcome.NO_NVML
    assert agent.cycle() is Outcome.PUBLISHED
    assert "NVML is available now on node node3" in caplog.messages


def test_nvml_lost_again_is_warned_about_again(caplog):
    client = FakeClient(node())
    agent = agent_with(client, NvmlUnavailable("gone"), TWO_GPUS, NvmlUnavailable("gone"))
    for _ in range(3):
        agent.cycle()
    assert sum(r.levelname == "WARNING" for r in caplog.records) == 2


def test_a_failed_nvml_query_publishes_nothing(caplog):
    client = FakeClient(node())
    agent = agent_with(client, NvmlReadError("NVML could not read GPU 3: GPU is lost"))
    assert agent.cycle() is Outcome.FAILED
    assert client.requests == []
    assert caplog.messages == ["NVML could not read GPU 3: GPU is lost; nothing published; trying again in 60 s"]


def test_an_inventory_the_scheduler_could_not_read_back_is_not_published(caplog):
    odd = Inventory("550", (Gpu(0, "GPU-not-a-uuid", "00000000:07:00.0", A100, 40960),))
    client = FakeClient(node())
    assert agent_with(client, odd).cycle() is Outcome.FAILED
    assert client.requests == []
    assert caplog.messages[0].startswith(
        "the inventory NVML gave on node node3: gpus[0].uuid: expected a string starting with GPU-"
    )


def test_a_node_that_does_not_exist_is_an_error_that_names_the_flag(caplog):
    assert agent_with(FakeClient(None), TWO_GPUS).cycle() is Outcome.FAILED
    assert caplog.messages == [
        "node node3 not found: --node-name (NODE_NAME) must be this node's name, "
        "as the downward API's spec.nodeName gives it; trying again in 60 s"
    ]


def test_an_api_error_is_logged_and_the_next_cycle_tries_again(caplog):
    forbidden = ApiError("PATCH", "/api/v1/nodes/node3", 403, b'{"message":"nodes \\"node3\\" is forbidden"}')
    client = FakeClient(node(), patch_error=forbidden)
    agent = agent_with(client, TWO_GPUS, TWO_GPUS)
    assert agent.cycle() is Outcome.FAILED
    assert caplog.messages == ['PATCH /api/v1/nodes/node3: HTTP 403: nodes "node3" is forbidden; trying again in 60 s']
    client._patch_error = None
    assert agent.cycle() is Outcome.PUBLISHED


def test_a_cluster_configuration_that_cannot_be_loaded_ends_the_loop_with_1(caplog):
    def connect():
        raise ConfigException("Invalid kube-config file. No configuration found.")

    agent = Agent("node3", reader(TWO_GPUS), connect, retry_seconds=60)
    assert agent.loop(threading.Event(), 0.01) == 1
    assert caplog.messages == [
        "cannot load the cluster configuration: Invalid kube-config file. No configuration found.; "
        "pass --kubeconfig or set KUBECONFIG"
    ]


def test_the_loop_ends_with_0_when_stopped():
    stop = threading.Event()
    client = FakeClient(node())
    reads = []

    def read() -> Inventory:
        reads.append(1)
        if len(reads) == 3:
            stop.set()
        return TWO_GPUS

    assert Agent("node3", read, lambda: client, retry_seconds=0.01).loop(stop, 0.01) == 0
    assert len(reads) == 3


# --- the command, as a process, without NVML ------------------------------------------------------


class ConnectionCounter:
    """A TCP listener that counts the connections made to it and answers none."""

    def __init__(self) -> None:
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self._listener.close()


def kubeconfig_for(tmp_path: Path, port: int) -> Path:
    cluster = {"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}
    return write_kubeconfig(tmp_path / "kubeconfig", cluster, "u", "t")


def agent_env(library_dir: Path, layout: Path | None = None) -> dict[str, str]:
    """The fake library's environment, without the agent's own settings from this process's."""
    return library.environment(library_dir, layout, drop=("NODE_NAME", "AGENT_INTERVAL"))


NO_NVML_WARNING = (
    "WARNING gpu_scheduler.agent: NVML is not available on node node3: libnvidia-ml.so.1 not found: "
    "no NVIDIA driver on this node (or its libraries are not mounted into this container); "
    "nothing is published, and an inventory published before is left as it is"
)


def test_once_without_nvml_warns_once_and_exits_2_without_contacting_the_api_server(tmp_path):
    empty = tmp_path / "no-driver"
    empty.mkdir()
    listener = ConnectionCounter()
    try:
        result = subprocess.run(
            [CLI, "agent", "--node-name", "node3", "--once", "--kubeconfig", kubeconfig_for(tmp_path, listener.port)],
            env=agent_env(empty),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        listener.close()
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].endswith(NO_NVML_WARNING), lines[0]  # no retry promised: --once retries nothing
    assert result.stdout == ""
    assert listener.connections == 0


def test_running_without_nvml_warns_once_keeps_retrying_and_exits_0_on_sigterm(tmp_path):
    empty = tmp_path / "no-driver"
    empty.mkdir()
    process = subprocess.Popen(
        [CLI, "--log-level", "debug", "agent", "--node-name", "node3", "--interval", "0.05"],
        env=agent_env(empty),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = read_lines_until(process, lambda lines: sum("NVML still not available" in x for x in lines) >= 5)
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 3
    finally:
        process.kill()
        process.wait()
    lines += process.stderr.read().splitlines()
    warnings = [line for line in lines if " WARNING " in line]
    assert len(warnings) == 1, "\n".join(lines)
    assert warnings[0].endswith(NO_NVML_WARNING + "; trying again in 0.05 s")
    assert lines[-1].endswith("INFO    gpu_scheduler.agent: stopped")


def read_lines_until(process: subprocess.Popen, done, timeout: float = 30) -> list[str]:
    """The process's stderr lines until done(lines) holds; fails if it does not in time."""
    lines: list[str] = []
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if done(lines):
                return lines
    finally:
        timer.cancel()
    raise AssertionError("the agent ended or stalled before the expected lines:\n" + "\n".join(lines))


def test_the_node_name_is_required_to_publish():
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    result = subprocess.run([CLI, "agent", "--once"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "--node-name (or NODE_NAME) is required: the name of the node this agent runs on" in result.stderr


# --- NVML read from the fake libnvidia-ml.so.1 ------------------------------------------------------


# `fake_nvml`, the folder of the library built for this session: the root conftest's fixture.

READ_INVENTORY = "from gpu_scheduler.agent.nvml import read_inventory; print(read_inventory().to_annotation())"


def read_inventory_from(fake_nvml: Path, layout: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", READ_INVENTORY],
        env={**agent_env(fake_nvml, layout), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def expected_links(gpus: list[dict]) -> dict[tuple[int, int], tuple[int, str]]:
    """(a, b) -> (NVLinks, common ancestor) as the layout describes the node: NVLinks are the
    links of GPU a whose remote end is GPU b; without one, GPUs behind one PCIe switch are
    SINGLE, on one NUMA node NODE, else SYSTEM (tests/fake_nvml's topology)."""
    links = {}
    for a, gpu_a in enumerate(gpus):
        for b in range(a + 1, len(gpus)):
            gpu_b = gpus[b]
            nvlinks = sum(link["remote_pci_bus_id"] == gpu_b["pci_bus_id"] for link in gpu_a.get("nvlinks", []))
            if nvlinks:
                ancestor = "NVLINK"
            elif gpu_a.get("pcie_switch") and gpu_a.get("pcie_switch") == gpu_b.get("pcie_switch"):
                ancestor = "SINGLE"
            elif gpu_a["numa_node"] == gpu_b["numa_node"]:
                ancestor = "NODE"
            else:
                ancestor = "SYSTEM"
            links[a, b] = (nvlinks, ancestor)
    return links


def test_the_four_layouts_are_there():
    assert [layout.name for layout in LAYOUTS] == ["node1.json", "node2.json", "node3.json", "node4.json"]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda path: path.stem)
def test_read_inventory_reports_the_layouts_gpus_mig_devices_and_links(fake_nvml, layout):
    result = read_inventory_from(fake_nvml, layout)
    assert result.returncode == 0, result.stderr
    inventory = Inventory.from_annotation(result.stdout.strip(), f"read_inventory() on {layout.name}")
    spec = json.loads(layout.read_text())

    assert inventory.driver_version == spec["driver_version"]
    assert len(inventory.gpus) == len(spec["gpus"])
    for index, (gpu, want) in enumerate(zip(inventory.gpus, spec["gpus"], strict=True)):
        assert (gpu.index, gpu.uuid, gpu.pci_bus_id, gpu.model) == (
            index,
            want["uuid"],
            want["pci_bus_id"],
            want["name"],
        )
        assert gpu.memory_mib == want["memory_total"] // MIB
        assert gpu.numa_node == want["numa_node"]
        assert gpu.mig_enabled == (want.get("mig_mode", 0) == 1)
        assert [
            (mig.uuid, mig.profile, mig.gpu_instance_id, mig.compute_instance_id, mig.memory_mib)
            for mig in gpu.mig_devices
        ] == [
            (
                mig["uuid"],
                mig["name"].rpartition(" MIG ")[2],
                mig["gpu_instance_id"],
                mig["compute_instance_id"],
                mig["memory_total"] // MIB,
            )
            for mig in want.get("mig_devices", [])
        ]
    assert {(link.a, link.b): (link.nvlinks, link.common_ancestor) for link in inventory.links} == expected_links(
        spec["gpus"]
    )


def test_node3_has_three_mig_devices_on_gpu_0_that_resolve_by_either_spelling(fake_nvml):
    inventory = Inventory.from_annotation(
        read_inventory_from(fake_nvml, FAKE_NVML / "layouts" / "node3.json").stdout, "node3"
    )
    gpu0 = inventory.gpus[0]
    assert [mig.profile for mig in gpu0.mig_devices] == ["3g.20gb", "2g.10gb", "1g.5gb"]
    assert not inventory.gpus[1].mig_enabled
    second = gpu0.mig_devices[1]
    assert inventory.resolve(second.uuid.upper()).mig_uuid == second.uuid
    assert inventory.resolve(f"MIG-{gpu0.uuid}/5/0").mig_uuid == second.uuid


def test_node4_has_two_nvlink_pairs_of_four_links(fake_nvml):
    inventory = Inventory.from_annotation(
        read_inventory_from(fake_nvml, FAKE_NVML / "layouts" / "node4.json").stdout, "node4"
    )
    assert [(link.a, link.b, link.nvlinks) for link in inventory.links if link.nvlinks] == [(0, 1, 4), (2, 3, 4)]


def test_node1_has_two_pairs_behind_one_pcie_switch_each(fake_nvml):
    inventory = Inventory.from_annotation(
        read_inventory_from(fake_nvml, FAKE_NVML / "layouts" / "node1.json").stdout, "node1"
    )
    assert {(link.a, link.b) for link in inventory.links if link.common_ancestor == "SINGLE"} == {(0, 1), (2, 3)}
    assert {link.common_ancestor for link in inventory.links if (link.a, link.b) not in {(0, 1), (2, 3)}} == {"SYSTEM"}


def test_every_read_reaches_the_fake_library_and_ends_with_nvml_shutdown(fake_nvml, tmp_path):
    calls = tmp_path / "calls.log"
    result = read_inventory_from(fake_nvml, FAKE_NVML / "layouts" / "node3.json", FAKE_NVML_LOG=str(calls))
    assert result.returncode == 0, result.stderr
    names = calls.read_text().split()
    assert names[0].startswith("nvmlInit")
    assert names[-1] == "nvmlShutdown"
    assert "nvmlDeviceGetMigDeviceHandleByIndex" in names
    assert "nvmlDeviceGetTopologyCommonAncestor" in names


def test_nvml_that_does_not_start_counts_as_no_nvml(fake_nvml, tmp_path):
    """The fake, like a machine whose driver is not loaded, fails nvmlInit without a layout."""
    env = agent_env(fake_nvml)
    env["FAKE_NVML_LAYOUT"] = ""
    result = subprocess.run(
        [CLI, "agent", "--node-name", "node3", "--once", "--kubeconfig", tmp_path / "absent"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().endswith(
        "NVML is not available on node node3: NVML did not start (nvmlInit: Driver Not Loaded); "
        "nothing is published, and an inventory published before is left as it is"
    )


# --- the command end to end: fake NVML, and an API server stood in for by a local HTTP server ------


class FakeApiServer:
    """GET and merge-PATCH of Nodes over HTTP, recording every request; with `hang`,
    it answers nothing until closed."""

    def __init__(self, nodes: dict[str, dict], hang: bool = False) -> None:
        self.nodes = nodes
        self.requests: list[tuple[str, str, str, object]] = []
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test's output clean
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_PATCH(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                server.requests.append((self.command, self.path, self.headers.get("Content-Type", ""), body))
                if hang:
                    server.closing.wait(30)
                    return
                name = self.path.removeprefix("/api/v1/nodes/")
                if name not in server.nodes:
                    self._send(404, {"kind": "Status", "message": f'nodes "{name}" not found', "reason": "NotFound"})
                    return
                if self.command == "PATCH":
                    server.nodes[name] = merge_patch(server.nodes[name], body)
                self._send(200, server.nodes[name])

            def _send(self, status: int, document: dict) -> None:
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def apiserver():
    servers = []

    def start(nodes: dict[str, dict], hang: bool = False) -> FakeApiServer:
        servers.append(FakeApiServer(nodes, hang))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def run_once(fake_nvml: Path, layout: Path, kubeconfig: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLI, "agent", "--node-name", "node3", "--once", "--kubeconfig", kubeconfig],
        env=agent_env(fake_nvml, layout),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_once_publishes_with_one_merge_patch_and_then_writes_nothing(fake_nvml, apiserver, tmp_path):
    server = apiserver({"node3": node(labels={"kubernetes.io/hostname": "node3"})})
    kubeconfig = kubeconfig_for(tmp_path, server.port)
    layout = FAKE_NVML / "layouts" / "node3.json"

    first = run_once(fake_nvml, layout, kubeconfig)
    assert first.returncode == 0, first.stderr
    assert [(method, path, content_type) for method, path, content_type, _ in server.requests] == [
        ("GET", "/api/v1/nodes/node3", ""),
        ("PATCH", "/api/v1/nodes/node3", "application/merge-patch+json"),
    ]
    expected = Inventory.from_annotation(read_inventory_from(fake_nvml, layout).stdout, "node3")
    metadata = server.nodes["node3"]["metadata"]
    assert Inventory.from_annotation(metadata["annotations"][INVENTORY_ANNOTATION], "node3") == expected
    assert metadata["labels"] == {
        "kubernetes.io/hostname": "node3",
        COUNT_LABEL: str(len(expected.gpus)),
        MODEL_LABEL: "NVIDIA-A100-SXM4-40GB",
    }
    published = (
        f"INFO    gpu_scheduler.agent: node node3 publishes {len(expected.gpus)} GPUs (NVIDIA A100-SXM4-40GB), 3 MIG"
    )
    assert published in (first.stderr)

    second = run_once(fake_nvml, layout, kubeconfig)
    assert second.returncode == 0, second.stderr
    assert [method for method, *_ in server.requests] == ["GET", "PATCH", "GET"]
    assert second.stderr == ""  # unchanged is said at debug only


def test_once_for_a_node_the_api_server_does_not_know_exits_1(fake_nvml, apiserver, tmp_path):
    server = apiserver({})
    result = run_once(fake_nvml, FAKE_NVML / "layouts" / "node1.json", kubeconfig_for(tmp_path, server.port))
    assert result.returncode == 1
    assert "node node3 not found: --node-name (NODE_NAME) must be this node's name" in result.stderr


def test_the_loop_publishes_a_changed_layout_and_nothing_while_it_stays(fake_nvml, apiserver, tmp_path):
    server = apiserver({"node3": node()})
    layout = tmp_path / "layout.json"
    layout.write_text((FAKE_NVML / "layouts" / "node1.json").read_text())
    process = subprocess.Popen(
        [
            CLI,
            "agent",
            "--node-name",
            "node3",
            "--interval",
            "0.1",
            "--kubeconfig",
            kubeconfig_for(tmp_path, server.port),
        ],
        env=agent_env(fake_nvml, layout),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until("4 GETs", lambda: sum(method == "GET" for method, *_ in server.requests) >= 4, 30, 0.02)
        assert [method for method, *_ in server.requests].count("PATCH") == 1
        assert server.nodes["node3"]["metadata"]["labels"][COUNT_LABEL] == "4"

        layout.write_text((FAKE_NVML / "layouts" / "node4.json").read_text())
        wait_until("a second PATCH", lambda: [m for m, *_ in server.requests].count("PATCH") == 2, 30, 0.02)
        wait_until("10 GETs", lambda: sum(method == "GET" for method, *_ in server.requests) >= 10, 30, 0.02)
        assert [method for method, *_ in server.requests].count("PATCH") == 2
        labels = server.nodes["node3"]["metadata"]["labels"]
        assert (labels[COUNT_LABEL], labels[MODEL_LABEL]) == ("4", "NVIDIA-H100-80GB-HBM3")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()
    published_lines = [line for line in process.stderr.read().splitlines() if "publishes" in line]
    assert len(published_lines) == 2, published_lines
    assert published_lines[1].endswith(
        "node node3 publishes 4 GPUs (NVIDIA H100 80GB HBM3), NVLink between 0-1, 2-3 "
        "(annotation gpu-scheduler/gpus changed; "
        "label gpu-scheduler/gpu-model: NVIDIA-A100-SXM4-40GB -> NVIDIA-H100-80GB-HBM3)"
    )


def test_sigterm_ends_the_agent_at_once_while_a_request_hangs(fake_nvml, apiserver, tmp_path):
    server = apiserver({"node3": node()}, hang=True)
    process = subprocess.Popen(
        [CLI, "agent", "--node-name", "node3", "--kubeconfig", kubeconfig_for(tmp_path, server.port)],
        env=agent_env(fake_nvml, FAKE_NVML / "layouts" / "node2.json"),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until("the first request", lambda: len(server.requests) == 1, 30, 0.02)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 3  # not the request's 10 s timeout
    finally:
        process.kill()
        process.wait()


def test_print_shows_what_would_be_published_without_an_api_server(fake_nvml):
    layout = FAKE_NVML / "layouts" / "node2.json"
    env = {**agent_env(fake_nvml, layout), "KUBECONFIG": "/nonexistent"}
    result = subprocess.run([CLI, "agent", "--print"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    inventory = Inventory.from_annotation(printed["annotations"][INVENTORY_ANNOTATION], "printed")
    gpus = json.loads(layout.read_text())["gpus"]
    assert [g.uuid for g in inventory.gpus] == [g["uuid"] for g in gpus]
    assert printed["labels"] == {COUNT_LABEL: str(len(gpus)), MODEL_LABEL: "Tesla-T4"}

    without = subprocess.run([CLI, "agent", "--print"], env=agent_env(fake_nvml.parent), capture_output=True, text=True)
    assert without.returncode == 2 and without.stdout == ""
    assert "NVML is not available" in without.stderr

"""A node's GPUs published by the real agent (over the fake libnvidia-ml.so.1 built from
tests/fake_nvml) on the real kube-apiserver, and what the scheduler and `gpu-scheduler gpus`
make of them (issue 19): one GPU in two spellings is one GPU, a device the node does not have
is refused listing its GPUs, and the holders are listed per GPU."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from fake_nvml import library

from .cluster import create, get_json, kwok_node, wait_for_event, wait_for_node_ready, wait_for_pods
from .components import GPU_SCHEDULER
from .workloads import bare_pod

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

LAYOUT = library.LAYOUTS / "node3.json"


def agent_once(fake_nvml: Path, kubeconfig: str, node: str) -> subprocess.CompletedProcess:
    env = library.environment(fake_nvml, LAYOUT)
    argv = [str(GPU_SCHEDULER), "agent", "--once", "--node-name", node, "--kubeconfig", kubeconfig]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def inventory_writes(metadata: dict) -> list[tuple[str, str]]:
    """(manager, time) of the managedFields entries that own the inventory annotation."""
    return [
        (entry["manager"], entry["time"])
        for entry in metadata.get("managedFields") or ()
        if "f:gpu-scheduler/gpus" in json.dumps(entry.get("fieldsV1") or {})
    ]


def test_the_agent_publishes_the_nodes_gpus_and_the_scheduler_keys_them_by_physical_gpu(
    api_client, kubeconfig, product, ns, kwok_nodes, fake_nvml
):
    layout = json.loads(LAYOUT.read_text())
    gpu0 = layout["gpus"][0]["uuid"]
    node = f"e2e-gpus-{uuid.uuid4().hex[:6]}"
    kwok_nodes(kwok_node(node))
    wait_for_node_ready(api_client, node, timeout=60)

    published = agent_once(fake_nvml, kubeconfig, node)
    assert published.returncode == 0, published.stderr
    stored = get_json(api_client, f"/api/v1/nodes/{node}")["metadata"]
    inventory = json.loads(stored["annotations"]["gpu-scheduler/gpus"])
    assert [g["uuid"] for g in inventory["gpus"]] == [g["uuid"] for g in layout["gpus"]]
    assert stored["labels"]["gpu-scheduler/gpu-count"] == str(len(layout["gpus"]))

    # A second run finds the node publishing the same and writes nothing: the apiserver's own
    # record of the last write to the annotation (managedFields, to the second) stays as it was.
    written = inventory_writes(stored)
    assert len(written) == 1, stored["managedFields"]
    time.sleep(1.1)
    again = agent_once(fake_nvml, kubeconfig, node)
    assert again.returncode == 0, again.stderr
    assert inventory_writes(get_json(api_client, f"/api/v1/nodes/{node}")["metadata"]) == written

    # GPU 0 by its ordinal, then by its UUID: one GPU, so the second pod is told it shares it.
    create(api_client, ns, [bare_pod("by-ordinal-0", f"0={node}:0\n")])
    wait_for_pods(api_client, ns, 1, timeout=60)
    create(api_client, ns, [bare_pod("by-uuid-0", f"0={node}:{gpu0}\n")])
    event = wait_for_event(api_client, ns, "by-uuid-0", "GPUShared", "sharing GPUs with running pods", timeout=60)
    assert f"GPU {gpu0} by {ns}/by-ordinal-0" in event["message"], event["message"]
    assert "maybe" not in event["message"]

    # The scheduler's own metric says the same: both pods hold that one GPU, by its UUID.
    _, scheduler = product
    if scheduler is not None:
        for pod in ("by-ordinal-0", "by-uuid-0"):
            labels = {"node": node, "gpu": gpu0.lower(), "pod": f"{ns}/{pod}"}
            assert scheduler.metric("gpu_scheduler_gpu_holder", **labels) == 1.0, pod

    # A GPU the node does not have: nothing reads the map at the pod's creation; the scheduler
    # refuses to bind it, with the node's GPUs listed.
    missing = "GPU-ffffffff-0000-4000-8000-000000000000"
    create(api_client, ns, [bare_pod("missing-0", f"0={node}:{missing}\n")])
    event = wait_for_event(api_client, ns, "missing-0", "FailedScheduling", f"had no GPU {missing}", timeout=60)
    assert f"(its GPUs: 0 {gpu0}" in event["message"], event["message"]
    assert not get_json(api_client, f"/api/v1/namespaces/{ns}/pods/missing-0")["spec"].get("nodeName")

    # Who holds what, from the cluster's state.
    shown = subprocess.run(
        [str(GPU_SCHEDULER), "gpus", "--kubeconfig", kubeconfig, "--node", node, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    (report,) = json.loads(shown.stdout)["nodes"]
    by_index = {g["index"]: g for g in report["gpus"]}
    assert sorted(h["pod"] for h in by_index[0]["heldBy"]) == [f"{ns}/by-ordinal-0", f"{ns}/by-uuid-0"]
    assert all(h["since"] for h in by_index[0]["heldBy"])
    assert by_index[1]["heldBy"] == []
    assert report["unresolved"] == []


def test_map_generate_reads_the_published_inventory_from_the_api_server(api_client, kubeconfig, kwok_nodes, fake_nvml):
    layout = json.loads(LAYOUT.read_text())
    node = f"e2e-map-{uuid.uuid4().hex[:6]}"
    kwok_nodes(kwok_node(node))
    wait_for_node_ready(api_client, node, timeout=60)
    published = agent_once(fake_nvml, kubeconfig, node)
    assert published.returncode == 0, published.stderr

    generated = subprocess.run(
        [str(GPU_SCHEDULER), "map", "generate", "--kubeconfig", kubeconfig]
        + ["--selector", f"kubernetes.io/hostname={node}", "--gpus-per-pod", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert generated.returncode == 0, generated.stderr
    lines = [line for line in generated.stdout.splitlines() if not line.startswith("#")]
    # node3's layout: GPU 1 sits under another PCIe switch than 2 and 3, GPU 0 runs MIG, so
    # one pod gets GPUs 2 and 3 and each MIG device an index of its own (docs/gpu-inventory.md).
    migs = [mig["uuid"] for mig in layout["gpus"][0]["mig_devices"]]
    assert lines == [f"0={node}:2,3"] + [f"{i}={node}:{mig}" for i, mig in enumerate(migs, start=1)], generated.stdout


def test_map_generate_says_what_failed_when_the_api_server_refuses(kubeconfig, tmp_path):
    # The cluster's address without credentials: the API server answers 401 or 403.
    anonymous = yaml.safe_load(Path(kubeconfig).read_text())
    for user in anonymous["users"]:
        user["user"] = {}
    broken = tmp_path / "kubeconfig"
    broken.write_text(yaml.safe_dump(anonymous))

    generated = subprocess.run(
        [str(GPU_SCHEDULER), "map", "generate", "--kubeconfig", str(broken)], capture_output=True, text=True, timeout=60
    )

    assert generated.returncode == 1
    assert generated.stderr.startswith("gpu-scheduler map generate: "), generated.stderr
    assert "Traceback" not in generated.stderr
    assert "GET /api/v1/nodes" in generated.stderr and "HTTP 40" in generated.stderr, generated.stderr

"""`gpu-scheduler map validate|generate`: the CLI contract, through the real console script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_scheduler.mapcli import PinError, render_generated_map, render_pinned_map
from gpu_scheduler.placement import parse_map_uncached
from gpu_scheduler.scheduling import NodeInfo

CLI = [str(Path(sys.executable).with_name("gpu-scheduler"))]


def run(*args, stdin=""):
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_validate_prints_the_parsed_map_as_json():
    result = run("map", "validate", "-", stdin="0=node1:0,1\n1=node2:2\n")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "0": {"node": "node1", "devices": ["0", "1"], "cuda_visible_devices": "0,1"},
        "1": {"node": "node2", "devices": ["2"], "cuda_visible_devices": "2"},
    }


def test_validate_prints_one_line_per_error_and_exits_1(tmp_path):
    path = tmp_path / "map.txt"
    path.write_text("0=node1:0\n0=node2:1\nnonsense\n")
    result = run("map", "validate", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("line 2: index 0 is already given on line 1")
    assert lines[1].startswith("line 3: expected <index>=<node>:<devices>")


def test_validate_of_a_missing_file_says_so():
    result = run("map", "validate", "/nonexistent/map.txt")
    assert result.returncode == 2
    assert "cannot read /nonexistent/map.txt" in result.stderr


def test_generated_map_gives_each_gpu_node_all_its_gpus_and_parses():
    nodes = [
        NodeInfo("node2", None, True, "", False, 2),
        NodeInfo("cpu-only", None, True, "", False, 0),
        NodeInfo("node1", None, True, "", False, 4),
    ]
    text = render_generated_map(nodes)
    assert "# skipped, no GPUs: cpu-only" in text
    parsed = parse_map_uncached(text)
    assert {i: (e.node, e.cuda_visible_devices) for i, e in parsed.items()} == {
        0: ("node1", "0,1,2,3"),
        1: ("node2", "0,1"),
    }


def test_help_lists_every_subcommand_and_the_env_vars():
    result = run("--help")
    assert result.returncode == 0
    for word in ("scheduler", "webhook", "certs", "map", "LOG_FORMAT", "LOG_LEVEL"):
        assert word in result.stdout


def bound(name: str, node: str, devices: str, chosen: str | None = None, scheduler: str = "gpu-scheduler") -> dict:
    annotations = {"gpu-scheduler/cuda-visible-devices": devices}
    if chosen:
        annotations["gpu-scheduler/placement"] = json.dumps({"node": node, "chosen": chosen})
    entry = {
        "name": "CUDA_VISIBLE_DEVICES",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['gpu-scheduler/cuda-visible-devices']"}},
    }
    return {
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"schedulerName": scheduler, "nodeName": node, "containers": [{"name": "main", "env": [entry]}]},
        "status": {"phase": "Running"},
    }


def test_the_gpus_pods_hold_are_written_back_as_a_pinned_map():
    deployment_pod = bound("web-7f9c-x2x4q", "node2", "4")
    deployment_pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-7f9c", "controller": True}]
    pods = [
        bound("train-1", "node3", "2,3", chosen="chosen for line 1 (2 GPUs on any node)"),
        bound("train-0", "node1", "0,1"),
        deployment_pod,
        bound("other-0", "node4", "0", scheduler="default-scheduler"),
    ]
    text = render_pinned_map(pods, "gpu-scheduler", "ml")
    assert text.splitlines() == [
        "# pinned from 2 bound pods of namespace ml (1 placed by count lines)",
        "# skipped ml/web-7f9c-x2x4q: no index (placed by a `*` line); a pinned line needs one",
        "0=node1:0,1",
        "1=node3:2,3",
    ]
    assert dict(parse_map_uncached(text))[1].devices == ("2", "3")


def test_two_pods_of_one_index_cannot_be_pinned_together():
    with pytest.raises(PinError, match="pods ml/a-0 and ml/b-0 both have index 0"):
        render_pinned_map([bound("a-0", "node1", "0"), bound("b-0", "node2", "1")], "gpu-scheduler", "ml")

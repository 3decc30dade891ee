"""The gpu-scheduler-check console script, run for real as a subprocess."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_nvml.library import layout_path

CLI = str(Path(sys.executable).parent / "gpu-scheduler-check")
TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
PLACEMENT = json.dumps({"index": 2, "node": "node3", "cudaVisibleDevices": "0,1,2"})


def clean_env(**overrides):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "NODE_NAME",
            "POD_NAME",
            "NODE_ALIAS",
            "EXPECTED_PLACEMENT",
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "PYTHONPATH",
        }
    }
    env.update(overrides)
    return env


def run_once(*args, **env):
    result = subprocess.run(
        [CLI, "--once", *args],
        check=False,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    assert re.match(TIMESTAMP + " ", lines[0]), lines[0]
    return lines[0].split(" ", 1)[1], result.stderr


def nvml_works() -> bool:
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    return True


@pytest.mark.pipeline_sample
def test_once_prints_node_devices_and_match_when_placement_is_right():
    line, _ = run_once(
        NODE_NAME="node3",
        POD_NAME="train-2",
        CUDA_VISIBLE_DEVICES="0,1,2",
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        EXPECTED_PLACEMENT=PLACEMENT,
    )
    assert line.startswith(
        "pod=train-2 index=2 node=node3 CUDA_VISIBLE_DEVICES=0,1,2 CUDA_DEVICE_ORDER=PCI_BUS_ID match=true"
    )


def test_unset_devices_are_shown_as_unset_and_hostname_stands_in_for_node_name():
    line, _ = run_once()
    assert line.startswith(f"node={os.uname().nodename} CUDA_VISIBLE_DEVICES=<unset> CUDA_DEVICE_ORDER=<unset>")
    assert "match=" not in line


def test_wrong_devices_report_mismatch_with_the_expectation():
    line, _ = run_once(NODE_NAME="node3", CUDA_VISIBLE_DEVICES="0,1", EXPECTED_PLACEMENT=PLACEMENT)
    expected = (
        "node=node3 CUDA_VISIBLE_DEVICES=0,1 CUDA_DEVICE_ORDER=<unset> match=false expected node=node3 devices=0,1,2"
    )
    assert expected in line


def test_unset_devices_with_an_expectation_are_a_mismatch():
    line, _ = run_once(NODE_NAME="node3", EXPECTED_PLACEMENT=PLACEMENT)
    assert "CUDA_VISIBLE_DEVICES=<unset> CUDA_DEVICE_ORDER=<unset> match=false" in line


def test_wrong_node_is_a_mismatch_when_the_alias_is_known():
    line, _ = run_once(
        NODE_NAME="node4",
        NODE_ALIAS="node4",
        CUDA_VISIBLE_DEVICES="0,1,2",
        EXPECTED_PLACEMENT=PLACEMENT,
    )
    assert "match=false expected node=node3 devices=0,1,2" in line


def test_node_alias_matches_the_map_node():
    line, _ = run_once(
        NODE_NAME="ip-10-0-0-3",
        NODE_ALIAS="node3",
        CUDA_VISIBLE_DEVICES="0,1,2",
        EXPECTED_PLACEMENT=PLACEMENT,
    )
    assert "node=ip-10-0-0-3 CUDA_VISIBLE_DEVICES=0,1,2 CUDA_DEVICE_ORDER=<unset> match=true" in line


def test_differing_node_name_without_alias_is_reported_as_not_compared():
    line, _ = run_once(
        NODE_NAME="ip-10-0-0-3",
        CUDA_VISIBLE_DEVICES="0,1,2",
        EXPECTED_PLACEMENT=PLACEMENT,
    )
    assert "match=unknown expected node=node3 devices=0,1,2" in line
    assert "node not compared" in line and "NODE_ALIAS" in line


def test_invalid_expected_placement_is_explained_on_stderr_and_not_compared():
    line, stderr = run_once(NODE_NAME="node3", EXPECTED_PLACEMENT="{not json")
    assert "match=" not in line
    assert "EXPECTED_PLACEMENT is not JSON" in stderr


def test_expected_placement_without_fields_is_explained():
    _, stderr = run_once(NODE_NAME="node3", EXPECTED_PLACEMENT='{"index": 1}')
    assert '"node" and "cudaVisibleDevices"' in stderr


def test_each_start_is_counted_on_the_volume_and_logged_with_the_node_that_wrote_the_last(tmp_path):
    _, first = run_once(f"--state-dir={tmp_path}", NODE_NAME="node3")
    _, second = run_once(f"--state-dir={tmp_path}", NODE_NAME="node3")

    assert f"volume {tmp_path}: start 1 (the first on this volume)" in first
    assert f"volume {tmp_path}: start 2 (1 before this one, written by node3)" in second
    assert (tmp_path / "starts").read_text() == "2 node3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["starts"]


def test_a_volume_that_cannot_hold_the_count_is_said_and_the_check_still_runs(tmp_path):
    (tmp_path / "starts").write_text("not a number\n")

    line, stderr = run_once(f"--state-dir={tmp_path}", NODE_NAME="node3")

    assert line.startswith("node=node3 ")
    assert "this start not counted" in stderr and "does not hold a count of starts" in stderr


def test_gpu_list_or_a_single_nvml_notice():
    with subprocess.Popen(
        [CLI, "--interval", "0.1"],
        env=clean_env(NODE_NAME="node1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        # Three reports, however long the interpreter takes to start on a busy machine
        # (a fixed sleep of 0.6 s saw only one under load).
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(3)]
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=5)
    lines += stdout.splitlines()
    assert all(lines[:3]), lines
    if nvml_works():
        assert all(" gpus=" in line for line in lines)
    else:
        assert stderr.count("NVML not available: GPU list skipped") == 1, stderr
        assert not any("gpus=" in line for line in lines)


# `fake_nvml` (the root conftest's fixture): the fake libnvidia-ml.so.1 of tests/fake_nvml,
# whose made-up GPUs the real pynvml reads.
LAYOUT = layout_path("node3")


def test_gpus_are_listed_in_nvml_order_with_uuid_and_pci_bus_id(fake_nvml):
    layout = json.loads(LAYOUT.read_text())
    nvml = {"LD_LIBRARY_PATH": str(fake_nvml), "FAKE_NVML_LAYOUT": str(LAYOUT)}
    line, _ = run_once(NODE_NAME="node3", CUDA_VISIBLE_DEVICES="1", **nvml)
    listed = ",".join(f"{i}:{g['name']}:{g['uuid']}@{g['pci_bus_id']}" for i, g in enumerate(layout["gpus"]))
    assert line.endswith(f" gpus={listed} meant=true"), line


def test_devices_the_container_does_not_have_are_not_the_ones_meant(fake_nvml):
    layout = json.loads(LAYOUT.read_text())
    nvml = {"LD_LIBRARY_PATH": str(fake_nvml), "FAKE_NVML_LAYOUT": str(LAYOUT)}
    mig = layout["gpus"][0]["mig_devices"][0]["uuid"]
    # A MIG device of GPU 0, by its UUID in upper-case hex: one of this container's.
    line, _ = run_once(NODE_NAME="node3", CUDA_VISIBLE_DEVICES="MIG-" + mig[4:].upper(), **nvml)
    assert line.endswith(" meant=true"), line
    missing = "GPU-ffffffff-0000-4000-8000-000000000000"
    line, _ = run_once(NODE_NAME="node3", CUDA_VISIBLE_DEVICES=f"{layout['gpus'][1]['uuid']},{missing}", **nvml)
    assert line.endswith(f" meant=false not_visible={missing}"), line
    beyond = len(layout["gpus"])
    line, _ = run_once(NODE_NAME="node3", CUDA_VISIBLE_DEVICES=f"0,{beyond}", **nvml)
    assert line.endswith(f" meant=false not_visible={beyond}"), line


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_ends_a_long_wait_promptly_with_exit_code_0(signum):
    with subprocess.Popen(
        [CLI, "--interval", "60"],
        env=clean_env(NODE_NAME="node1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            first = proc.stdout.readline()
            started = time.monotonic()
            proc.send_signal(signum)
            returncode = proc.wait(timeout=5)
            elapsed = time.monotonic() - started
        finally:
            proc.kill()  # a no-op once it has exited; ends it if the test failed early
    assert "node=node1" in first
    assert returncode == 0
    assert elapsed < 1.0


def test_non_positive_interval_is_rejected():
    result = subprocess.run(
        [CLI, "--interval", "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2
    assert "--interval must be positive" in result.stderr

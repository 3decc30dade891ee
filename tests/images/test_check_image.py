"""The gpu-scheduler-check image: one line with the node and CUDA_VISIBLE_DEVICES it really got."""

from __future__ import annotations

import json

import pytest

from .conftest import docker

pytestmark = pytest.mark.images

HARDENED = ["--read-only", "--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def check_once(image: str, *run_args: str) -> str:
    result = docker("run", "--rm", *HARDENED, *run_args, image, "--once")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return lines[0]


def test_once_prints_its_node_and_cuda_visible_devices(images):
    line = check_once(images.check, "-e", "NODE_NAME=node3", "-e", "CUDA_VISIBLE_DEVICES=0,1,2")

    assert line.endswith(" node=node3 CUDA_VISIBLE_DEVICES=0,1,2 CUDA_DEVICE_ORDER=<unset>"), line


def test_without_node_name_it_prints_the_container_hostname_and_unset_devices(images):
    line = check_once(images.check, "--hostname", "node4")

    assert line.endswith(" node=node4 CUDA_VISIBLE_DEVICES=<unset> CUDA_DEVICE_ORDER=<unset>"), line


def test_it_compares_with_the_placement_the_webhook_recorded(images):
    placement = json.dumps({"index": 2, "node": "node3", "cudaVisibleDevices": "0,1,2"})

    good = check_once(
        images.check,
        "-e",
        "NODE_NAME=node3",
        "-e",
        "CUDA_VISIBLE_DEVICES=0,1,2",
        "-e",
        f"EXPECTED_PLACEMENT={placement}",
    )
    bad = check_once(
        images.check, "-e", "NODE_NAME=node3", "-e", "CUDA_VISIBLE_DEVICES=3", "-e", f"EXPECTED_PLACEMENT={placement}"
    )

    assert good.endswith("index=2 node=node3 CUDA_VISIBLE_DEVICES=0,1,2 CUDA_DEVICE_ORDER=<unset> match=true"), good
    assert "CUDA_VISIBLE_DEVICES=3 CUDA_DEVICE_ORDER=<unset> match=false" in bad, bad


def test_nvml_bindings_are_installed(images):
    # The nvml extra: on a GPU node the check lists the GPUs NVML shows it;
    # here (no driver) it says so on stderr instead of failing.
    result = docker("run", "--rm", *HARDENED, "--entrypoint", "python3", images.check, "-c", "import pynvml")

    assert result.returncode == 0, result.stderr

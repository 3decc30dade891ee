"""The `map generate` example in docs/gpu-inventory.md, reproduced from the fake layouts read
through the real NVML path (pynvml over the fake libnvidia-ml.so.1), not typed."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_scheduler.mapcli import render_generated_map
from gpu_scheduler.scheduling.inventory import Inventory
from gpu_scheduler.scheduling.nodes import NodeInfo

from .library import layout_path

DOC = Path(__file__).resolve().parents[2] / "docs" / "gpu-inventory.md"
READ = "from gpu_scheduler.agent.nvml import read_inventory; print(read_inventory().to_annotation())"


def documented_example() -> str:
    match = re.search(
        r"<!-- map-generate-example -->\n```\n(.*?)```\n<!-- /map-generate-example -->", DOC.read_text(), re.S
    )
    assert match, f"{DOC} has no map-generate-example block"
    return match.group(1)


def test_the_documented_map_is_what_generate_writes_for_the_fake_layouts(run_python):
    nodes = []
    for name in ("node1", "node2", "node3", "node4"):
        read = run_python(READ, layout_path(name))
        assert read.returncode == 0, read.stderr
        inventory = Inventory.from_annotation(read.stdout, f"{name}'s inventory")
        nodes.append(NodeInfo(name, None, True, "", False, len(inventory.gpus), True, inventory=inventory))
    assert render_generated_map(nodes, 2) == documented_example()

"""`gpu-scheduler map validate|generate`: the CLI contract, through the real console script."""

import json
import subprocess
import sys
from pathlib import Path

from gpu_scheduler.mapcli import render_generated_map
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

"""scripts/check-cluster-values.py: a file in clusters/ that Argo CD would skip silently is an error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from commands import run

from .conftest import REPO

pytestmark = pytest.mark.delivery

CHECK = REPO / "scripts" / "check-cluster-values.py"


def checkout(tmp_path: Path, files: dict[str, str]) -> Path:
    """A checkout with the two charts and these files (path under the root -> text)."""
    for chart in ("gpu-scheduler", "gpu-scheduler-check"):
        (tmp_path / "charts" / chart).mkdir(parents=True)
        (tmp_path / "charts" / chart / "Chart.yaml").write_text(f"name: {chart}\n")
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


def check(root: Path, *values: Path):
    return run([sys.executable, CHECK, root, *values])


def test_this_checkouts_clusters_directory_passes():
    result = check(REPO)
    assert result.returncode == 0, result.stderr


def test_values_files_named_for_the_charts_pass(tmp_path):
    root = checkout(
        tmp_path,
        {
            "clusters/README.md": "how it works\n",
            "clusters/prod-gpu/values-gpu-scheduler-check.yaml": "schedulingMap: |\n  0=gpu-a1:0\n",
            "clusters/prod-gpu/values-gpu-scheduler.yaml": "# nothing set yet\n",
        },
    )
    result = check(root)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_a_misspelt_values_file_is_named_with_the_name_it_should_have(tmp_path):
    root = checkout(tmp_path, {"clusters/prod-gpu/values-gpu-schedular-check.yaml": "schedulingMap: ''\n"})
    result = check(root)
    assert result.returncode == 1
    assert (
        "clusters/prod-gpu/values-gpu-schedular-check.yaml: Argo CD never reads this file; "
        "did you mean values-gpu-scheduler-check.yaml?"
    ) in result.stderr


def test_every_problem_is_listed_not_only_the_first(tmp_path):
    root = checkout(
        tmp_path,
        {
            "clusters/values-gpu-scheduler.yaml": "a: 1\n",
            "clusters/a/notes.txt": "x\n",
            "clusters/b/sub/values-gpu-scheduler.yaml": "a: 1\n",
            "clusters/c/values-gpu-scheduler.yaml": "- a list\n",
            "clusters/d/values-gpu-scheduler-check.yaml": "a: [unclosed\n",
        },
    )
    result = check(root)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 5, lines
    expected = [
        "clusters/a/notes.txt: Argo CD never reads this file; the files read are values-gpu-scheduler.yaml, "
        "values-gpu-scheduler-check.yaml",
        "clusters/b/sub: Argo CD reads no subdirectory; put values-<chart>.yaml in clusters/b/",
        "clusters/c/values-gpu-scheduler.yaml: must be a mapping of chart values, not a list",
        "clusters/d/values-gpu-scheduler-check.yaml: not YAML",
        "clusters/values-gpu-scheduler.yaml: clusters/ holds one directory per cluster",
    ]
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(f"check-cluster-values: {start}"), line


def test_a_platforms_values_folder_outside_the_checkout_is_checked_against_its_charts(tmp_path):
    """What docs/install.md tells users to run on their own values repository."""
    root = checkout(tmp_path / "checkout", {})
    platform = tmp_path / "platform" / "gpu"
    for path, text in {
        "prod-gpu/values-gpu-scheduler.yaml": "a: 1\n",
        "prod-gpu/values-gpu-schedular-check.yaml": "a: 1\n",
    }.items():
        (platform / path).parent.mkdir(parents=True, exist_ok=True)
        (platform / path).write_text(text)
    result = check(root, platform)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "check-cluster-values: gpu/prod-gpu/values-gpu-schedular-check.yaml: Argo CD never reads this file; "
        "did you mean values-gpu-scheduler-check.yaml?"
    ]

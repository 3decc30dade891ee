"""docs/reference.md says what the code does: its flags and metrics are written from the code
(`make reference`), and each annotation, label and Event reason it lists is one the code uses."""

from __future__ import annotations

import re
import sys

import pytest
from commands import run

from .conftest import REPO

pytestmark = pytest.mark.delivery

PAGE = REPO / "docs" / "reference.md"


def _section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _first_column_names(section: str) -> set[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def _product_code() -> str:
    return "\n".join(path.read_text() for path in sorted((REPO / "apps").glob("*/gpu_scheduler*/**/*.py")))


def test_the_flags_and_metrics_on_the_page_are_what_the_code_says():
    result = run([sys.executable, "scripts/reference.py", "--check"], cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_every_flag_of_every_subcommand_is_on_the_page():
    import argparse

    from gpu_scheduler.cli import build_parser

    page = PAGE.read_text()
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert len(subcommands) >= 7
    for name, sub in subcommands.items():
        assert f"### `gpu-scheduler {name}`" in page
        for flag in set(re.findall(r"^  (--[a-z0-9-]+)", sub.format_help(), re.M)) - {"--help"}:
            assert f"`{flag}`" in page, f"{name} {flag}"


@pytest.mark.parametrize("title", ["Annotations and labels", "Events and the PodScheduled condition"])
def test_each_listed_name_is_one_the_code_uses(title: str):
    code = _product_code()
    names = _first_column_names(_section(title))
    assert len(names) >= 4
    unused = sorted(name for name in names if f'"{name}"' not in code)
    assert not unused, f"docs/reference.md lists names no product code uses: {unused}"

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


def _commands(parser, path=()):
    """(words after `gpu-scheduler`, parser) of every command, commands of commands too
    (`map validate`, `map generate`)."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def _command_section(page: str, words: tuple[str, ...]) -> str:
    heading = f"### `gpu-scheduler {' '.join(words)}`"
    assert heading in page, f"docs/reference.md has no section {heading}"
    start = page.index(heading)
    end = page.find("\n#", start + 1)
    return page[start : end if end > 0 else None]


def test_every_flag_of_every_subcommand_is_in_its_section():
    # Independent of scripts/reference.py: the flags argparse itself prints in each
    # command's --help, each looked for in that command's own section (a --kubeconfig
    # documented for another command does not count).
    from gpu_scheduler.cli import build_parser

    page = PAGE.read_text()
    commands = list(_commands(build_parser()))
    assert len(commands) >= 9 and ("map", "generate") in [words for words, _ in commands]
    for words, parser in commands:
        section = _command_section(page, words)
        flags = set(re.findall(r"^  (-{1,2}[a-zA-Z0-9][a-z0-9-]*)", parser.format_help(), re.M)) - {"-h", "--help"}
        for flag in flags:
            assert f"`{flag}`" in section, f"gpu-scheduler {' '.join(words)} {flag}"


@pytest.mark.parametrize("title", ["Annotations and labels", "Events and the PodScheduled condition"])
def test_each_listed_name_is_one_the_code_uses(title: str):
    code = _product_code()
    names = _first_column_names(_section(title))
    assert len(names) >= 4
    unused = sorted(name for name in names if f'"{name}"' not in code)
    assert not unused, f"docs/reference.md lists names no product code uses: {unused}"

"""`make help`: the user's way in first, development next, the offline machinery apart."""

from __future__ import annotations

import re

import pytest
from commands import run

from .conftest import REPO

pytestmark = pytest.mark.delivery

TARGET = re.compile(r"^([a-z][a-z0-9-]+):.*##(dev|offline)? ", re.M)


def groups() -> dict[str, list[str]]:
    """Group title -> its targets, in the order printed."""
    result = run(["make", "--no-print-directory", "help"], cwd=REPO)
    assert result.returncode == 0, result.stderr
    found: dict[str, list[str]] = {}
    title = None
    for line in result.stdout.splitlines():
        if line and not line.startswith(" "):
            title = line
            found[title] = []
        elif line.strip():
            found[title].append(line.split()[0])
    return found


def test_make_help_starts_with_demo_and_test_and_keeps_the_offline_machinery_apart():
    listed = groups()
    titles = list(listed)

    assert titles[0].startswith("Try it and use it")
    assert listed[titles[0]][:7] == ["demo", "test", "kind-up", "e2e", "argocd-e2e", "report", "kind-down"]
    assert titles[-1].startswith("Machinery for machines without internet")
    assert {"kind-node-image", "argocd-images", "control-plane"} <= set(listed[titles[-1]])
    assert not {"demo", "test", "e2e", "kind-up"} & set(listed[titles[-1]])


def test_every_documented_target_is_listed_exactly_once():
    makefiles = [REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk"))]
    documented = sorted(m[0] for path in makefiles for m in TARGET.findall(path.read_text()))
    printed = sorted(target for targets in groups().values() for target in targets)

    assert printed == documented

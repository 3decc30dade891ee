"""CHANGELOG.md keeps the Keep a Changelog shape users and tools read: an Unreleased section
first, then one section per release, newest first, each with its date; changes under the
format's own headings, and what a user must do on `helm upgrade` under Upgrading (which says
so when there is nothing to do)."""

from __future__ import annotations

import re

import pytest
import yaml

from .conftest import REPO, SCHEDULER_CHART

pytestmark = pytest.mark.delivery

CHANGELOG = REPO / "CHANGELOG.md"
# Keep a Changelog 1.1.0's kinds of change, and ours: what to do on helm upgrade.
KINDS = {"Upgrading", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
RELEASE = re.compile(r"\[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})")


def sections(text: str) -> list[tuple[str, list[str]]]:
    """(level-2 heading, its level-3 headings) in order."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("## "):
            found.append((line[3:].strip(), []))
        elif line.startswith("### "):
            assert found, f"{line!r} before any version"
            found[-1][1].append(line[4:].strip())
    return found


def test_unreleased_comes_first_and_says_what_an_upgrade_needs():
    text = CHANGELOG.read_text()
    found = sections(text)

    assert text.startswith("# Changelog\n")
    assert found and found[0][0] == "[Unreleased]", [s for s, _ in found]
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    assert "### Upgrading" in unreleased
    assert "helm upgrade" in unreleased or "Nothing to do" in unreleased


def test_every_section_is_a_dated_release_or_unreleased_with_known_kinds():
    found = sections(CHANGELOG.read_text())
    releases = []
    for heading, kinds in found:
        assert heading == "[Unreleased]" or RELEASE.fullmatch(heading), heading
        assert set(kinds) <= KINDS, (heading, set(kinds) - KINDS)
        assert len(kinds) == len(set(kinds)), (heading, kinds)
        if m := RELEASE.fullmatch(heading):
            releases.append(tuple(int(n) for n in m.group(1).split(".")))
    # Newest first.
    assert releases == sorted(releases, reverse=True)


def test_the_charts_version_is_unreleased_or_has_its_section():
    # A release tag sets the charts' version (scripts/version.py); the changelog must not
    # claim that version was released on a date while the charts still say they are it
    # and differ. Either its section exists, or it is still to come under Unreleased.
    version = yaml.safe_load((SCHEDULER_CHART / "Chart.yaml").read_text())["version"]
    text = CHANGELOG.read_text()
    assert f"## [{version}] - " in text or version in text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]


def test_links_lead_to_files_that_exist():
    for target in re.findall(r"\]\((?!https?://)([^)#]+)", CHANGELOG.read_text()):
        assert (REPO / target).exists(), target

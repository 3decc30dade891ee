"""Every page states the supported Kubernetes versions one way: the range from the oldest the
charts accept (their kubeVersion) to the one every test runs (cluster/local/go.mod), written
"Kubernetes 1.35-1.37". The docs once said it three ways (1.30+, 1.35+, 1.35-1.37); a page
that states another range, or another floor, fails here.

A feature of a newer minor inside the range ("policies on 1.36+") is no claim of support and
is allowed; an "X.Y+" or "X.Y or newer" at or below the floor (or above the newest) is: it
tells a user a version works that the charts refuse, or that nothing tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .conftest import CHECK_CHART, REPO, SCHEDULER_CHART

pytestmark = pytest.mark.delivery

# What users read: the README, the changelog, docs/ (not its dated logs), the charts' own words.
PAGES = sorted(
    {
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        *(p for p in (REPO / "docs").rglob("*.md") if "logs" not in p.relative_to(REPO / "docs").parts),
        *(REPO / "charts").glob("*/values.yaml"),
        *(REPO / "charts").glob("*/Chart.yaml"),
        *(REPO / "charts").glob("*/values.schema.json"),
    }
)
# A version, whole: "1.35" never read as "1.3".
V = r"v?(\d+)\.(\d+)(?:\.\d+)?(?!\d)"
# "Kubernetes 1.35-1.37", "Kubernetes 1.35 to 1.37": a range, which must be the supported one.
RANGE = re.compile(rf"Kubernetes\s+{V}\s*(?:-|–|—|\sto\s)\s*{V}")
# "Kubernetes 1.30+", "on 1.36+", "Kubernetes 1.30 or newer": a floor, inside the range or
# none. A bare "X.Y+" counts after "on" only: Go 1.26+ and TLS 1.2+ are other versions.
FLOOR = re.compile(rf"(?:Kubernetes\s+{V}\s*(?:\+|or newer|or later|and newer|and later)|\bon\s+(1)\.(\d+)\+)")
# "Needs Kubernetes 1.35", "requires Kubernetes 1.35" (not followed by a range): the floor.
NEEDS = re.compile(rf"(?i:needs|requires|supports?)\s+Kubernetes\s+{V}(?!\s*(?:-|–|—|\sto\s)\s*\d)")


def supported() -> tuple[tuple[int, int], tuple[int, int]]:
    floors = set()
    for chart in (SCHEDULER_CHART, CHECK_CHART):
        kube_version = yaml.safe_load((chart / "Chart.yaml").read_text())["kubeVersion"]
        floors.add(tuple(int(n) for n in re.fullmatch(r">=(\d+)\.(\d+)\.0-0", kube_version).groups()))
    assert len(floors) == 1, f"the charts accept different Kubernetes versions: {floors}"
    go_mod = (REPO / "cluster" / "local" / "go.mod").read_text()
    newest = tuple(int(n) for n in re.search(r"^\s*k8s\.io/kubernetes v(\d+)\.(\d+)\.", go_mod, re.M).groups())
    return floors.pop(), newest


def statements(text: str) -> list[str]:
    """Every claim of a range or floor the page makes that is not the supported range."""
    (low, high) = supported()
    wrong = []
    for m in RANGE.finditer(text):
        if (int(m[1]), int(m[2])) != low or (int(m[3]), int(m[4])) != high:
            wrong.append(m[0])
    for m in FLOOR.finditer(text):
        major, minor = (m[1], m[2]) if m[1] else (m[3], m[4])
        # At the floor or below: an open-ended statement of support ("1.35+" says 1.38 too).
        if not low < (int(major), int(minor)) <= high:
            wrong.append(m[0])
    for m in NEEDS.finditer(text):
        if (int(m[1]), int(m[2])) != low:
            wrong.append(m[0])
    return wrong


def test_the_supported_range_is_the_charts_floor_to_the_tested_version():
    assert supported() == ((1, 35), (1, 37))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_states_another_supported_range(page: Path):
    assert not statements(page.read_text()), f"{page.relative_to(REPO)} says {statements(page.read_text())}"


def test_the_install_pages_state_the_range():
    for page in (REPO / "README.md", REPO / "docs" / "install.md"):
        assert "Kubernetes 1.35-1.37" in page.read_text(), page


@pytest.mark.parametrize(
    "claim",
    [
        "Needs Kubernetes 1.30 or newer (webhook matchConditions)",
        "Kubernetes 1.35-1.36 are supported",
        "Helm (Kubernetes 1.35+)",
        "the ValidatingAdmissionPolicy (Kubernetes 1.30+)",
        "requires Kubernetes 1.34",
        "works on 1.34+",
    ],
)
def test_each_way_the_docs_once_drifted_is_caught(claim):
    assert statements(claim), claim


@pytest.mark.parametrize(
    "fine",
    [
        "Kubernetes 1.35-1.37: the charts refuse older",
        "admission by CEL policy on 1.36+",
        "kubelet refuses cgroup v1 since Kubernetes 1.35",
        "helm 4.1+ and kubectl 1.36–1.38",
        "Python 3.11+ and Go 1.26+, TLS 1.2+",
        "Needs Kubernetes 1.35-1.37 (the charts refuse older)",
    ],
)
def test_features_within_the_range_and_other_tools_are_no_claim(fine):
    assert not statements(fine), fine

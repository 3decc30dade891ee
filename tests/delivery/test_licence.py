"""The project is Apache-2.0, and says so wherever a user or a tool looks for it: LICENSE at
the root, each Python package's metadata (PEP 639: a wheel's License-Expression), and each
chart's Chart.yaml (Artifact Hub's artifacthub.io/license annotation, as Chart.yaml has no
licence field). One place saying another licence, or none, is a package nobody may adopt."""

from __future__ import annotations

import tomllib

import pytest
import yaml

from .conftest import CHECK_CHART, REPO, SCHEDULER_CHART

pytestmark = pytest.mark.delivery

SPDX = "Apache-2.0"
# The root pyproject.toml is a uv workspace, no package: it has no [project] to carry one.
PACKAGES = [REPO / "apps" / "scheduler", REPO / "apps" / "check"]


def test_licence_file_is_the_apache_license_2_0_unchanged():
    text = (REPO / "LICENSE").read_text()

    # The standard text: its title, its last section and the appendix telling users how to
    # apply it. A truncated or edited copy loses one of them.
    assert "Apache License\n" in text and "Version 2.0, January 2004" in text
    assert "9. Accepting Warranty or Additional Liability." in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert 'Licensed under the Apache License, Version 2.0 (the "License");' in text


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_python_package_declares_the_licence(package):
    pyproject = tomllib.loads((package / "pyproject.toml").read_text())

    assert pyproject["project"]["license"] == SPDX
    # A licence table or a classifier beside the expression is refused by PEP 639 builders.
    assert not any(c.startswith("License ::") for c in pyproject["project"].get("classifiers", []))
    # setuptools reads an SPDX string from 77 on; an older backend fails the build.
    assert "setuptools>=77" in pyproject["build-system"]["requires"]


def test_the_workspace_root_is_no_package():
    # If it ever becomes one, it must carry the licence too: this test then says so.
    assert "project" not in tomllib.loads((REPO / "pyproject.toml").read_text())


@pytest.mark.parametrize("chart", [SCHEDULER_CHART, CHECK_CHART], ids=lambda c: c.name)
def test_every_chart_declares_the_licence(chart):
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())

    assert meta["annotations"]["artifacthub.io/license"] == SPDX

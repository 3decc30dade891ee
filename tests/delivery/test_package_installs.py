"""Debian packages are installed by our scripts only when asked (scripts/lib.sh apt_install).

A user's machine is theirs: as root, without CI=true or INSTALL_PACKAGES=1, a
script that misses a package stops with one line naming it and how to let
the script install it; asked, it runs apt-get. apt-get here is a fake that
records its arguments, so nothing is installed by the test.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from prerequisites import missing

from .conftest import REPO

pytestmark = pytest.mark.delivery


@pytest.fixture
def as_root() -> None:
    """apt_install reads bash's own EUID (no environment can fake it): these tests need root,
    which CI's jobs and make test's machines run as."""
    if os.geteuid() != 0:
        missing("apt_install is only ever allowed as root: run these tests as root (CI does)")


@pytest.fixture
def fake_apt(tmp_path, as_root):
    calls = tmp_path / "apt-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("apt-get", "apt-cache"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        (bin_dir / tool).chmod(0o755)
    calls.touch()
    return bin_dir, calls


def install(fake_apt, tmp_path, **env_overrides) -> subprocess.CompletedProcess:
    bin_dir, _ = fake_apt
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "INSTALL_PACKAGES")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", CACHE_DIR=str(tmp_path / "cache"), **env_overrides)
    script = f'source "{REPO}/scripts/lib.sh"; apt_install "the test needs it" some-package; echo installed'
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30, check=False)


def test_not_asked_it_stops_with_one_line_and_installs_nothing(fake_apt, tmp_path):
    result = install(fake_apt, tmp_path)

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "ERROR: the test needs it: install some-package (Debian/Ubuntu: apt-get install some-package), "
        "or run again as root with INSTALL_PACKAGES=1 to let this script install it"
    ]
    assert fake_apt[1].read_text() == ""


@pytest.mark.parametrize("asked", [{"INSTALL_PACKAGES": "1"}, {"CI": "true"}])
def test_asked_it_installs_the_package(fake_apt, tmp_path, asked):
    result = install(fake_apt, tmp_path, **asked)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "installed"
    assert "apt-get install -y -qq --no-install-recommends some-package" in fake_apt[1].read_text()


def test_no_script_runs_apt_get_install_outside_the_asked_for_paths():
    # docker-engine.sh has its own switch (CI=true or DOCKER_AUTOSTART=1, as root).
    allowed = {"lib.sh", "docker-engine.sh"}
    found = [
        f"{path.name}:{number}"
        for path in sorted((REPO / "scripts").glob("*.sh"))
        if path.name not in allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"^\s*[^#]*\bapt-get (install|update)\b", line) and "Debian/Ubuntu:" not in line
    ]
    assert not found, f"apt-get run directly (use apt_install from lib.sh): {found}"

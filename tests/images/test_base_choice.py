"""Which Python base scripts/images.sh picks, and the line that says why (no Docker needed).

A fake `docker` first on PATH answers `image inspect` for the references in
FAKE_PRESENT, succeeds `pull` for those in FAKE_PULLABLE, and records every
call, so each branch of the decision runs for real in the script.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from .conftest import IMAGES_SCRIPT, REPO

UPSTREAM = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (REPO / "apps/scheduler/Dockerfile").read_text(), re.M).group(1)
DEBIAN_BASE_SCRIPT = REPO / "scripts" / "debian-base.sh"

FAKE_DOCKER = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_CALLS"
case "$1 $2" in
  "info "*) exit 0 ;;
  "image inspect")
    for ref in $FAKE_PRESENT; do [[ "$ref" == "${@: -1}" ]] && { echo '[{}]'; exit 0; }; done
    echo "Error: No such image: ${@: -1}" >&2; exit 1 ;;
  "tag "*) exit 0 ;;
  "pull "*)
    for ref in $FAKE_PULLABLE; do [[ "$ref" == "${@: -1}" ]] && exit 0; done
    echo 'Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: no such host' >&2; exit 1 ;;
esac
echo "fake docker: unexpected call: $*" >&2
exit 99
"""


@pytest.fixture
def fake_docker(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    calls = tmp_path / "calls"

    def choose(present=(), pullable=(), **env) -> tuple[subprocess.CompletedProcess, list[str]]:
        calls.write_text("")
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON_IMAGE", "IMAGE_PLATFORM"))}
        environ |= {
            "PATH": f"{bin_dir}:{environ['PATH']}",
            "FAKE_CALLS": str(calls),
            "FAKE_PRESENT": " ".join(present),
            "FAKE_PULLABLE": " ".join(pullable),
            "CACHE_DIR": str(tmp_path / "cache"),
            **env,
        }
        result = subprocess.run(
            ["bash", str(IMAGES_SCRIPT), "base"], capture_output=True, text=True, env=environ, timeout=60, check=False
        )
        return result, calls.read_text().splitlines()

    return choose


def debian_base_ref() -> str:
    script = DEBIAN_BASE_SCRIPT.read_text()
    digest = subprocess.run(["sha256sum", str(DEBIAN_BASE_SCRIPT)], capture_output=True, text=True).stdout[:12]
    assert "gpu-scheduler-debian" in script
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[os.uname().machine]
    return f"gpu-scheduler-debian:bookworm-{arch}-{digest}"


def test_python_image_wins_and_nothing_is_pulled(fake_docker):
    result, calls = fake_docker(PYTHON_IMAGE="registry.example.com/python:3.11-custom")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "registry.example.com/python:3.11-custom"
    assert "base registry.example.com/python:3.11-custom (set by PYTHON_IMAGE)" in result.stderr
    assert not [c for c in calls if c.startswith("pull")]


def test_the_upstream_default_is_used_when_present(fake_docker):
    result, calls = fake_docker(present=[UPSTREAM])

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == UPSTREAM
    assert f"base {UPSTREAM} (the Dockerfiles' default, present locally)" in result.stderr
    assert not [c for c in calls if c.startswith("pull")]


def test_the_upstream_default_is_pulled_when_missing(fake_docker):
    result, calls = fake_docker(pullable=[UPSTREAM])

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == UPSTREAM
    assert f"base {UPSTREAM} (the Dockerfiles' default, pulled)" in result.stderr
    assert [c for c in calls if c.startswith("pull")] == [f"pull --quiet {UPSTREAM}"]


def test_without_a_registry_the_offline_base_is_used_and_the_log_says_why(fake_docker):
    # The Debian base and the Python base on it exist (built before): nothing is built.
    offline = "gpu-scheduler-python:3.11-bookworm-"
    first, first_calls = fake_docker(present=[debian_base_ref()])
    made = re.search(rf"{re.escape(offline)}[0-9a-f]{{12}}", first.stderr)
    assert made, first.stderr  # the fake cannot build it, but the script names it first
    assert [c for c in first_calls if c.startswith("build") and f"-t {made.group(0)} " in c]

    result, calls = fake_docker(present=[debian_base_ref(), made.group(0)])

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == made.group(0)
    assert f"{UPSTREAM} is not present and cannot be pulled (" in result.stderr
    assert "no such host" in result.stderr
    assert f"base {made.group(0)} (made offline from Debian's python3" in result.stderr
    assert not [c for c in calls if c.startswith("build")]


FOREIGN = "linux/arm64" if os.uname().machine == "x86_64" else "linux/amd64"
FOREIGN_TAG = f"gpu-scheduler-python:upstream-{UPSTREAM.removeprefix('python:')}-{FOREIGN.removeprefix('linux/')}"


def test_another_platforms_upstream_base_is_pulled_for_it_under_a_tag_of_its_own(fake_docker):
    """Docker 20.10 keeps one image per tag: the other platform's pull must not leave the
    upstream tag naming it, or this machine's next build would use it."""
    result, calls = fake_docker(present=[UPSTREAM], pullable=[UPSTREAM], IMAGE_PLATFORM=FOREIGN)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == FOREIGN_TAG
    assert [c for c in calls if c.startswith("pull")] == [f"pull --quiet --platform {FOREIGN} {UPSTREAM}"]
    tags = [c for c in calls if c.startswith("tag")]
    # The pulled image under its own tag, then this machine's image (its id) under the upstream tag again.
    assert tags[0] == f"tag {UPSTREAM} {FOREIGN_TAG}" and tags[1].endswith(f" {UPSTREAM}"), tags


def test_a_base_variable_for_the_platform_wins_over_python_image(fake_docker):
    result, _ = fake_docker(
        PYTHON_IMAGE="registry.example.com/python:amd64",
        PYTHON_IMAGE_ARM64="registry.example.com/python:arm64",
        IMAGE_PLATFORM="linux/arm64",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "registry.example.com/python:arm64"
    assert "(set by PYTHON_IMAGE_ARM64)" in result.stderr


def test_a_platform_other_than_amd64_or_arm64_is_refused(fake_docker):
    result, _ = fake_docker(IMAGE_PLATFORM="linux/s390x")

    assert result.returncode != 0
    assert "IMAGE_PLATFORM=linux/s390x: choose linux/amd64 or linux/arm64" in result.stderr


def test_without_a_docker_daemon_it_says_what_to_do(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    (bin_dir / "docker").chmod(0o755)
    environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CACHE_DIR": str(tmp_path / "cache")}

    result = subprocess.run(["bash", str(IMAGES_SCRIPT)], capture_output=True, text=True, env=environ, check=False)

    assert result.returncode != 0
    assert "docker is installed but its daemon does not answer" in result.stderr
    assert "'make images'" in result.stderr

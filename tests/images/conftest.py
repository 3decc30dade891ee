"""The images as users get them: built by scripts/images.sh, run with `docker run`.

Tests marked `images` need a Docker engine. Under CI=true they fail when none
answers; elsewhere they are skipped with a message that says what to install.
The images are built (or found up to date) once per session by the same
script `make images` runs, so `pytest -m images` works on its own.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prerequisites import missing

REPO = Path(__file__).resolve().parents[2]
IMAGES_SCRIPT = REPO / "scripts" / "images.sh"
INSTALL_DOCKER = "install Docker (https://docs.docker.com/engine/install/) and start it"


def docker(
    *args: str, stdin: str | None = None, timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess:
    """`docker ARGS`, output captured as text; a non-zero exit fails the test only with check."""
    result = subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check:
        assert result.returncode == 0, f"docker {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
    return result


def _no_docker(reason: str) -> None:
    missing(f"{reason}: the image tests need a Docker engine; {INSTALL_DOCKER}")


@pytest.fixture(scope="session")
def docker_engine() -> None:
    if shutil.which("docker") is None:
        _no_docker("docker is not installed")
    info = docker("info", "--format", "{{.ServerVersion}}", timeout=30)
    if info.returncode != 0:
        _no_docker(f"no Docker engine answers ('docker info': {info.stderr.strip()[:300]})")


@dataclass(frozen=True)
class Images:
    scheduler: str
    check: str


@pytest.fixture(scope="session")
def images(docker_engine) -> Images:
    """Both images, built by scripts/images.sh unless they are up to date."""
    result = subprocess.run(
        ["bash", str(IMAGES_SCRIPT), "build"], capture_output=True, text=True, timeout=1800, check=False
    )
    assert result.returncode == 0, f"scripts/images.sh failed:\n{result.stderr[-5000:]}"
    scheduler, check = result.stdout.split()
    return Images(scheduler=scheduler, check=check)


@contextmanager
def running(*run_args: str) -> Iterator[str]:
    """A detached container, removed afterwards whatever happens; yields its name."""
    name = f"gs-test-{uuid.uuid4().hex[:10]}"
    docker("run", "--detach", "--name", name, *run_args, check=True)
    try:
        yield name
    finally:
        docker("rm", "--force", name)

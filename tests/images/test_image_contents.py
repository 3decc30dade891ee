"""What both images hold, and what scripts/images.sh promises about them."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib

import pytest

from .conftest import IMAGES_SCRIPT, REPO, docker

pytestmark = pytest.mark.images

APPS = {"scheduler": "gpu-scheduler", "check": "gpu-scheduler-check"}
# Asked of the image's own Python: who runs, what is importable, what is on PATH.
PROBE = """
import importlib.util, json, os, shutil
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "modules": {m: importlib.util.find_spec(m) is not None for m in ("pip", "setuptools", "wheel", "ensurepip")},
    "programs": {p: shutil.which(p) for p in ("pip", "pip3", "gcc", "cc", "c++", "clang", "make")},
}))
"""


def image_of(images, app: str) -> str:
    return getattr(images, app)


@pytest.mark.parametrize("app", APPS)
def test_runs_as_uid_1000_without_pip_setuptools_or_a_compiler(images, app):
    result = docker("run", "--rm", "--read-only", "--entrypoint", "python3", image_of(images, app), "-c", PROBE)

    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert (found["uid"], found["gid"]) == (1000, 1000)
    assert found["modules"] == {"pip": False, "setuptools": False, "wheel": False, "ensurepip": False}
    assert found["programs"] == dict.fromkeys(found["programs"])


@pytest.mark.parametrize("app", APPS)
def test_oci_labels_name_the_source_revision_and_version(images, app):
    inspected = json.loads(docker("image", "inspect", image_of(images, app), check=True).stdout)[0]
    labels = inspected["Config"]["Labels"]
    version = tomllib.loads((REPO / "apps" / app / "pyproject.toml").read_text())["project"]["version"]

    assert labels["org.opencontainers.image.title"] == APPS[app]
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.source"].startswith("https://")
    revision = labels["org.opencontainers.image.revision"]
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", revision), revision
    # A commit of this repository, not a made-up string.
    assert subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", revision.removesuffix("-dirty")]).returncode == 0
    assert re.fullmatch(r"[0-9a-f]{16}", labels["dev.gpu-scheduler.inputs"])
    assert inspected["Config"]["User"] == "1000:1000"


def test_a_second_run_with_unchanged_inputs_rebuilds_nothing(images):
    before = {app: docker("image", "inspect", "--format", "{{.Id}}", image_of(images, app)).stdout for app in APPS}

    result = subprocess.run(["bash", str(IMAGES_SCRIPT)], capture_output=True, text=True, timeout=600, check=False)

    assert result.returncode == 0, result.stderr
    for app in APPS:
        assert f"images: {image_of(images, app)} is up to date" in result.stderr
    assert "docker build" not in result.stderr
    after = {app: docker("image", "inspect", "--format", "{{.Id}}", image_of(images, app)).stdout for app in APPS}
    assert after == before

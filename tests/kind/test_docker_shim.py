"""cluster/kind/docker-shim/docker: what kind's docker calls become where --privileged fails.

The real docker is replaced by a fake one that prints the arguments it got,
so this runs anywhere (no Docker, no cluster).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from .conftest import REPO

SHIM_DIR = REPO / "cluster" / "kind" / "docker-shim"


@pytest.fixture
def shim(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "docker").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (real / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{SHIM_DIR}{os.pathsep}{real}{os.pathsep}{os.environ['PATH']}"}

    def call(*args: str) -> list[str]:
        result = subprocess.run(["docker", *args], capture_output=True, text=True, env=env, check=False, timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    return call


def test_run_gets_explicit_capabilities_instead_of_privileged(shim):
    args = shim("run", "--name", "n", "--hostname", "n", "--privileged", "--security-opt", "seccomp=unconfined", "img")

    assert "--privileged" not in args
    assert args[:5] == ["run", "--name", "n", "--hostname", "n"]
    assert args[-3:] == ["--security-opt", "seccomp=unconfined", "img"]
    i = args.index("--cap-add")
    assert args[i : i + 8] == [
        "--cap-add",
        "ALL",
        "--cap-drop",
        "SYS_RESOURCE",
        "--security-opt",
        "systempaths=unconfined",
        "--device-cgroup-rule",
        "a *:* rwm",
    ]


def test_exec_drops_privileged_and_keeps_the_command(shim):
    assert shim("exec", "--privileged", "-i", "node", "ctr", "images", "import", "-") == [
        "exec",
        "-i",
        "node",
        "ctr",
        "images",
        "import",
        "-",
    ]


def test_arguments_after_the_image_and_other_commands_pass_unchanged(shim):
    assert shim("run", "--rm", "img", "echo", "--privileged") == ["run", "--rm", "img", "echo", "--privileged"]
    assert shim("ps", "-a", "--privileged") == ["ps", "-a", "--privileged"]

"""The fake NVML library, built once per session, and pynvml run against it.

pynvml loads `libnvidia-ml.so.1` by name, and the dynamic loader reads
LD_LIBRARY_PATH only when a process starts: every check runs Python in a
subprocess whose LD_LIBRARY_PATH is the build folder and whose
FAKE_NVML_LAYOUT names the layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from commands import run, tail

HERE = Path(__file__).resolve().parent
LAYOUTS = HERE / "layouts"
BUILD = HERE / "build.sh"
SOURCE = HERE / "fake_nvml.c"
LIBRARY = "libnvidia-ml.so.1"
LAYOUT_NAMES = ("node1", "node2", "node3", "node4")


def layout_path(name: str) -> Path:
    return LAYOUTS / f"{name}.json"


def load_layout(name: str) -> dict:
    return json.loads(layout_path(name).read_text())


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the freshly built libnvidia-ml.so.1."""
    out = tmp_path_factory.mktemp("fake-nvml")
    result = run(["bash", BUILD, out], timeout=180)
    assert result.returncode == 0, tail(result)
    assert result.stdout.splitlines()[-1] == str(out / LIBRARY), tail(result)
    return out


PythonRunner = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def run_python(fake_nvml_dir: Path) -> PythonRunner:
    """run_python(code, layout=None, log=None): Python `code` in a process bound to the fake library.

    layout is a path for FAKE_NVML_LAYOUT (left unset when None), log one for FAKE_NVML_LOG.
    """

    def runner(code: str, layout: Path | str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_LAYOUT", "FAKE_NVML_LOG")}
        env["LD_LIBRARY_PATH"] = str(fake_nvml_dir)
        if layout is not None:
            env["FAKE_NVML_LAYOUT"] = str(layout)
        if log is not None:
            env["FAKE_NVML_LOG"] = str(log)
        return run([sys.executable, "-c", code], timeout=60, env=env)

    return runner


@pytest.fixture(scope="session")
def python_json(run_python: PythonRunner) -> Callable[..., object]:
    """Like run_python, for code that prints one JSON document: that document, the run having succeeded."""

    def runner(code: str, layout: Path | str | None = None) -> object:
        result = run_python(code, layout)
        assert result.returncode == 0, tail(result)
        return json.loads(result.stdout)

    return runner

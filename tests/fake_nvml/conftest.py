"""The fake NVML library, built once per session, and pynvml run against it.

pynvml loads `libnvidia-ml.so.1` by name, and the dynamic loader reads
LD_LIBRARY_PATH only when a process starts: every check runs Python in a
subprocess whose LD_LIBRARY_PATH is the build folder and whose
FAKE_NVML_LAYOUT names the layout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from commands import run, tail

from . import library


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build of its own for these tests (test_fake_nvml rebuilds it in place); other suites
    take the root conftest's `fake_nvml`."""
    return library.build(tmp_path_factory.mktemp("fake-nvml"))


PythonRunner = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def run_python(fake_nvml_dir: Path) -> PythonRunner:
    """run_python(code, layout=None, log=None): Python `code` in a process bound to the fake library.

    layout is a path for FAKE_NVML_LAYOUT (left unset when None), log one for FAKE_NVML_LOG.
    """

    def runner(code: str, layout: Path | str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
        return run([sys.executable, "-c", code], timeout=60, env=library.environment(fake_nvml_dir, layout, log))

    return runner


@pytest.fixture(scope="session")
def python_json(run_python: PythonRunner) -> Callable[..., object]:
    """Like run_python, for code that prints one JSON document: that document, the run having succeeded."""

    def runner(code: str, layout: Path | str | None = None) -> object:
        result = run_python(code, layout)
        assert result.returncode == 0, tail(result)
        return json.loads(result.stdout)

    return runner

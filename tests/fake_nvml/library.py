"""The fake libnvidia-ml.so.1: where its source and layouts are, and its one builder.

Every test that runs pynvml (or an image) against it takes the root conftest's `fake_nvml`
fixture, which builds it with build() once per session.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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


def environment(
    library_dir: Path, layout: Path | str | None = None, log: Path | None = None, drop: tuple[str, ...] = ()
) -> dict[str, str]:
    """This process's environment for a process bound to the fake library of `library_dir`
    (the loader reads LD_LIBRARY_PATH only at a process's start): FAKE_NVML_LAYOUT and
    FAKE_NVML_LOG set only when given, and the variables `drop` names left out."""
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_LAYOUT", "FAKE_NVML_LOG", *drop)}
    env["LD_LIBRARY_PATH"] = str(library_dir)
    if layout is not None:
        env["FAKE_NVML_LAYOUT"] = str(layout)
    if log is not None:
        env["FAKE_NVML_LOG"] = str(log)
    return env


def build(out_dir: Path) -> Path:
    """build.sh into `out_dir`; returns `out_dir`, the folder to put on LD_LIBRARY_PATH (or to mount)."""
    result = run(["bash", BUILD, out_dir], timeout=300)
    assert result.returncode == 0, tail(result)
    assert result.stdout.splitlines()[-1] == str(out_dir / LIBRARY), tail(result)
    assert (out_dir / LIBRARY).is_file()
    # Readable by anyone: images run as uid 1000, and pytest's folders are the owner's only.
    out_dir.chmod(0o755)
    return out_dir

"""Build the fake libnvidia-ml.so.1 for a test that runs pynvml (or an image) against it."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAYOUTS = HERE / "layouts"


def build(out_dir: Path) -> Path:
    """build.sh into `out_dir`; returns the folder to put on LD_LIBRARY_PATH (or to mount)."""
    built = subprocess.run(["bash", str(HERE / "build.sh"), str(out_dir)], capture_output=True, text=True, timeout=180)
    assert built.returncode == 0, built.stderr
    # Readable by anyone: images run as uid 1000, and pytest's folders are the owner's only.
    out_dir.chmod(0o755)
    return Path(built.stdout.strip().splitlines()[-1]).parent

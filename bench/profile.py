"""BENCH_PROFILE=1 or gil: sample gpu-scheduler with py-spy during its runs, and name where its time goes.

py-spy attaches to the running process (no change to it) and writes
collapsed stacks ("frame;frame;frame count" per line); top_functions() turns
them into the functions that hold the most samples, by themselves and with
what they call. The flame graphs are left beside the report for a closer look.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

PY_SPY = Path(sys.executable).parent / "py-spy"
RATE = 100  # samples per second: cheap enough not to move the figures much
# The two views py-spy gives. ALL_THREADS samples every thread py-spy does not judge idle, and
# threads blocked in a TLS read or send often count: the wall-clock view. GIL samples only the
# thread holding the GIL, so the samples are where the Python CPU goes.
ALL_THREADS = "all"
GIL = "gil"


def view(setting: str) -> str:
    """The view a BENCH_PROFILE or --profile value asks for: "" (no profile), ALL_THREADS or GIL."""
    value = setting.strip().lower()
    if value in ("", "0"):
        return ""
    if value in ("1", ALL_THREADS):
        return ALL_THREADS
    if value == GIL:
        return GIL
    raise ValueError(f"{setting!r} is not a profile view: use 1 or {ALL_THREADS} (every busy thread), {GIL}, or 0")


def available() -> bool:
    return PY_SPY.exists() or shutil.which("py-spy") is not None


class Profiler:
    """py-spy record on one pid, in one view (ALL_THREADS or GIL), until that process exits."""

    def __init__(self, pid: int, out: Path, view: str = ALL_THREADS) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.view = view
        self._process = subprocess.Popen(
            [
                str(PY_SPY),
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(RATE),
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                *(["--gil"] if view == GIL else []),
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def finish(self, timeout: float = 30) -> str:
        """The collapsed stacks, once py-spy has seen the process exit and written them."""
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.terminate()
            self._process.wait(10)
        return self.out.read_text() if self.out.exists() else ""


def _frame_name(frame: str) -> str:
    # py-spy frames look like "function (path/to/module.py:123)"; the line number varies within a function.
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})" if path else name


def top_functions(collapsed: str, count: int = 15) -> dict:
    """The functions holding the most samples: by self time (the leaf frame) and inclusive."""
    own: Counter = Counter()
    inclusive: Counter = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        n = int(samples)
        # With --threads the first frame names the thread ("thread (0x...)"); it is not a function.
        frames = [_frame_name(f) for f in stack.split(";") if not f.startswith("thread (")]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        # Every thread starts in threading's bootstrap; listing it says nothing.
        for name in {f for f in frames if not f.endswith("(threading.py)")}:
            inclusive[name] += n

    def share(counter: Counter) -> list[dict]:
        return [{"function": name, "share": samples / total} for name, samples in counter.most_common(count)]

    return {"samples": total, "self": share(own) if total else [], "inclusive": share(inclusive) if total else []}

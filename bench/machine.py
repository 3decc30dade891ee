"""What the figures were measured on: the machine, its load, and the versions of everything,
each read from the binary that ran (`--version`) or from git, never typed."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from .paths import BIN, GPU_SCHEDULER, REPO

# What `gpu-scheduler webhook` serves with; runs recorded before 2026-11-28 say nothing: gunicorn.
WEBHOOK_SERVER = "granian"


def _first_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except OSError:
        return "not found"
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def git_commit(repo: Path) -> str:
    """The commit whose code ran, and whether tracked files differed from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=20
        )
        changed = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except OSError:
        return "unknown"
    if head.returncode != 0 or not head.stdout.strip():
        return "unknown"
    return head.stdout.strip() + (" with uncommitted changes" if changed.stdout.strip() else "")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


# A fixed piece of pure Python, timed: how fast this machine runs the interpreter, so that
# runs on different machines can be told apart (the same code's figures moved 2-4x between
# the machines of 2026-11-28 and 2026-12-01). Best of PROBE_REPEATS, in microseconds.
PROBE_STATEMENT = "sum(range(10000))"
PROBE_LOOPS, PROBE_REPEATS = 200, 5


def python_speed_us() -> float:
    """Microseconds per PROBE_STATEMENT on this machine, the best of PROBE_REPEATS timings."""
    import timeit

    best = min(timeit.repeat(PROBE_STATEMENT, number=PROBE_LOOPS, repeat=PROBE_REPEATS))
    return round(best / PROBE_LOOPS * 1e6, 1)


def describe() -> dict:
    return {
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python_probe_us": python_speed_us(),
        "python": platform.python_version(),
        "gpu_scheduler": _first_line([str(GPU_SCHEDULER), "--version"]),
        "webhook_server": WEBHOOK_SERVER,
        "commit": git_commit(REPO),
        "kube_apiserver": _first_line([str(BIN / "kube-apiserver"), "--version"]),
        "kube_scheduler": _first_line([str(BIN / "kube-scheduler"), "--version"]),
        "kwok": _first_line([str(BIN / "kwok"), "--version"]),
        "etcd": _first_line([str(BIN / "etcd"), "--version"]),
        "vegeta": _first_line([str(BIN / "vegeta"), "-version"]).removeprefix("Version: "),
    }

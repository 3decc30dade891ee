"""Waiting until the local control plane is quiet before a measured run.

After a run, kwok is still marking its pods Running and then handling their
deletion, and etcd compacts; on two cores that work would land in the next
run's window and be charged to the next runner. So before each run the
benchmark waits (up to a limit) until the control-plane processes of the
local cluster use little CPU.
"""

from __future__ import annotations

import time
from pathlib import Path

from .processes import cpu_seconds

QUIET_CORES = 0.5  # total CPU of etcd, apiserver, controller-manager and kwok, in cores
WINDOW_SECONDS = 1.0
TIMEOUT_SECONDS = 20.0


def control_plane_pids(cluster_dir: Path) -> list[int]:
    """The running processes kwokctl started for the clusters under cluster_dir (its pid files)."""
    pids = []
    for pid_file in sorted(cluster_dir.glob("clusters/*/pids/*.pid")):
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            pids.append(pid)
    return pids


def cores_used(pids: list[int], window: float = WINDOW_SECONDS) -> float:
    before = sum(cpu_seconds(p) for p in pids)
    time.sleep(window)
    return (sum(cpu_seconds(p) for p in pids) - before) / window


def wait_quiet(pids: list[int], timeout: float = TIMEOUT_SECONDS) -> tuple[float, float]:
    """Waits until the processes use under QUIET_CORES; returns (seconds waited, cores used last)."""
    started = time.monotonic()
    used = 0.0
    while pids and time.monotonic() - started < timeout:
        used = cores_used(pids)
        if used < QUIET_CORES:
            break
    return time.monotonic() - started, used

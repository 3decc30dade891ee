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


class ControlPlaneDown(Exception):
    """A process of the local control plane has exited; str() says which and what to do."""


def control_plane_processes(cluster_dir: Path) -> dict[str, int]:
    """The running processes kwokctl started for the clusters under cluster_dir (its pid
    files): name (kube-apiserver, etcd, ...) -> pid."""
    found = {}
    for pid_file in sorted(cluster_dir.glob("clusters/*/pids/*.pid")):
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            found[pid_file.stem] = pid
    return found


def check_alive(processes: dict[str, int], cluster_dir: Path) -> None:
    """Raises ControlPlaneDown when a process of the control plane has exited (kwokctl does not
    restart them: kube-controller-manager, for one, exits when it cannot renew its lease in time
    on an overloaded machine), since every later figure would be wrong."""
    gone = [f"{name} (pid {pid})" for name, pid in processes.items() if cpu_seconds(pid) is None]
    if gone:
        raise ControlPlaneDown(
            f"{', '.join(gone)} of the local cluster exited (logs: {cluster_dir}/clusters/*/logs/); "
            "restart the cluster (make local-down local-up) and run the bench again"
        )


def _total(pids: list[int]) -> float:
    return sum(cpu_seconds(p) or 0.0 for p in pids)


def cores_used(pids: list[int], window: float = WINDOW_SECONDS) -> float:
    before = _total(pids)
    time.sleep(window)
    return (_total(pids) - before) / window


def wait_quiet(
    pids: list[int], timeout: float = TIMEOUT_SECONDS, quiet_cores: float = QUIET_CORES
) -> tuple[float, float]:
    """Waits until the processes use under quiet_cores; returns (seconds waited, cores used last)."""
    started = time.monotonic()
    used = 0.0
    while pids and time.monotonic() - started < timeout:
        used = cores_used(pids)
        if used < quiet_cores:
            break
    return time.monotonic() - started, used

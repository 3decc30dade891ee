"""Waiting until the local control plane is back at rest before a measured run.

After a run, kwok is still marking its pods Running and then handling their
deletion, and etcd compacts; on two cores that work would land in the next
run's window and be charged to the next runner. So before each run the
benchmark waits (up to a limit) until the control-plane processes of the
local cluster use little CPU.

"Little" was a fixed 0.5 cores until 2026-12-07, about ten times the control
plane's rate at rest here (0.02-0.07 cores): a control plane still busy at
0.2-0.3 cores passed it at once. Right after the setup (100 nodes created, the
webhook registered) the first runner of round 1, always gpu-scheduler, so
measured an idle rate 2-5x the normal one and had 0.6-4.2 ms per pod too many
subtracted from its control plane's CPU (issue 47's review of the kept runs of
record). Now the bench learns the control plane's **baseline** (its rate at rest,
the lowest of BASELINE_SAMPLES windows taken after a discarded warm-up run,
measure.warm_up) and waits before each run until a window of the same length
as the idle measurement (cpuwork.IDLE_SECONDS) is within BASELINE_MARGIN_CORES
of it; a run that starts before (after TIMEOUT_SECONDS) says so.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from .processes import cpu_seconds

QUIET_CORES = 0.5  # total CPU of etcd, apiserver, controller-manager and kwok, in cores
WINDOW_SECONDS = 1.0
TIMEOUT_SECONDS = 20.0
# The baseline: the lowest of this many windows of BASELINE_WINDOW_SECONDS (the idle measurement's length).
BASELINE_SAMPLES = 5
BASELINE_WINDOW_SECONDS = 2.0
# How far above its baseline the control plane may be when a run starts (the rates of a control plane at
# rest vary by about this much from one 2 s window to the next here).
BASELINE_MARGIN_CORES = 0.05


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


def baseline_cores(
    pids: list[int], samples: int = BASELINE_SAMPLES, window: float = BASELINE_WINDOW_SECONDS, sample=None
) -> float:
    """The processes' rate at rest, in cores: the lowest of `samples` consecutive windows (a transient,
    such as a lease renewal or a compaction, lands in one window and is left out)."""
    sample = sample or cores_used
    return min(sample(pids, window) for _ in range(samples))


def wait_baseline(
    pids: list[int],
    baseline: float,
    timeout: float = TIMEOUT_SECONDS,
    margin: float = BASELINE_MARGIN_CORES,
    window: float = BASELINE_WINDOW_SECONDS,
    sample=None,
    clock=time.monotonic,
) -> tuple[float, float, bool]:
    """Waits until a window of the processes' CPU is within margin of baseline; returns (seconds
    waited, cores used in the last window, whether it got there before the timeout)."""
    sample = sample or cores_used
    started = clock()
    used = math.nan
    while pids and clock() - started < timeout:
        used = sample(pids, window)
        if used <= baseline + margin:
            return clock() - started, used, True
    return clock() - started, used, not pids

"""Processes the benchmark starts (schedulers, the webhook, the ceiling binder): start, wait, stop, RSS."""

from __future__ import annotations

import math
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

STOP_SECONDS = 20.0
_TICKS = os.sysconf("SC_CLK_TCK")


class ProcessError(Exception):
    pass


class Process:
    """One child process whose output goes to a log file; stopped by its own pid only."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self._popen: subprocess.Popen | None = None
        self._log_start = 0  # where this start's output begins in the (appended) log

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise ProcessError(f"{self.name} is not running")
        return self._popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self._log_start = log.tell()
            self._popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env
            )

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def wait_ready(self, ready: Callable[[], bool], timeout: float) -> float:
        """Polls ready() until it holds; returns the seconds it took. Fails with
        the log's tail if the process exits or the time runs out."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if not self.running():
                raise ProcessError(f"{self.name} exited with {self._popen.returncode}:\n{self.log_tail()}")
            try:
                if ready():
                    return time.monotonic() - started
            except OSError:
                pass  # not listening yet
            time.sleep(0.2)
        raise ProcessError(f"{self.name} was not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_SECONDS; returns the exit status."""
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGTERM)
            try:
                self._popen.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()
        code = self._popen.returncode
        self._popen = None
        return code

    def output(self) -> str:
        """What the process wrote since it was last started."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def http_ok(url: str, context: ssl.SSLContext | None = None, contains: bytes = b"") -> bool:
    """Whether GET url answers 200 (and its body contains `contains`)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status == 200 and contains in response.read()
    except OSError:
        return False


def insecure_context() -> ssl.SSLContext:
    """For kube-scheduler's /readyz, served with a throwaway self-signed certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def descendants(pid: int) -> list[int]:
    """pid's children, grandchildren, ... (gunicorn's workers under its master)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Field 4 is the parent pid; the command (field 2) may contain spaces, so split after it.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _proc_kib(path: str, field: str) -> int | None:
    """A "Field: N kB" line of a /proc file, in KiB; None if the process is gone."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def status_kib(pid: int, field: str) -> int | None:
    """A size field of /proc/<pid>/status in KiB (VmHWM: peak RSS, VmRSS: now), None if gone."""
    return _proc_kib(f"/proc/{pid}/status", field)


def peak_rss_mib(pid: int) -> float | None:
    kib = status_kib(pid, "VmHWM")
    return None if kib is None else kib / 1024


def pss_mib(pid: int) -> float | None:
    """The process's proportional set size now (/proc/<pid>/smaps_rollup): its private pages
    plus its share of those it shares, so the sum over processes is what they hold together,
    near what their container's memory cgroup is charged for them. None if gone."""
    kib = _proc_kib(f"/proc/{pid}/smaps_rollup", "Pss")
    return None if kib is None else kib / 1024


def tree_peak_rss_mib(pid: int) -> dict[str, float | int]:
    """Peak RSS of a process and its descendants: the largest one and the sum, and the sum of
    their PSS now.

    The RSS sum overstates real use: forked workers share their parent's pages until they
    write to them, and each VmHWM counts them. The PSS sum counts every page once, but is
    read now, not at the peak.
    """
    tree = [pid, *descendants(pid)]
    peaks = [p for p in (peak_rss_mib(q) for q in tree) if p is not None]
    shares = [p for p in (pss_mib(q) for q in tree) if p is not None]
    return {
        "processes": len(peaks),
        "max_mib": max(peaks, default=0.0),
        "sum_mib": sum(peaks),
        "pss_sum_mib": sum(shares) if shares else None,
    }


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # Fields after the command, counted from state (field 3 of the line): utime is 14, stime 15.
    return (int(fields[11]) + int(fields[12])) / _TICKS


class CpuMeter:
    """CPU seconds that groups of processes (each a pid and its descendants) use from now on.

    A process that exits meanwhile takes its CPU time with it, so a group that
    lost one has no figure (NaN) rather than a wrong one, and gone() names it.
    """

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self._groups = {name: [q for p in pids for q in (p, *descendants(p))] for name, pids in groups.items()}
        self._start = {name: {p: cpu_seconds(p) for p in pids} for name, pids in self._groups.items()}

    def gone(self) -> dict[str, list[int]]:
        """The processes of each group that were there at the start and are gone now."""
        return {
            name: gone
            for name, pids in self._groups.items()
            if (gone := [p for p in pids if self._start[name][p] is not None and cpu_seconds(p) is None])
        }

    def used(self) -> dict[str, float]:
        used = {}
        for name, pids in self._groups.items():
            total = 0.0
            for pid in pids:
                before, now = self._start[name][pid], cpu_seconds(pid)
                if before is None:
                    continue  # gone before the start: it used nothing in this window
                if now is None:
                    total = math.nan
                    break
                total += now - before
            used[name] = total if math.isnan(total) else round(total, 2)
        return used

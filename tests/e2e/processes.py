"""Real processes for the e2e suite and the demo: started detached, logged to a file, stopped by PID.

Each process gets its own session (process group), so stopping it also stops
what it started (the webhook's workers) and a Ctrl-C in the terminal that ran
pytest or the demo does not reach it before the harness stops it in order.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from .waiting import NotYet, wait_for

LOG_TAIL_LINES = 60


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port on `address` that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def child_pids(pid: int) -> set[int]:
    """The PIDs of the children of process `pid` (a webhook's workers, say), from /proc."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.update(int(child) for child in (task / "children").read_text().split())
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
    return found


class ManagedProcess:
    """One child process whose stdout and stderr go to `log_path`."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = Path(log_path)
        self._env = env
        self._popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self._popen is not None, f"{self.name} was never started"
        return self._popen.pid

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def exit_code(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.splitlines()[-lines:])

    def wait_http_ok(self, url: str, timeout: float, ca_file: Path | None = None) -> None:
        """Waits until GET url answers 200; fails at once, with the log, if the process exits."""
        context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None

        def probe() -> None:
            if not self.alive():
                raise AssertionError(
                    f"{self.name} exited with code {self.exit_code()} before {url} answered 200; "
                    f"command: {' '.join(self.argv)}\nlast lines of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
                    raise NotYet(f"HTTP {response.status}")
            except urllib.error.HTTPError as err:
                raise NotYet(f"HTTP {err.code}: {err.read().decode(errors='replace').strip()}") from None
            except (urllib.error.URLError, OSError) as err:
                raise NotYet(f"{err.__class__.__name__}: {err}") from None

        try:
            wait_for(f"{self.name} to answer 200 on {url}", probe, timeout)
        except AssertionError as err:
            raise AssertionError(f"{err}\nlast lines of {self.log_path}:\n{self.log_tail()}") from None

    def signal(self, signum: int) -> None:
        if self.alive():
            os.killpg(self.pid, signum)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`; returns the exit code."""
        if self._popen is None:
            return None
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self._popen.poll()

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it: no cleanup runs."""
        if self._popen is None:
            return
        self.signal(signal.SIGKILL)
        self._popen.wait(10)


class TrackedProcesses:
    """The processes a suite runs for its tests: a failed test's report shows the last lines
    of each one's log."""

    def __init__(self) -> None:
        self._processes: list[ManagedProcess] = []

    def track(self, process: ManagedProcess) -> ManagedProcess:
        self._processes.append(process)
        return process

    def untrack(self, process: ManagedProcess) -> None:
        if process in self._processes:
            self._processes.remove(process)

    def add_log_tails(self, report) -> None:
        """To a failed test's report (pytest_runtest_makereport), each process's last log lines."""
        if report.failed:
            for process in self._processes:
                report.sections.append((f"last lines of {process.name} log ({process.log_path})", process.log_tail()))


def stop_pid(pid: int, timeout: float = 15.0) -> bool:
    """Stops the process group a ManagedProcess of an earlier run started; True if it was running.

    Used by the demo, whose processes outlive the command that started them.
    Only a group whose leader is `pid` is signalled, never anything by name.
    """
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True

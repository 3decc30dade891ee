"""Waiting for a server the Argo CD tests started (the git daemon, the registry) to answer."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def wait_answering(
    process: subprocess.Popen, log: Path, what: str, probe: Callable[[], None], timeout: float = 30
) -> None:
    """Returns once probe() does not raise OSError. Raises RuntimeError with the server's log if the
    process exits first, or naming `what` and the last error once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited {process.returncode}: {log.read_text()}")
        try:
            probe()
            return
        except OSError as err:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} ({err})") from None
            time.sleep(0.2)

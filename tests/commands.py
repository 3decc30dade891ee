"""Running the project's commands and tools from tests: output captured, exit codes returned."""

from __future__ import annotations

import subprocess


def run(argv: list, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Runs a command, capturing text output; never raises on a non-zero exit."""
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def tail(result: subprocess.CompletedProcess, chars: int = 4000) -> str:
    """The exit code and the last characters of both outputs, for an assertion's message."""
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-chars:]}\nstderr:\n{result.stderr[-chars:]}"

"""`make local-up` (scripts/local-up.sh) on a machine where its apiserver port is taken.

Another checkout's `make demo KEEP=1` holding 16443 once cost a 2-minute wait and
then an x509 error from the other cluster's apiserver. The script must stop at
once, before building anything, naming the port and what holds it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from .conftest import REPO

pytestmark = pytest.mark.delivery


def test_a_taken_apiserver_port_stops_local_up_at_once_naming_the_holder(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            ["bash", str(REPO / "scripts" / "local-up.sh")],
            env={**os.environ, "CACHE_DIR": str(tmp_path / "cache"), "LOCAL_APISERVER_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        seconds = time.monotonic() - started

    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ERROR: port {port} (the local apiserver's) is taken by pid {os.getpid()}: "), last
    assert "LOCAL_APISERVER_PORT=" in last
    # Nothing was built or fetched into the cache it was given.
    assert not (tmp_path / "cache" / "bin" / "kube-apiserver").exists()
    assert seconds < 10, f"took {seconds:.1f}s to refuse"

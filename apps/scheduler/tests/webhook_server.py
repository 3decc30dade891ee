"""Run the real `gpu-scheduler certs` and `gpu-scheduler webhook` commands for tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import requests
from cryptography import x509
from e2e.processes import free_port

CLI = str(Path(sys.executable).parent / "gpu-scheduler")
HOST = "127.0.0.1"


def handshake(port: int, trust_file: Path, minimum=None, maximum=None, ciphers=None) -> int:
    """One TLS handshake on a new connection; the serial of the certificate served."""
    context = ssl.create_default_context(cafile=str(trust_file))
    if minimum:
        context.minimum_version = minimum
    if maximum:
        context.maximum_version = maximum
    if ciphers:
        context.set_ciphers(ciphers)
    with (
        socket.create_connection((HOST, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


class WebhookProcess:
    """`gpu-scheduler webhook` as a subprocess; its log goes to workdir/webhook.log."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        trust_file: Path,
        workdir: Path,
        workers: int = 2,
        scheduler_name: str = "gpu-scheduler",
        wait: bool = True,
    ) -> None:
        self.port = free_port()
        self.trust_file = trust_file
        self.log_file = workdir / "webhook.log"
        self.tmp_dir = workdir / "tmp"  # TMPDIR of the server: its metrics directory lands here
        self.tmp_dir.mkdir(exist_ok=True)
        env = dict(os.environ, TMPDIR=str(self.tmp_dir))
        with open(self.log_file, "wb") as log:
            self.process = subprocess.Popen(
                [
                    CLI,
                    "webhook",
                    "--tls-cert-file",
                    str(cert_file),
                    "--tls-private-key-file",
                    str(key_file),
                    "--bind",
                    HOST,
                    "--port",
                    str(self.port),
                    "--workers",
                    str(workers),
                    "--scheduler-name",
                    scheduler_name,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        if wait:
            self._wait_until_serving()

    def url(self, path: str) -> str:
        return f"https://{HOST}:{self.port}{path}"

    def log(self) -> str:
        return self.log_file.read_text()

    def wait_until_workers_serve(self, count: int = 2, timeout: float = 20.0) -> None:
        """Until `count` workers have each logged that they serve a certificate. /healthz answers
        once the first one does: a worker still starting reads the files later, and one that
        finds them mid-rewrite cannot start (granian respawns it)."""
        deadline = time.monotonic() + timeout
        while len(set(re.findall(r"worker (\d+) serving", self.log()))) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} workers did not serve within {timeout}s:\n{self.log()}")
            time.sleep(0.05)

    def _wait_until_serving(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"webhook exited with {self.process.returncode}:\n{self.log()}")
            try:
                if requests.get(self.url("/healthz"), verify=str(self.trust_file), timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"webhook did not serve within {timeout}s:\n{self.log()}")

    def stop(self) -> int:
        """SIGTERM, as the kubelet sends it; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

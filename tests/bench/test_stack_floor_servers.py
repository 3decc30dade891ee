"""Each server the webhook's stack is measured on (bench/stack_floor.py) really serves the
floor's answer over TLS, as `make bench` starts it: a server that cannot start would only
show as a missing row at the end of a 17-minute run."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from e2e.processes import free_port
from gpu_scheduler.certs.bundle import generate_bundle

from bench import stack_floor

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("certs")
    bundle = generate_bundle(dns=["localhost"], ips=["127.0.0.1"])
    (folder / "tls.crt").write_bytes(bundle.tls_cert_pem)
    (folder / "tls.key").write_bytes(bundle.tls_key_pem)
    (folder / "ca.crt").write_bytes(bundle.ca_cert_pem)
    return folder


def post(url: str, context: ssl.SSLContext) -> dict:
    request = urllib.request.Request(url, data=b'{"request": {}}', headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5, context=context) as response:
        assert response.status == 200
        return json.loads(response.read())


@pytest.mark.parametrize("app", stack_floor.APPS)
@pytest.mark.parametrize("server", stack_floor.SERVERS)
def test_each_server_answers_the_floor_review_over_tls(server, app, certs, tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "bench.stack_floor", "--server", server, "--app", app, "--port", str(port)]
    command += ["--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key")]
    log = tmp_path / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    try:
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        deadline, answer = time.monotonic() + 30, None
        while answer is None:
            assert process.poll() is None, f"{server} exited: {log.read_text()[-2000:]}"
            try:
                answer = post(f"https://127.0.0.1:{port}/mutate", context)
            except OSError:
                assert time.monotonic() < deadline, f"{server} did not answer in 30 s: {log.read_text()[-2000:]}"
                time.sleep(0.2)
        assert answer["response"] == {"uid": "floor", "allowed": True}
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)

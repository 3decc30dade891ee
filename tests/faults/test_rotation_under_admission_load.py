"""Certificate rotation while kube-apiserver sends admissions from several clients at once.

The oracle is the API server's own answer to each dry-run create of a pod of this test's
schedulerName (failurePolicy Fail): a call to the webhook that fails for any reason (a
connection closed under a request, a handshake cut, an untrusted certificate) refuses the pod.
The API server is a Go client that keeps its connections to the webhook and reuses them.
Over HTTP/1.1 a worker that closes one as the client writes a request on it fails that
admission (2 of about 11,000 here, before the webhook offered HTTP/2), which a Python client
(retrying, or opening a connection per request) would not show; several clients at once keep
several pooled connections, some of them idle. Over HTTP/2 the worker's GOAWAY tells the client
which requests it will still answer (webhook/server.py).
"""

from __future__ import annotations

import base64
import functools
import os
import random
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
from e2e import webhook_registration
from e2e.cluster import admission_problem
from e2e.components import Certs, WebhookProcess, make_certs
from e2e.workloads import bare_pod
from urllib3.exceptions import HTTPError

from .background import Background
from .conftest import track, untrack

pytestmark = pytest.mark.faults

ROTATIONS = 6
CLIENTS = 6


def probe_pod(scheduler_name: str, index: int) -> dict:
    # Created on its line's node: the webhook writes its devices, which a dry run then shows.
    return bare_pod(f"rotation-probe-{index}", f"{index}=node1:0\n", scheduler_name, node_name="node1")


class Admissions(Background):
    """CLIENTS threads, each creating (dry run) a pod, pausing 0-40 ms, and again, until stopped."""

    def __init__(self, api_client, namespace: str, scheduler_name: str) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.passed = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def loops(self):
        return [functools.partial(self._run, i) for i in range(CLIENTS)]

    def _run(self, index: int) -> None:
        pod = probe_pod(self.scheduler_name, index)
        while not self._stop.is_set():
            at = time.strftime("%H:%M:%S")
            try:
                problem = admission_problem(self.api_client, self.namespace, pod, _request_timeout=15)
            except (HTTPError, OSError) as err:
                problem = f"{err.__class__.__name__}: {err}"
            with self._lock:
                if problem:
                    self.failures.append(f"{at} client {index}: {problem}")
                else:
                    self.passed += 1
            self._stop.wait(random.uniform(0, 0.04))


def connections_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:port, from the kernel's table (the API server's
    to the webhook, here)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].split(":")[1], 16)
        if remote_port == port and fields[3] == "01":  # 01: ESTABLISHED
            count += 1
    return count


def install(pair: Path, served: Path) -> None:
    """The pair at `pair` becomes the one at `served`, each file replaced whole (rename)."""
    for name in ("tls.key", "tls.crt"):
        shutil.copyfile(pair / name, served / f".{name}.new")
        os.replace(served / f".{name}.new", served / name)


def test_rotations_under_concurrent_admissions_fail_no_admission(api_client, ns, tmp_path):
    bundles = [make_certs(tmp_path / f"pair-{i}") for i in range(ROTATIONS + 1)]
    served = tmp_path / "served"
    served.mkdir()
    install(bundles[0].cert_file.parent, served)
    # Every CA trusted from the start: what is tested is the connections, not the trust.
    ca_bundle = base64.b64encode(b"".join(b.ca_file.read_bytes() for b in bundles)).decode()
    scheduler_name = f"rotation-{uuid.uuid4().hex[:6]}"
    certs = Certs(bundles[0].ca_file, served / "tls.crt", served / "tls.key", ca_bundle)
    webhook = track(WebhookProcess(certs, tmp_path / "webhook.log", scheduler_name))
    try:
        webhook.start_and_wait()
        with webhook_registration.registered(
            api_client, f"gpu-scheduler-{scheduler_name}", webhook.base_url, ca_bundle, scheduler_name
        ):
            with Admissions(api_client, ns, scheduler_name) as admissions:
                time.sleep(3)
                before_rotating = connections_to(webhook.port)
                for bundle in bundles[1:]:
                    old = webhook.workers()
                    install(bundle.cert_file.parent, served)
                    webhook.wait_workers_replaced(old)
                    time.sleep(1)
    finally:
        webhook.stop()
        untrack(webhook)
    print(
        f"\n{admissions.passed} admissions through {ROTATIONS} rotations, {len(admissions.failures)} failed; "
        f"the API server held {before_rotating} connection(s) to the webhook before the first"
    )
    assert admissions.failures == [], admissions.failures[:5]
    assert admissions.passed > 200, admissions.passed

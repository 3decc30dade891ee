"""A binding answered 409 Conflict although the pod is still unbound: the scheduler must try
again, not count the pod as placed.

kube-apiserver answers 409 both when the pod already has a node ("pod P is already assigned to
node N") and when etcd fails in the middle of the write ("Operation cannot be fulfilled on
pods/binding "P": rpc error: code = Unavailable ..."), which the etcd crash test
(test_control_plane_restarts.py) hits when a bind is in flight at the crash. This makes the
second case deterministic: a validating webhook on pods/binding in the test's namespace
refuses the first bindings with code 409, as the API server would, then is removed.
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

import pytest
from e2e.cluster import container_env, get_pod
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod
from kubernetes import client

from . import binding_gates
from .api_proxy import TlsServer
from .bursts import attempts_on

pytestmark = pytest.mark.faults

CONFLICT = "Operation cannot be fulfilled on pods/binding: rpc error: code = Unavailable (faults test: etcd went away)"


class ConflictWebhook(TlsServer):
    """An admission webhook over TLS on 127.0.0.1 that refuses every request with 409."""

    def __init__(self, certs) -> None:
        self.calls: list[str] = []  # names of the pods whose binding was refused
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                calls.append(request.get("name") or "")
                answer = {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {
                        "uid": request["uid"],
                        "allowed": False,
                        "status": {"code": 409, "reason": "Conflict", "message": CONFLICT},
                    },
                }
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                pass

        super().__init__(Handler, certs)

    @property
    def url(self) -> str:
        return f"{self.base_url}/conflict"


def test_a_409_for_a_binding_that_did_not_happen_is_retried_until_the_pod_is_bound(
    api_client, ns, certs, scheduler_name, start_scheduler
):
    core = client.CoreV1Api(api_client)
    scheduler = start_scheduler("scheduler", "--gpu-sharing=allow", scheduler_name=scheduler_name)
    with ConflictWebhook(certs) as webhook:
        gate = binding_gates.shut(
            api_client, ns, webhook.url, certs.ca_bundle, lambda status, body: status == 409 and "faults test" in body
        )
        try:
            # The README's entry: no webhook serves this scheduler.
            pod = bare_pod("conflict-0", "0=node1:0\n", scheduler_name=scheduler_name, bind_entries=True)
            core.create_namespaced_pod(ns, pod)

            def refused_once() -> None:
                if "conflict-0" not in webhook.calls:
                    raise NotYet("the scheduler has not tried to bind conflict-0 yet")

            wait_for("the scheduler's binding of conflict-0 to be refused with 409", refused_once, 30)
        finally:
            binding_gates.open_(api_client, gate)
        refused_at = time.monotonic()

    def bound() -> str:
        node = get_pod(api_client, ns, "conflict-0")["spec"].get("nodeName")
        if not node:
            raise NotYet("conflict-0 is unbound")
        return node

    try:
        node = wait_for("conflict-0 to be bound after its binding got a 409", bound, 30)
    except AssertionError as err:
        raise AssertionError(f"{err}\nthe scheduler on it:\n{attempts_on(scheduler, ns, ['conflict-0'])}") from None
    assert node == "node1"
    # The binding that was stored wrote the devices its container sees.
    assert container_env(get_pod(api_client, ns, "conflict-0")) == {"main": "0"}
    print(f"\nbound {time.monotonic() - refused_at:.1f}s after the gate was removed; 409s seen: {webhook.calls}")

"""`webhook.failurePolicy: Ignore` on the real API server: while no webhook answers, our pods are
admitted as they were sent, without CUDA_VISIBLE_DEVICES, and the scheduler refuses them for good
(a FailedScheduling Event and the PodScheduled condition naming the container and the entry to
add; never bound, never tried again while the pod does not change: its containers would see every
GPU of the node), while it binds the pod the webhook answered. The chart's default, Fail, refuses
them at creation instead (test_webhook_outage.py).

The configurations are the chart's own (`helm template` with webhook.failurePolicy=Ignore; only
the address is 127.0.0.1), scoped to this run's namespaces and to a schedulerName of this test,
so no other test's pods ever meet them.
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from e2e import webhook_registration
from e2e.cluster import (
    DEVICES_FIELD_PATH,
    FROM_BIND,
    container_env,
    devices_entry,
    get_pod,
    pod_events,
    wait_for_event,
)
from e2e.components import WebhookProcess
from e2e.isolation import create_namespace, delete_namespace
from e2e.waiting import NotYet, wait_for
from e2e.workloads import MAP_ANNOTATION, bare_pod
from kubernetes import client

from .conftest import track, untrack

pytestmark = pytest.mark.faults

POLICY = "Ignore"
MAP = "0=node1:0\n1=node2:1\n"


def refuses_connections(port: int, timeout: float = 10.0) -> bool:
    """Whether 127.0.0.1:port refuses connections within `timeout`: a killed server's workers
    and its listening socket may take a moment to go (meanwhile a connection is reset)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except ConnectionRefusedError:
            return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


# Longer than the scheduler's first retries of a pod it may place later (1 s, then 2 s): a pod it
# refused for good is not tried again meanwhile.
NO_RETRY_SECONDS = 5.0


def occurrences(events: list[dict]) -> int:
    """How many times these Events happened (a series counts each occurrence)."""
    return sum(int((e.get("series") or {}).get("count") or e.get("count") or 1) for e in events)


def test_ignore_admits_our_pods_without_devices_while_no_webhook_answers_and_the_scheduler_refuses_them(
    api_client, certs, tmp_path, scheduler_name, start_scheduler
):
    core = client.CoreV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    name = f"gpu-scheduler-ignore-{uuid.uuid4().hex[:6]}"
    webhook = track(WebhookProcess(certs, tmp_path / "webhook.log", scheduler_name))
    namespace = create_namespace(api_client, "ignore")
    try:
        start_scheduler("scheduler", scheduler_name=scheduler_name)
        webhook.start_and_wait()
        with webhook_registration.registered(
            api_client,
            name,
            webhook.base_url,
            certs.ca_bundle,
            scheduler_name,
            values=(f"webhook.failurePolicy={POLICY}",),
        ):
            # What the API server holds, not what was sent: every webhook of both configurations.
            policies = [
                hook.failure_policy
                for configuration in (
                    admission.read_mutating_webhook_configuration(name),
                    admission.read_validating_webhook_configuration(name),
                )
                for hook in configuration.webhooks
            ]
            answered = core.create_namespaced_pod(namespace, bare_pod("ours-1", MAP, scheduler_name))
            webhook.kill()
            down = refuses_connections(webhook.port)
            unanswered = core.create_namespaced_pod(namespace, bare_pod("ours-0", MAP, scheduler_name))
            stored = api_client.sanitize_for_serialization(
                core.read_namespaced_pod(unanswered.metadata.name, namespace)
            )

        # The scheduler binds the pod the webhook answered, and refuses the other for good.
        def bound() -> dict:
            pod = get_pod(api_client, namespace, "ours-1")
            if not pod["spec"].get("nodeName"):
                raise NotYet("ours-1 is not bound yet")
            return pod

        placed = wait_for("ours-1, admitted with its devices, to be bound", bound, 30)
        refusal = wait_for_event(api_client, namespace, "ours-0", "FailedScheduling", "CUDA_VISIBLE_DEVICES", 30)
        time.sleep(NO_RETRY_SECONDS)
        refused = get_pod(api_client, namespace, "ours-0")
        refusals = [e for e in pod_events(api_client, namespace, "ours-0") if e["reason"] == "FailedScheduling"]
    finally:
        webhook.stop()
        untrack(webhook)
        delete_namespace(api_client, namespace)

    assert policies and set(policies) == {POLICY}, policies
    # While it answered, the webhook gave our pod the entry that reads the bind's devices; then
    # nothing listened.
    assert devices_entry(api_client.sanitize_for_serialization(answered)["spec"]["containers"][0]) == FROM_BIND
    assert down, f"something still answers on the webhook's port {webhook.port}"
    # Admitted unchanged: our scheduler and map, and no devices.
    assert container_env(stored) == {"main": None}, stored["spec"]["containers"]
    assert stored["spec"]["schedulerName"] == scheduler_name
    assert stored["metadata"]["annotations"][MAP_ANNOTATION] == MAP
    # The scheduler works: the pod with its devices is on its line's node, seeing them.
    assert placed["spec"]["nodeName"] == "node2"
    assert container_env(placed) == {"main": "1"}
    # The one without: refused, naming its container and the entry to give it; never bound.
    message = refusal["message"]
    assert "container(s) main of the pod have no CUDA_VISIBLE_DEVICES entry" in message, message
    assert f'fieldPath: "{DEVICES_FIELD_PATH}"' in message, message
    print(f"\nFailedScheduling: {message}")
    assert not refused["spec"].get("nodeName"), refused["spec"]
    assert container_env(refused) == {"main": None}
    condition = next(c for c in refused["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", message)
    # For good: its containers cannot change, so it is not tried again.
    assert occurrences(refusals) == 1, refusals

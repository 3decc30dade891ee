"""The webhook killed (-9) while pods are being created, registered exactly as the chart renders
it (`helm template`: rules, matchConditions on schedulerName, namespaceSelector excluding
kube-system and the release namespace, failurePolicy Fail; only clientConfig.service becomes a
url on 127.0.0.1): while it is down, pods of other schedulers and of kube-system are admitted
and ours are refused with a message naming the webhook; once it is back ours are admitted
again; and no pod of ours is ever stored without its CUDA_VISIBLE_DEVICES.

tests/delivery/test_helm_install.py proves the same scoping with no webhook ever running
(server-side dry runs); this is the transition, under a stream of real creates.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import pytest
from e2e import webhook_registration
from e2e.cluster import FROM_BIND, devices_entry, list_pods, status_message
from e2e.components import WebhookProcess
from e2e.isolation import create_namespace, delete_namespace
from e2e.workloads import bare_pod
from kubernetes import client
from kubernetes.client.rest import ApiException

from .conftest import track, untrack

pytestmark = [pytest.mark.faults, pytest.mark.disrupts_cluster]  # the chart's scope: every namespace

STREAM_PAUSE = 0.1
UP_BEFORE, DOWN_FOR, UP_AFTER = 2.0, 4.0, 3.0
MAP = "".join(f"{i}=node{i % 4 + 1}:{i % 4}\n" for i in range(1000))


@dataclass(frozen=True)
class Attempt:
    at: float
    who: str  # ours, other-scheduler, kube-system
    admitted: bool
    message: str = ""


class CreateStream:
    """Creates pods round-robin until stopped: ours, another scheduler's, and ours in kube-system
    (a server-side dry run there: it passes admission like a real create, and leaves nothing)."""

    def __init__(self, api_client, namespace: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.attempts: list[Attempt] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="create-stream", daemon=True)

    def _create(self, who: str, number: int) -> None:
        try:
            if who == "ours":
                self.core.create_namespaced_pod(self.namespace, bare_pod(f"ours-{number}", MAP))
            elif who == "other-scheduler":
                pod = bare_pod(f"other-{number}", MAP, scheduler_name="default-scheduler")
                self.core.create_namespaced_pod(self.namespace, pod)
            else:
                self.core.create_namespaced_pod("kube-system", bare_pod(f"faults-{number}", MAP), dry_run="All")
        except ApiException as err:
            self.attempts.append(Attempt(time.monotonic(), who, False, status_message(err.body)))
            return
        self.attempts.append(Attempt(time.monotonic(), who, True))

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            for who in ("ours", "other-scheduler", "kube-system"):
                self._create(who, number)
            number += 1
            self._stop.wait(STREAM_PAUSE)

    def start(self) -> CreateStream:
        self._thread.start()
        return self

    def stop(self) -> list[Attempt]:
        self._stop.set()
        self._thread.join(30)
        return self.attempts


def test_webhook_killed_mid_stream_refuses_only_our_pods_and_admits_them_again_when_back(api_client, certs, tmp_path):
    # Unlabelled, so only the configuration of this test, scoped as the chart scopes it, applies.
    namespace = create_namespace(api_client, "outage", labelled=False)
    name = f"gpu-scheduler-outage-{uuid.uuid4().hex[:6]}"
    webhook = track(WebhookProcess(certs, tmp_path / "webhook.log"))
    stream = None
    try:
        webhook.start_and_wait()
        webhook_registration.apply(api_client, webhook_registration.render(name, webhook.base_url, certs.ca_bundle))
        webhook_registration.wait_until_called(api_client, namespace)
        stream = CreateStream(api_client, namespace).start()
        time.sleep(UP_BEFORE)
        killed = time.monotonic()
        webhook.kill()
        time.sleep(DOWN_FOR)
        restarting = time.monotonic()
        webhook.start_and_wait()
        back = time.monotonic()
        time.sleep(UP_AFTER)
        attempts = stream.stop()
        stream = None
        pods = list_pods(api_client, namespace)
    finally:
        if stream is not None:
            stream.stop()
        webhook_registration.delete(api_client, name)
        webhook.stop()
        untrack(webhook)
        delete_namespace(api_client, namespace)

    ours = [a for a in attempts if a.who == "ours"]
    # A create in flight at the kill may go either way; one second later none may pass.
    down = [a for a in ours if killed + 1 <= a.at <= restarting]
    before = [a for a in ours if a.at < killed]
    after = [a for a in ours if a.at > back]
    assert before and [a.message for a in before if not a.admitted] == []
    assert down and [a for a in down if a.admitted] == []
    assert all('failed calling webhook "pods.mutate.gpu-scheduler"' in a.message for a in down), down[0].message
    assert after and after[-1].admitted
    recovered = next(a.at for a in after if a.admitted) - back
    assert recovered < 2.0
    others = [a for a in attempts if a.who != "ours"]
    assert [a for a in others if not a.admitted] == [], "a pod of another scheduler or of kube-system was refused"
    # Not bound (no scheduler runs here): each container holds the entry that reads the bind's devices.
    unmutated = [
        p["metadata"]["name"]
        for p in pods
        if p["metadata"]["name"].startswith("ours-") and devices_entry(p["spec"]["containers"][0]) != FROM_BIND
    ]
    assert unmutated == [], f"pods of ours stored without CUDA_VISIBLE_DEVICES: {unmutated}"
    print(
        f"\nwebhook down {back - killed:.1f}s (killed, restarted after {DOWN_FOR:g}s): "
        f"{len(down)} of our creates refused ({down[0].message[:160]}...); "
        f"{len([a for a in others if killed + 1 <= a.at <= restarting])} creates of other schedulers and "
        f"kube-system admitted meanwhile; ours admitted again {recovered:.2f}s after it was ready; "
        f"{len([p for p in pods if p['metadata']['name'].startswith('ours-')])} pods of ours stored, all with "
        f"CUDA_VISIBLE_DEVICES"
    )

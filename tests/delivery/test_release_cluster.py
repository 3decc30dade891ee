"""The release features of the gpu-scheduler chart against the real local control plane (marker `cluster`).

  - the opt-out label: the API server sends no pod to the webhook from a namespace, or of a
    pod, labelled gpu-scheduler.io/webhook=disabled (the release is installed with no webhook
    answering: everything else of ours is refused);
  - `helm test`: the hook's command, `gpu-scheduler smoke-test` with the arguments the chart
    renders, run on this host as the hook's ServiceAccount with only the hook's RBAC, against
    a real webhook (granian, TLS) and scheduler (host processes registered as the chart
    renders them): it exits 0, and the cluster says why it may: its probe pod, as a watch of
    the API server saw it, was admitted with the devices of its map's line in every container
    and bound to the node that line names, by our scheduler's identity (the API server's audit
    log, tests/faults/audit.py), with a Scheduled Event about it, and removed; the API server
    refused none of the hook's requests (the audit log again). With no scheduler it fails
    saying why. KWOK runs no containers, so Helm itself cannot run the hook pod here; the KinD
    e2e can. SMOKE_TEST_BROKEN=1 runs the passing test against a stand-in hook that prints the
    hook's PASS line and does nothing: it must fail.
The critical priority class and its quota: tests/faults/test_critical_pods_quota.py (it
starts a second API server).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid

import pytest
import yaml
from e2e import webhook_registration
from e2e.cluster import delete_cluster_rbac, env_seen, pod_events, service_account_kubeconfig
from e2e.components import SchedulerProcess, WebhookProcess, make_certs
from e2e.isolation import delete_namespace
from e2e.waiting import NotYet, wait_for
from faults.audit import AuditLog
from faults.control_plane import LocalControlPlane
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from .conftest import REPO, SCHEDULER_CHART, container_args, run
from .test_helm_install import admission_error, installed_release, placed, pod, serves_mutating_policies, uninstall

pytestmark = pytest.mark.cluster

GPU_SCHEDULER = REPO / ".venv" / "bin" / "gpu-scheduler"
OPT_OUT = {"gpu-scheduler.io/webhook": "disabled"}
PROBE_LABEL = "gpu-scheduler.io/smoke-test"
# Set to run the passing test against a stand-in hook that only prints the PASS line: it must fail.
BROKEN = os.environ.get("SMOKE_TEST_BROKEN") == "1"


@pytest.fixture(scope="module")
def release(kubeconfig, helm, kubectl):
    installed = installed_release(helm, kubeconfig)
    yield installed
    uninstall(installed, helm, kubectl)


def new_namespace(api_client, labels: dict | None = None) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api_client).create_namespace(
        {"metadata": {"name": name, "labels": {"gpu-scheduler-test": "true", **(labels or {})}}}
    )
    return name


def test_the_opt_out_label_keeps_namespaces_and_pods_away_from_the_webhook(release, api_client):
    core = client.CoreV1Api(api_client)
    served, opted_out = new_namespace(api_client), new_namespace(api_client, OPT_OUT)
    try:
        ours = pod("probe-0", release.scheduler_name)
        labelled = pod("probe-0", release.scheduler_name)
        labelled["metadata"]["labels"] = OPT_OUT

        create = core.create_namespaced_pod
        if serves_mutating_policies(api_client):
            # 1.36+: the MutatingAdmissionPolicy gives the bind entry to what it is bound to (the
            # webhook's scope, opt-out included); a pod it leaves alone is admitted without it.
            deadline = time.monotonic() + 30
            while not placed(lambda: create(served, ours, dry_run="All")):
                assert time.monotonic() < deadline, "the admission policies never placed a pod"
                time.sleep(0.2)
            assert not placed(lambda: create(opted_out, ours, dry_run="All"))
            assert not placed(lambda: create(served, labelled, dry_run="All"))
        else:
            # No webhook answers this release (installed without its certificate): what reaches it is refused.
            refused = admission_error(lambda: create(served, ours, dry_run="All"))
            assert refused and "pods.mutate.gpu-scheduler" in refused
        assert admission_error(lambda: create(opted_out, ours, dry_run="All")) is None
        assert admission_error(lambda: create(served, labelled, dry_run="All")) is None
    finally:
        delete_namespace(api_client, served)
        delete_namespace(api_client, opted_out)


@pytest.fixture(scope="module")
def product(api_client, kubeconfig, tmp_path_factory):
    """A webhook and a scheduler for schedulerName gpu-scheduler that serve one probe
    namespace only (its label in the webhooks' namespaceSelector; the scheduler's --namespace)."""
    directory = tmp_path_factory.mktemp("smoke-product")
    label = f"smoke-{uuid.uuid4().hex[:6]}"
    probe_namespace = new_namespace(api_client, {"gpu-scheduler-smoke": label})
    certs = make_certs(directory / "certs")
    webhook = WebhookProcess(certs, directory / "webhook.log")
    scheduler = SchedulerProcess(kubeconfig, directory / "scheduler.log")
    scheduler.argv += ["--namespace", probe_namespace]
    name = f"gpu-scheduler-smoke-{label}"
    try:
        webhook.start_and_wait()
        configurations = webhook_registration.render(
            name, webhook.base_url, certs.ca_bundle, namespace_label=("gpu-scheduler-smoke", label)
        )
        webhook_registration.apply(api_client, configurations)
        webhook_registration.wait_until_called(api_client, probe_namespace)
        scheduler.start_and_wait()
        yield probe_namespace, scheduler
    finally:
        webhook_registration.delete(api_client, name)
        scheduler.stop()
        webhook.stop()
        delete_namespace(api_client, probe_namespace)


@pytest.fixture(scope="module")
def smoke_test(product, render, kubeconfig, kubectl, api_client, tmp_path_factory):
    """The `helm test` hook of a release whose tests.namespace is the probe namespace: its RBAC
    applied, and a kubeconfig with a token of its ServiceAccount."""
    probe_namespace, _ = product
    suffix = uuid.uuid4().hex[:6]
    name, namespace = f"gpu-scheduler-test-{suffix}", f"gs-test-{suffix}"
    rendered = render(SCHEDULER_CHART, f"tests.namespace={probe_namespace}", release=name, namespace=namespace)
    hooks = [d for d in rendered.docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
    (pod_doc,) = [d for d in hooks if d["kind"] == "Pod"]
    rbac = [d for d in hooks if d["kind"] != "Pod"]
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": namespace}})
    manifest = tmp_path_factory.mktemp("smoke-rbac") / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(rbac))
    applied = run([kubectl, "--kubeconfig", kubeconfig, "apply", "-f", manifest])
    assert applied.returncode == 0, applied.stderr
    identity = service_account_kubeconfig(
        kubectl, kubeconfig, namespace, pod_doc["spec"]["serviceAccountName"], manifest.parent / "kubeconfig"
    )
    yield pod_doc, identity, namespace
    # The Role and RoleBinding go with the probe namespace (the product fixture deletes it).
    delete_cluster_rbac(api_client, rbac)
    delete_namespace(api_client, namespace)


def run_hook(pod_doc: dict, identity, namespace: str, *extra: str):
    """The hook pod's command on this host: its image's entrypoint, its args, its environment."""
    env = {**os.environ, "KUBECONFIG": str(identity), "RELEASE_NAMESPACE": namespace}
    return run([GPU_SCHEDULER, *container_args(pod_doc), *extra], env=env, timeout=180)


def fake_hook(probe_namespace: str):
    """The deliberately broken hook of SMOKE_TEST_BROKEN=1: the PASS line a working hook prints, and nothing done."""
    line = (
        f"PASS: pod {probe_namespace}/gpu-scheduler-smoke-test-000000-0 was bound to node1 in 0.1 s, "
        "every container seeing CUDA_VISIBLE_DEVICES=0"
    )
    return run([sys.executable, "-c", f"print({line!r})"], timeout=60)


def probe_pods(api_client, namespace: str) -> list[str]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=PROBE_LABEL)
    return [p.metadata.name for p in pods.items if not p.metadata.deletion_timestamp]


class ProbeWatch:
    """Every version of the probe pods the API server sent a watch of their namespace, from before
    the hook runs: what the cluster stored, whatever the hook says. name -> versions, and the
    names whose deletion the watch saw."""

    def __init__(self, api_client, namespace: str) -> None:
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self.versions: dict[str, list[dict]] = {}
        self.deleted: set[str] = set()
        self.cut: Exception | None = None
        self._stopping = False
        self._stream = watch.Watch()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> ProbeWatch:
        listed = self._core.list_namespaced_pod(self._namespace, label_selector=PROBE_LABEL)
        self._start = listed.metadata.resource_version
        self._thread.start()
        return self

    def _follow(self) -> None:
        try:
            for event in self._stream.stream(
                self._core.list_namespaced_pod,
                self._namespace,
                label_selector=PROBE_LABEL,
                resource_version=self._start,
                timeout_seconds=180,
            ):
                pod = event["raw_object"]
                name = pod["metadata"]["name"]
                self.versions.setdefault(name, []).append(pod)
                if event["type"] == "DELETED":
                    self.deleted.add(name)
        except ProtocolError as err:
            if not self._stopping:
                self.cut = err  # a watch cut before the test stopped it: its events would be missing

    def wait_deleted(self, timeout: float = 20) -> None:
        """Until the watch has seen every probe pod it saw deleted (at least one)."""

        def gone() -> None:
            assert self.cut is None, f"the watch of the probe pods was cut: {self.cut}"
            if not self.versions or set(self.versions) - self.deleted:
                raise NotYet(f"probe pods seen {sorted(self.versions)}, deleted {sorted(self.deleted)}")

        wait_for("the watch to see the probe pods come and go", gone, timeout)

    def __exit__(self, *_exc) -> None:
        self._stopping = True
        self._stream.stop()


def map_line(pod: dict) -> tuple[str, str]:
    """(node, devices) of line 0 of the pod's map annotation as stored: the probe's name ends in -0."""
    assert pod["metadata"]["name"].endswith("-0"), pod["metadata"]["name"]
    lines = dict(
        line.split("=", 1) for line in pod["metadata"]["annotations"]["gpu-scheduling-map"].splitlines() if line
    )
    node, devices = lines["0"].split(":", 1)
    return node, devices


def test_the_helm_test_hook_passes_on_a_working_release_with_only_its_own_rbac(
    product, smoke_test, api_client, kubeconfig
):
    probe_namespace, scheduler = product
    pod_doc, identity, namespace = smoke_test
    audit = AuditLog(LocalControlPlane(kubeconfig).log_file("audit"))
    hook_account = f"system:serviceaccount:{namespace}:{pod_doc['spec']['serviceAccountName']}"

    with ProbeWatch(api_client, probe_namespace) as seen:
        result = fake_hook(probe_namespace) if BROKEN else run_hook(pod_doc, identity, namespace)
        assert result.returncode == 0, result.stderr
        seen.wait_deleted()

    # The cluster's record of the probe, not the hook's word: one pod, whose every container
    # sees its map line's devices once it is bound (a literal given at admission, or the bind's
    # annotation through a fieldRef), bound to the node that line names, then deleted.
    ((name, versions),) = seen.versions.items()
    node, devices = map_line(versions[0])
    bound = next((v for v in versions if v["spec"].get("nodeName")), None)
    assert bound is not None, f"the watch never saw {name} bound"
    for container in bound["spec"]["containers"]:
        env = env_seen(bound, container)
        assert (env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER")) == (devices, "PCI_BUS_ID"), container
    assert {v["spec"].get("nodeName") for v in versions} - {None} == {node}
    assert probe_pods(api_client, probe_namespace) == []
    # Bound by our scheduler (its identity in the binding's User-Agent): the hook's RBAC cannot bind.
    bindings = [b for b in audit.bindings(probe_namespace) if b.pod == name]
    assert [(b.identity, b.stored) for b in bindings] == [(scheduler.identity(), True)]

    def scheduled() -> list[dict]:
        found = [e for e in pod_events(api_client, probe_namespace, name) if e["reason"] == "Scheduled"]
        if not found:
            raise NotYet(f"no Scheduled Event about {name}")
        return found

    (event,) = wait_for("the probe's Scheduled Event", scheduled, 10)
    assert f" to {node} " in event["message"] and event["involvedObject"].get("uid") == versions[0]["metadata"]["uid"]
    # Only its own RBAC, and enough of it: the API server refused none of the hook's requests.
    answers = audit.answers_to(hook_account)
    assert answers, f"no request of {hook_account} in the audit log"
    assert [str(a) for a in answers if a.code in (401, 403)] == []


def test_the_helm_test_hook_fails_saying_why_when_nothing_binds_the_probe(product, smoke_test, api_client):
    probe_namespace, scheduler = product
    pod_doc, identity, namespace = smoke_test
    scheduler.stop()
    try:
        result = run_hook(pod_doc, identity, namespace, "--timeout=5")
    finally:
        scheduler.start_and_wait()

    assert result.returncode == 1
    assert "smoke-test FAILED" in result.stderr
    assert "was not bound within 5 s" in result.stderr
    assert "is the scheduler running" in result.stderr
    assert probe_pods(api_client, probe_namespace) == []


def test_the_helm_test_hook_refuses_the_release_namespace_at_once(smoke_test):
    pod_doc, identity, namespace = smoke_test

    result = run_hook(pod_doc, identity, namespace, f"--namespace={namespace}")

    assert result.returncode == 2
    assert "the webhook never serves kube-system nor its release namespace" in result.stderr

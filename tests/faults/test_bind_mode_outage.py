"""An outage of ours stops nothing: with every webhook of the chart unreachable, workloads are
created and their pods placed and given their devices (on a 1.36+ API server).

The chart's admission objects are installed as `helm template` renders them for a 1.36+ API
server (the webhook configurations, the MutatingAdmissionPolicy and the device-annotation
guard), for a schedulerName of this test and its namespace only. Every webhook's address is a
port on 127.0.0.1 where nothing listens. Then:

- a StatefulSet whose template carries the entry (as the README and the check chart write it)
  and one whose template lacks it (the policy, in kube-apiserver, adds it to each pod) are
  created: the workload webhook, unreachable, fails open;
- a real scheduler process binds their pods;
- the oracle reads the pods as kube-apiserver stores them and resolves each container's
  CUDA_VISIBLE_DEVICES as the kubelet resolves a fieldRef (e2e.cluster.container_env): every
  container of every pod must see its map line's devices, on its map line's node.

OUTAGE_BROKEN=1 renders the chart as for an API server without MutatingAdmissionPolicy (1.35:
no policy, so a pod lacking the entry goes through the webhook, which fails closed): the same
test must then fail, the pods without the entry never created.
"""

from __future__ import annotations

import os
import socket

import pytest
from e2e.charts import SCHEDULER_CHART, helm_template
from e2e.cluster import BIND_ENTRY, container_env, list_pods
from e2e.isolation import create_namespace, delete_namespace
from e2e.waiting import NotYet, wait_for
from kubernetes import client, utils

pytestmark = pytest.mark.faults

MUTATING_POLICY_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
TEMPLATES = (
    "templates/webhook-configurations.yaml",
    "templates/bind-policies.yaml",
    "templates/device-annotations-guard.yaml",
)
MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n"
LINES = {0: ("node1", "0,1"), 1: ("node2", "2"), 2: ("node3", "0,1,2")}
# Set to render without the MutatingAdmissionPolicy on purpose: the test must then fail.
BROKEN = os.environ.get("OUTAGE_BROKEN") == "1"
PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def render(release: str, scheduler_name: str, namespace: str, ca_bundle: str) -> list[dict]:
    # As for 1.35, bind-policies.yaml renders nothing (and --show-only of it would fail).
    templates = [t for t in TEMPLATES if t != "templates/bind-policies.yaml"] if BROKEN else TEMPLATES
    shown = [argument for template in templates for argument in ("--show-only", template)]
    documents = helm_template(
        release,
        SCHEDULER_CHART,
        "gpu-scheduler",
        *shown,
        *(() if BROKEN else ("--api-versions", MUTATING_POLICY_API)),
        "--set-string",
        f"schedulerName={scheduler_name}",
    )
    if BROKEN:
        return _addressed(documents, release, namespace, ca_bundle)
    assert {doc["kind"] for doc in documents} >= {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "MutatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
    }, "the chart no longer renders what this test takes down"
    return _addressed(documents, release, namespace, ca_bundle)


def _addressed(documents: list[dict], release: str, namespace: str, ca_bundle: str) -> list[dict]:
    """The documents renamed for this test, bound to its namespace, every webhook unreachable."""
    unreachable = f"https://127.0.0.1:{closed_port()}"
    only_here = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    for doc in documents:
        doc["metadata"]["name"] = f"{release}-{doc['metadata']['name']}"
        for webhook in doc.get("webhooks") or ():
            webhook["clientConfig"] = {
                "url": unreachable + webhook["clientConfig"]["service"]["path"],
                "caBundle": ca_bundle,
            }
            webhook["namespaceSelector"] = only_here
        if doc["kind"].endswith("PolicyBinding"):
            doc["spec"]["policyName"] = f"{release}-{doc['spec']['policyName']}"
            doc["spec"]["matchResources"] = {"namespaceSelector": only_here}
    return documents


def install(api_client, documents: list[dict]) -> None:
    custom = client.CustomObjectsApi(api_client)
    for doc in documents:
        if doc["kind"] in PLURALS:
            custom.create_cluster_custom_object("admissionregistration.k8s.io", "v1", PLURALS[doc["kind"]], doc)
        else:
            utils.create_from_dict(api_client, doc)


def uninstall(api_client, documents: list[dict]) -> None:
    custom = client.CustomObjectsApi(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    for doc in documents:
        name = doc["metadata"]["name"]
        try:
            if doc["kind"] in PLURALS:
                custom.delete_cluster_custom_object("admissionregistration.k8s.io", "v1", PLURALS[doc["kind"]], name)
            elif doc["kind"] == "MutatingWebhookConfiguration":
                admission.delete_mutating_webhook_configuration(name)
            else:
                admission.delete_validating_webhook_configuration(name)
        except client.ApiException as err:
            if err.status != 404:
                raise


def statefulset(name: str, scheduler_name: str, with_entry: bool) -> dict:
    env = [BIND_ENTRY, {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"}] if with_entry else []
    labels = {"app": name}
    pod_spec = {
        "schedulerName": scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "initContainers": [{"name": "setup", "image": "registry.k8s.io/pause:3.10", "env": env}],
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "env": env}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": len(LINES),
            "podManagementPolicy": "Parallel",
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels, "annotations": {"gpu-scheduling-map": MAP}}, "spec": pod_spec},
        },
    }


@pytest.fixture
def outage_namespace(api_client):
    name = create_namespace(api_client, "bind-outage", labelled=False)
    yield name
    delete_namespace(api_client, name)


def test_with_every_webhook_of_ours_unreachable_workloads_are_created_placed_and_given_their_devices(
    api_client, certs, outage_namespace, scheduler_name, start_scheduler
):
    documents = render(f"outage-{scheduler_name}", scheduler_name, outage_namespace, certs.ca_bundle)
    apps = client.AppsV1Api(api_client)
    try:
        install(api_client, documents)
        # The policy is active once a dry-run pod without the entry comes back with it.
        wait_for(
            "the bind-mode policy in the path", lambda: _policy_active(api_client, outage_namespace, scheduler_name), 30
        )
        apps.create_namespaced_stateful_set(outage_namespace, statefulset("with-entry", scheduler_name, True))
        apps.create_namespaced_stateful_set(outage_namespace, statefulset("without-entry", scheduler_name, False))
        start_scheduler("bind-outage", scheduler_name=scheduler_name)
        pods = wait_for("6 pods bound", lambda: _all_bound(api_client, outage_namespace, 2 * len(LINES)), 90)
    finally:
        uninstall(api_client, documents)

    wrong = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        node, devices = LINES[int(name.rsplit("-", 1)[1])]
        sees = container_env(pod)
        if pod["spec"]["nodeName"] != node or set(sees.values()) != {devices}:
            wrong[name] = (pod["spec"]["nodeName"], sees)
    assert not wrong, f"pods not on their line's node or not seeing its devices: {wrong}"


def _policy_active(api_client, namespace: str, scheduler_name: str) -> None:
    probe = statefulset("probe", scheduler_name, False)["spec"]["template"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe-0", **probe["metadata"]},
        "spec": probe["spec"],
    }
    created = client.CoreV1Api(api_client).create_namespaced_pod(namespace, body, dry_run="All")
    if not any(e.name == "CUDA_VISIBLE_DEVICES" for e in created.spec.containers[0].env or ()):
        raise NotYet("a pod without the entry is created without it")


def _all_bound(api_client, namespace: str, count: int) -> list[dict]:
    pods = list_pods(api_client, namespace)
    bound = [p for p in pods if p["spec"].get("nodeName")]
    if len(pods) != count or len(bound) != count:
        raise NotYet(", ".join(f"{p['metadata']['name']}={p['spec'].get('nodeName')}" for p in pods) or "no pods")
    return pods

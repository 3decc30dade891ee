"""Workloads given the bind entries once, at apply: the real kube-apiserver and its controllers.

  (a) 1.36+: the chart's MutatingAdmissionPolicy for workloads
      (templates/workload-bind-policies.yaml) stores a StatefulSet and an Indexed Job whose
      templates lack the entry with it (a literal CUDA_VISIBLE_DEVICES replaced), their
      controllers create pods that have it, and a server-side re-apply of the same manifest is
      valid and changes nothing: no new generation, no rollout. Workloads created before it
      take a label: no refusal, no rollout.
  (b) 1.35 (compat): `gpu-scheduler webhook` registered with the chart's configurations does
      the same for the StatefulSet, and its pod, created complete, never calls the webhook.

Both are installed for a schedulerName of this run and bound to a namespace of their own, so
no other suite's workloads meet them.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import yaml
from kubernetes import client

from . import admission_policies, webhook_registration
from .charts import SCHEDULER_CHART, helm_template
from .cluster import ORDER_ENTRY, STORED_BIND_ENTRY, Kubectl, get_pod
from .isolation import RUN_ID, create_namespace, delete_namespace
from .waiting import NotYet, wait_for

pytestmark = pytest.mark.cluster

SCHEDULER = f"workload-entries-{RUN_ID}"
MUTATING_POLICY_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
MAP = "0=node1:0,1\n1=node2:2\n"
ACTIVE_TIMEOUT = 30.0


def template(containers: list[dict], init_containers: list[dict] = ()) -> dict:
    spec = {"schedulerName": SCHEDULER, "automountServiceAccountToken": False, "containers": containers}
    if init_containers:
        spec["initContainers"] = init_containers
    return {"metadata": {"labels": {"app": "train"}, "annotations": {"gpu-scheduling-map": MAP}}, "spec": spec}


def statefulset(name: str, namespace: str) -> dict:
    """Written as for another scheduler: no entry but a literal one in the sidecar."""
    containers = [
        {"name": "main", "image": "busybox", "env": [{"name": "RANK_OF", "value": "train"}]},
        {"name": "side", "image": "busybox", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": {"app": "train"}},
            "template": template(containers, [{"name": "fetch", "image": "busybox"}]),
        },
    }


def indexed_job(name: str, namespace: str) -> dict:
    pod_template = template([{"name": "main", "image": "busybox"}])
    pod_template["spec"]["restartPolicy"] = "Never"
    del pod_template["metadata"]["labels"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"completionMode": "Indexed", "completions": 1, "template": pod_template},
    }


def envs(pod_spec: dict) -> dict[str, list]:
    return {c["name"]: c.get("env") for c in pod_spec.get("initContainers", []) + pod_spec["containers"]}


def apply(kubectl: Kubectl, manifest: dict) -> None:
    """`kubectl apply --server-side`, as Argo CD applies with ServerSideApply=true."""
    kubectl.ok(
        "apply", "--server-side", "--field-manager", "workload-entries-test", "-f", "-", stdin=yaml.safe_dump(manifest)
    )


def dry_run_create(kubectl: Kubectl, manifest: dict) -> dict:
    """What the API server would store for `manifest`, after admission."""
    return json.loads(kubectl.ok("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=yaml.safe_dump(manifest)))


def pods_of(api_client, namespace: str) -> dict[str, dict]:
    """The workloads' pods by name, once the controllers created them."""
    found = client.CoreV1Api(api_client).list_namespaced_pod(namespace, _preload_content=False)
    return {p["metadata"]["name"]: p for p in yaml.safe_load(found.data)["items"]}


def wait_for_pod(api_client, namespace: str, name: str) -> dict:
    def created() -> dict:
        pods = pods_of(api_client, namespace)
        if name not in pods:
            raise NotYet(f"no pod {name} yet; there are {sorted(pods)}")
        return pods[name]

    return wait_for(f"pod {namespace}/{name} created by its controller", created, 60)


@pytest.fixture
def namespace(api_client):
    name = create_namespace(api_client, "workload-entries", labelled=False)
    yield name
    delete_namespace(api_client, name)


@pytest.fixture
def kubectl(kubeconfig) -> Kubectl:
    return Kubectl(kubeconfig)


# -- (a) 1.36+: the MutatingAdmissionPolicy ------------------------------------------------------


@contextmanager
def policy_installed(api_client, namespace: str, kubectl: Kubectl):
    """The chart's workload policy, for this run's schedulerName and `namespace`, once it acts."""
    documents = helm_template(
        f"workloads-{RUN_ID}",
        SCHEDULER_CHART,
        "gpu-scheduler",
        "--show-only",
        "templates/workload-bind-policies.yaml",
        "--set-string",
        f"schedulerName={SCHEDULER}",
        "--api-versions",
        MUTATING_POLICY_API,
    )
    if "MutatingAdmissionPolicy" not in kubectl.ok("api-resources", "--api-group=admissionregistration.k8s.io"):
        pytest.skip("this API server serves no admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (1.35)")
    assert sorted(d["kind"] for d in documents) == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    admission_policies.create(api_client, admission_policies.bound_to_namespace(documents, namespace))
    try:
        probe = statefulset("probe", namespace)

        def acting() -> None:
            stored = dry_run_create(kubectl, probe)
            if STORED_BIND_ENTRY not in envs(stored["spec"]["template"]["spec"])["main"]:
                raise NotYet("not mutated yet")

        wait_for("the workload policy to act on this namespace", acting, ACTIVE_TIMEOUT)
        yield
    finally:
        admission_policies.delete(api_client, documents)


@pytest.fixture
def workload_policy(api_client, namespace, kubectl):
    with policy_installed(api_client, namespace, kubectl):
        yield


def test_a_statefulset_and_a_job_lacking_the_entry_are_stored_with_it_and_so_are_their_pods(
    api_client, namespace, kubectl, workload_policy
):
    apply(kubectl, statefulset("train", namespace))
    apply(kubectl, indexed_job("job", namespace))

    stored = kubectl.get("-n", namespace, "statefulset", "train")
    assert envs(stored["spec"]["template"]["spec"]) == {
        "fetch": [STORED_BIND_ENTRY, ORDER_ENTRY],
        "main": [{"name": "RANK_OF", "value": "train"}, STORED_BIND_ENTRY, ORDER_ENTRY],
        "side": [STORED_BIND_ENTRY, ORDER_ENTRY],
    }
    job = kubectl.get("-n", namespace, "job", "job")
    assert envs(job["spec"]["template"]["spec"])["main"][:2] == [STORED_BIND_ENTRY, ORDER_ENTRY]

    pod = wait_for_pod(api_client, namespace, "train-0")
    assert envs(pod["spec"]) == envs(stored["spec"]["template"]["spec"])
    (job_pod,) = [p for name, p in pods_of(api_client, namespace).items() if name.startswith("job-0-")]
    assert envs(job_pod["spec"])["main"][:2] == [STORED_BIND_ENTRY, ORDER_ENTRY]

    # The same manifest again, the sidecar's literal value included: valid, and no new revision.
    generation = stored["metadata"]["generation"]
    apply(kubectl, statefulset("train", namespace))
    again = kubectl.get("-n", namespace, "statefulset", "train")
    assert again["metadata"]["generation"] == generation
    assert envs(again["spec"]["template"]["spec"]) == envs(stored["spec"]["template"]["spec"])


def test_workloads_of_before_the_policy_take_labels_and_start_no_rollout(api_client, namespace, kubectl):
    """Seen on kube-apiserver 1.37 without the template-changed-on-update condition: a label
    added to a Job of before the install was refused (its template is immutable), and one
    added to such a StatefulSet started a rollout (a new generation)."""
    apply(kubectl, statefulset("before", namespace))
    apply(kubectl, indexed_job("before-job", namespace))
    generation = kubectl.get("-n", namespace, "statefulset", "before")["metadata"]["generation"]
    with policy_installed(api_client, namespace, kubectl):
        kubectl.ok("-n", namespace, "label", "statefulset/before", "job/before-job", "team=a")
        stored = kubectl.get("-n", namespace, "statefulset", "before")
        assert stored["metadata"]["labels"]["team"] == "a"
        assert stored["metadata"]["generation"] == generation
        assert STORED_BIND_ENTRY not in envs(stored["spec"]["template"]["spec"])["main"]
        assert kubectl.get("-n", namespace, "job", "before-job")["metadata"]["labels"]["team"] == "a"


# -- (b) 1.35: the webhook -----------------------------------------------------------------------


@pytest.fixture
def workload_webhook(api_client, kubeconfig, namespace, tmp_path):
    name = f"workload-webhook-{RUN_ID}"
    with webhook_registration.serving_one_namespace(api_client, kubeconfig, tmp_path, name, namespace, SCHEDULER) as (
        process,
        configurations,
    ):
        mutating = [w for c in configurations if c["kind"] == "MutatingWebhookConfiguration" for w in c["webhooks"]]
        assert {w["name"] for w in mutating} == {"pods.mutate.gpu-scheduler", "workloads.mutate.gpu-scheduler"}
        probe = statefulset("probe", namespace)
        kubectl = Kubectl(kubeconfig)

        def called() -> None:
            stored = dry_run_create(kubectl, probe)
            if STORED_BIND_ENTRY not in envs(stored["spec"]["template"]["spec"])["main"]:
                raise NotYet("not mutated yet")

        wait_for("the API server to call the webhook for workloads", called, ACTIVE_TIMEOUT)
        yield process


@pytest.mark.compat
def test_below_1_36_the_webhook_gives_the_statefulset_its_entries_and_its_pods_never_call_it(
    api_client, namespace, kubectl, workload_webhook
):
    apply(kubectl, statefulset("train", namespace))
    stored = kubectl.get("-n", namespace, "statefulset", "train")
    assert envs(stored["spec"]["template"]["spec"])["side"] == [STORED_BIND_ENTRY, ORDER_ENTRY]
    assert envs(stored["spec"]["template"]["spec"])["main"] == [
        {"name": "RANK_OF", "value": "train"},
        STORED_BIND_ENTRY,
        ORDER_ENTRY,
    ]
    pod = wait_for_pod(api_client, namespace, "train-0")
    assert envs(pod["spec"]) == envs(stored["spec"]["template"]["spec"])

    # A pod that does call the webhook, created after it and logged: train-0's line would be by now.
    marker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "marker-1", "annotations": {"gpu-scheduling-map": MAP}},
        "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "main", "image": "busybox"}]},
    }
    client.CoreV1Api(api_client).create_namespaced_pod(namespace, marker)

    def logged() -> list[str]:
        lines = workload_webhook.log_path.read_text().splitlines()
        if not any(f"/{marker['metadata']['name']} " in line for line in lines):
            raise NotYet("the marker pod's decision is not logged yet")
        return lines

    lines = wait_for("the webhook's line for the marker pod", logged, 10)
    assert [line for line in lines if f"{namespace}/train-0 " in line] == [], (
        "a pod with every entry called the webhook"
    )
    assert any(f"StatefulSet {namespace}/train" in line for line in lines), "the StatefulSet never reached the webhook"
    assert get_pod(api_client, namespace, "marker-1")["spec"]["containers"][0]["env"][0] == STORED_BIND_ENTRY

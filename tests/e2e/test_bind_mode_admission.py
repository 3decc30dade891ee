"""Bind mode against the real kube-apiserver: the chart's CEL, evaluated where it runs.

The chart's objects are installed as `helm template` renders them for a 1.36+ API server
(templates/bind-policies.yaml, templates/device-annotations-guard.yaml), renamed for this run
and bound to one namespace, for a schedulerName of this run only: no scheduler of another
suite sharing the cluster binds these pods, and no other suite's pods meet these policies.

  (a) The MutatingAdmissionPolicy gives every init container and container that lacks it the
      entry that reads the bind's devices annotation (and CUDA_DEVICE_ORDER), and leaves a pod
      whose containers all have it, a pod without a map and another scheduler's pod untouched.
  (b) After a Binding that carries the device annotations (POSTed here, as the scheduler does),
      the ValidatingAdmissionPolicy refuses changing or removing them, saying to delete the pod
      instead; other annotations, labels and finalizers still change, and the pod is deleted.
  (c) Below 1.36, `gpu-scheduler webhook` with the chart's configurations:
      a pod lacking the entry gets it (and no annotation), one with it never calls the webhook,
      a pod created on a node gets its devices annotation, and a `kubectl debug` container of a
      bound pod reads the pod's devices.
"""

from __future__ import annotations

import copy
import json
import uuid

import pytest
from gpu_scheduler.placement import DEVICES_ANNOTATION, PLACEMENT_ANNOTATION
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import admission_policies, webhook_registration
from .charts import SCHEDULER_CHART, helm_template
from .cluster import ORDER_ENTRY, STORED_BIND_ENTRY, Kubectl, get_pod, ignoring_not_found, status_message
from .components import WebhookProcess
from .isolation import RUN_ID, create_namespace, delete_namespace
from .waiting import NotYet, wait_for

# The MutatingAdmissionPolicy's tests skip below 1.36; the rest also run on 1.35 (compat).
pytestmark = pytest.mark.cluster

SCHEDULER = f"bind-mode-{RUN_ID}"
RELEASE = f"bind-{RUN_ID}"
MUTATING_POLICY_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
TEMPLATES = ("templates/bind-policies.yaml", "templates/device-annotations-guard.yaml")
MAP = "0=node1:0,1\n1=node2:2\n"
ACTIVE_TIMEOUT = 30.0


def pod(name: str, containers: list[dict], init_containers=(), scheduler: str = SCHEDULER, map_text=MAP) -> dict:
    spec = {"schedulerName": scheduler, "automountServiceAccountToken": False, "containers": containers}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    annotations = {"gpu-scheduling-map": map_text} if map_text is not None else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": spec}


def container(name: str, env=None) -> dict:
    found = {"name": name, "image": "busybox"}
    if env is not None:
        found["env"] = copy.deepcopy(env)
    return found


def env_of(created: dict) -> dict[str, list]:
    spec = created["spec"]
    return {c["name"]: c.get("env") for c in spec.get("initContainers", []) + spec["containers"]}


@pytest.fixture(scope="module")
def served(api_client) -> set[str]:
    groups = client.ApisApi(api_client).get_api_versions()
    versions = {v.group_version for g in groups.groups if g.name == "admissionregistration.k8s.io" for v in g.versions}
    resources = client.AdmissionregistrationV1Api(api_client).get_api_resources().resources
    return versions | {f"v1/{r.kind}" for r in resources}


@pytest.fixture(scope="module")
def bind_namespace(api_client):
    name = create_namespace(api_client, "bind-mode", labelled=False)
    yield name
    delete_namespace(api_client, name)


def render(namespace: str, with_mutating_policy: bool) -> list[dict]:
    """The chart's bind-mode objects for this run, bound to `namespace` only."""
    args = ["--set-string", f"schedulerName={SCHEDULER}"]
    if with_mutating_policy:
        args += ["--api-versions", MUTATING_POLICY_API]
    shown = [argument for template in TEMPLATES for argument in ("--show-only", template)]
    if not with_mutating_policy:
        shown = ["--show-only", TEMPLATES[1]]
    documents = helm_template(RELEASE, SCHEDULER_CHART, "gpu-scheduler", *shown, *args)
    return admission_policies.bound_to_namespace(documents, namespace)


@pytest.fixture(scope="module")
def installed(api_client, bind_namespace, served):
    """The chart's bind-mode objects, created (the MutatingAdmissionPolicy where it is served)."""
    documents = render(bind_namespace, MUTATING_POLICY_API.removeprefix("admissionregistration.k8s.io/") in served)
    kinds = sorted(doc["kind"] for doc in documents)
    try:
        admission_policies.create(api_client, documents)
        yield kinds
    finally:
        admission_policies.delete(api_client, documents)


def dry_run_create(api_client, namespace: str, body: dict) -> dict:
    response = client.CoreV1Api(api_client).create_namespaced_pod(
        namespace, body, dry_run="All", _preload_content=False
    )
    return json.loads(response.data)


@pytest.fixture(scope="module")
def mutating(api_client, bind_namespace, installed):
    if "MutatingAdmissionPolicy" not in installed:
        pytest.skip("this API server serves no admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (1.35)")

    def acting() -> None:
        created = dry_run_create(api_client, bind_namespace, pod("probe-0", [container("main")]))
        if env_of(created)["main"] != [STORED_BIND_ENTRY, ORDER_ENTRY]:
            raise NotYet(f"not mutated yet: {env_of(created)}")

    wait_for("the MutatingAdmissionPolicy to act on this namespace's pods", acting, ACTIVE_TIMEOUT)


def test_a_pod_without_entries_gets_them_from_the_policy_and_one_with_them_is_untouched(
    api_client, bind_namespace, mutating
):
    core = client.CoreV1Api(api_client)
    lacking = pod(
        "lacking-0",
        [container("main"), container("sidecar", [{"name": "CUDA_DEVICE_ORDER", "value": "FASTEST_FIRST"}])],
        init_containers=[
            container("fetch", [{"name": "A", "value": "1"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "3"}])
        ],
    )
    core.create_namespaced_pod(bind_namespace, lacking)
    assert env_of(get_pod(api_client, bind_namespace, "lacking-0")) == {
        "fetch": [{"name": "A", "value": "1"}, STORED_BIND_ENTRY, ORDER_ENTRY],
        "main": [STORED_BIND_ENTRY, ORDER_ENTRY],
        # A container that orders its GPUs itself keeps its choice.
        "sidecar": [{"name": "CUDA_DEVICE_ORDER", "value": "FASTEST_FIRST"}, STORED_BIND_ENTRY],
    }

    written = [STORED_BIND_ENTRY, {"name": "EPOCHS", "value": "10"}]
    complete = pod(
        "complete-1", [container("main", written)], init_containers=[container("fetch", [STORED_BIND_ENTRY])]
    )
    core.create_namespaced_pod(bind_namespace, complete)
    assert env_of(get_pod(api_client, bind_namespace, "complete-1")) == {"fetch": [STORED_BIND_ENTRY], "main": written}


@pytest.mark.parametrize(
    "untouched",
    [
        pod("no-map-0", [container("main")], map_text=None),
        pod("other-0", [container("main")], scheduler="default-scheduler"),
    ],
    ids=["ours-without-a-map", "another-schedulers"],
)
def test_pods_that_are_not_ours_with_a_map_are_not_mutated(api_client, bind_namespace, mutating, untouched):
    assert env_of(dry_run_create(api_client, bind_namespace, untouched)) == {"main": None}


def bind(api_client, namespace: str, name: str, node: str, devices: str, index: int) -> None:
    """What the scheduler's Binding does: the node and the device annotations in one write."""
    placement = json.dumps({"index": index, "node": node, "cudaVisibleDevices": devices}, separators=(",", ":"))
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": {DEVICES_ANNOTATION: devices, PLACEMENT_ANNOTATION: placement}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    # Not read back: the API server answers a Status, which the client cannot read as a Binding.
    client.CoreV1Api(api_client).create_namespaced_pod_binding(name, namespace, body, _preload_content=False)


@pytest.fixture
def bound(api_client, bind_namespace, installed, kubeconfig):
    """A pod of ours bound to node1 with devices 0,1 by a Binding, and the guard seen acting on it."""
    # A name of its own each time: a pod deleted a moment ago may still be on its way out.
    name = f"bound-{uuid.uuid4().hex[:6]}-0"
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(bind_namespace, pod(name, [container("main", [STORED_BIND_ENTRY, ORDER_ENTRY])]))
    bind(api_client, bind_namespace, name, "node1", "0,1", 0)
    kubectl = Kubectl(kubeconfig)

    def guarding() -> None:
        tried = kubectl.kubectl(
            "-n",
            bind_namespace,
            "annotate",
            "--overwrite",
            "--dry-run=server",
            f"pod/{name}",
            f"{DEVICES_ANNOTATION}=9",
        )
        if tried.returncode == 0:
            raise NotYet("a dry-run change of the devices annotation was admitted")

    wait_for("the device annotations' guard to act on this namespace's pods", guarding, ACTIVE_TIMEOUT)
    yield name, kubectl
    ignoring_not_found(core.delete_namespaced_pod, name, bind_namespace, grace_period_seconds=0)


@pytest.mark.compat
def test_the_binding_writes_the_node_and_the_device_annotations_in_one_write(api_client, bind_namespace, bound):
    name, _ = bound
    stored = get_pod(api_client, bind_namespace, name)
    assert stored["spec"]["nodeName"] == "node1"
    assert stored["metadata"]["annotations"][DEVICES_ANNOTATION] == "0,1"
    assert json.loads(stored["metadata"]["annotations"][PLACEMENT_ANNOTATION]) == {
        "index": 0,
        "node": "node1",
        "cudaVisibleDevices": "0,1",
    }


@pytest.mark.compat
@pytest.mark.parametrize(
    ("key", "change", "was", "now"),
    [
        (DEVICES_ANNOTATION, [f"{DEVICES_ANNOTATION}=2", "--overwrite"], "0,1", "2"),
        (DEVICES_ANNOTATION, [f"{DEVICES_ANNOTATION}-"], "0,1", "removed"),
        (PLACEMENT_ANNOTATION, [f"{PLACEMENT_ANNOTATION}={{}}", "--overwrite"], '{"index":0', "{}"),
        (PLACEMENT_ANNOTATION, [f"{PLACEMENT_ANNOTATION}-"], '{"index":0', "removed"),
    ],
    ids=["devices-overwritten", "devices-removed", "placement-overwritten", "placement-removed"],
)
def test_a_device_annotation_once_bound_cannot_change_and_the_refusal_says_to_delete_the_pod(
    api_client, bind_namespace, bound, key, change, was, now
):
    name, kubectl = bound
    refused = kubectl.kubectl("-n", bind_namespace, "annotate", f"pod/{name}", *change)

    assert refused.returncode != 0, refused.stdout
    message = refused.stderr
    assert f"pod {bind_namespace}/{name}: the annotation {key} was written when the pod was bound" in message
    assert f"(was {was}" in message and f"now {now})" in message
    assert "delete it and create it again" in message
    assert get_pod(api_client, bind_namespace, name)["metadata"]["annotations"][DEVICES_ANNOTATION] == "0,1"


@pytest.mark.compat
def test_other_edits_of_a_bound_pod_pass_and_it_is_deleted(api_client, bind_namespace, bound):
    name, kubectl = bound
    kubectl.ok("-n", bind_namespace, "annotate", f"pod/{name}", "example.com/owner=team-a")
    kubectl.ok("-n", bind_namespace, "annotate", "--overwrite", f"pod/{name}", "gpu-scheduling-map=0=node1:0,1")
    kubectl.ok("-n", bind_namespace, "label", f"pod/{name}", "team=a")
    add = json.dumps({"metadata": {"finalizers": ["example.com/hold"]}})
    kubectl.ok("-n", bind_namespace, "patch", f"pod/{name}", "--type=merge", "-p", add)
    # The devices annotation written again with its own value is no change.
    kubectl.ok("-n", bind_namespace, "annotate", "--overwrite", f"pod/{name}", f"{DEVICES_ANNOTATION}=0,1")

    stored = get_pod(api_client, bind_namespace, name)
    assert stored["metadata"]["labels"] == {"team": "a"}
    assert stored["metadata"]["annotations"]["example.com/owner"] == "team-a"

    kubectl.ok("-n", bind_namespace, "delete", f"pod/{name}", "--wait=false")
    # Held by the finalizer: marked for deletion, then released by an UPDATE the guard passes.
    assert get_pod(api_client, bind_namespace, name)["metadata"].get("deletionTimestamp")
    kubectl.ok(
        "-n",
        bind_namespace,
        "patch",
        f"pod/{name}",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/metadata/finalizers"}]',
    )

    def gone() -> None:
        try:
            client.CoreV1Api(api_client).read_namespaced_pod(name, bind_namespace)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        raise NotYet("the pod is still there")

    wait_for(f"pod {name} to be deleted", gone, 60)


@pytest.mark.compat
def test_devices_written_on_a_pod_before_its_bind_are_replaced_by_the_binding(
    api_client, bind_namespace, installed, kubeconfig
):
    """Before the bind nothing guards the annotation (its old object has none), and once set
    by hand the guard keeps hands off it; but the Binding, a CREATE of pods/binding, writes the
    scheduler's devices over it: a pod cannot choose its own GPUs."""
    name = f"pending-{uuid.uuid4().hex[:6]}-1"
    core = client.CoreV1Api(api_client)
    kubectl = Kubectl(kubeconfig)
    core.create_namespaced_pod(bind_namespace, pod(name, [container("main", [STORED_BIND_ENTRY, ORDER_ENTRY])]))
    try:
        kubectl.ok("-n", bind_namespace, "annotate", f"pod/{name}", f"{DEVICES_ANNOTATION}=0,1,2,3")
        refused = kubectl.kubectl(
            "-n", bind_namespace, "annotate", "--overwrite", f"pod/{name}", f"{DEVICES_ANNOTATION}=3"
        )
        assert refused.returncode != 0 and "cannot change" in refused.stderr, refused.stderr

        bind(api_client, bind_namespace, name, "node2", "2", 1)

        annotations = get_pod(api_client, bind_namespace, name)["metadata"]["annotations"]
        assert annotations[DEVICES_ANNOTATION] == "2"
        assert json.loads(annotations[PLACEMENT_ANNOTATION])["cudaVisibleDevices"] == "2"
    except ApiException as err:
        raise AssertionError(status_message(err.body)) from None
    finally:
        ignoring_not_found(core.delete_namespaced_pod, name, bind_namespace, grace_period_seconds=0)


# -- (c) below 1.36: the webhook in bind mode, registered as the chart registers it ----------------


@pytest.fixture(scope="module")
def webhook_namespace(api_client):
    name = create_namespace(api_client, "bind-webhook", labelled=False)
    yield name
    delete_namespace(api_client, name)


@pytest.fixture(scope="module")
def bind_webhook(api_client, kubeconfig, webhook_namespace, tmp_path_factory):
    """`gpu-scheduler webhook` for this run's schedulerName, registered with
    the chart's configurations as a 1.35 API server gets them (no
    MutatingAdmissionPolicy: the webhook gives the entry), for `webhook_namespace` only."""
    name = f"bind-webhook-{RUN_ID}"
    directory = tmp_path_factory.mktemp("bind-webhook")
    with webhook_registration.serving_one_namespace(
        api_client, kubeconfig, directory, name, webhook_namespace, SCHEDULER
    ) as (process, configurations):
        (mutating_webhook,) = [
            w
            for c in configurations
            if c["kind"] == "MutatingWebhookConfiguration"
            for w in c["webhooks"]
            if w["name"] == "pods.mutate.gpu-scheduler"
        ]
        assert "needs-the-webhook" in {c["name"] for c in mutating_webhook["matchConditions"]}

        def called() -> None:
            created = dry_run_create(api_client, webhook_namespace, pod("probe-0", [container("main")]))
            if env_of(created)["main"] != [STORED_BIND_ENTRY, ORDER_ENTRY]:
                raise NotYet(f"not mutated yet: {env_of(created)}")

        wait_for("the API server to call the bind-mode webhook", called, ACTIVE_TIMEOUT)
        yield process


def calls_for(process: WebhookProcess, pod_name: str) -> list[str]:
    """The webhook's log lines of its decisions on `pod_name`."""
    return [line for line in process.log_path.read_text().splitlines() if f"/{pod_name} " in line]


def wait_for_call(process: WebhookProcess, pod_name: str) -> None:
    """Until the webhook logged its decision on `pod_name` (its workers write after answering)."""

    def logged() -> None:
        if not calls_for(process, pod_name):
            raise NotYet(f"no line for {pod_name} in {process.log_path}")

    wait_for(f"the webhook's log line for {pod_name}", logged, 10)


@pytest.mark.compat
def test_the_webhook_gives_the_entry_to_a_pod_lacking_it_and_never_sees_one_that_has_it(
    api_client, webhook_namespace, bind_webhook
):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(
        webhook_namespace, pod("lacking-0", [container("main")], init_containers=[container("fetch")])
    )
    stored = get_pod(api_client, webhook_namespace, "lacking-0")
    assert env_of(stored) == {"fetch": [STORED_BIND_ENTRY, ORDER_ENTRY], "main": [STORED_BIND_ENTRY, ORDER_ENTRY]}
    # The scheduler's Binding writes the annotations, not the webhook.
    assert DEVICES_ANNOTATION not in stored["metadata"]["annotations"]
    assert PLACEMENT_ANNOTATION not in stored["metadata"]["annotations"]
    wait_for_call(bind_webhook, "lacking-0")

    core.create_namespaced_pod(
        webhook_namespace, pod("complete-1", [container("main", [STORED_BIND_ENTRY, ORDER_ENTRY])])
    )
    assert env_of(get_pod(api_client, webhook_namespace, "complete-1")) == {"main": [STORED_BIND_ENTRY, ORDER_ENTRY]}
    # A pod created after it that does call the webhook, logged: the first would be by now.
    core.create_namespaced_pod(webhook_namespace, pod("marker-2", [container("main")]))
    wait_for_call(bind_webhook, "marker-2")
    assert calls_for(bind_webhook, "complete-1") == [], "a pod with the entry in every container called the webhook"


@pytest.mark.compat
def test_a_pod_created_on_a_node_gets_its_devices_annotation_from_the_webhook(
    api_client, webhook_namespace, bind_webhook
):
    on_node = pod("on-node-1", [container("main", [STORED_BIND_ENTRY, ORDER_ENTRY])])
    on_node["spec"]["nodeName"] = "node2"
    client.CoreV1Api(api_client).create_namespaced_pod(webhook_namespace, on_node)

    annotations = get_pod(api_client, webhook_namespace, "on-node-1")["metadata"]["annotations"]
    assert annotations[DEVICES_ANNOTATION] == "2"
    assert json.loads(annotations[PLACEMENT_ANNOTATION]) == {"index": 1, "node": "node2", "cudaVisibleDevices": "2"}

    # Without a map no line says its devices: refused, as no scheduler will ever check it.
    unmapped = pod("unmapped-0", [container("main", [STORED_BIND_ENTRY, ORDER_ENTRY])], map_text=None)
    unmapped["spec"]["nodeName"] = "node1"
    with pytest.raises(ApiException) as refused:
        dry_run_create(api_client, webhook_namespace, unmapped)
    assert "has no gpu-scheduling-map annotation" in status_message(refused.value.body)


@pytest.mark.compat
def test_a_debug_container_of_a_bound_pod_reads_the_pods_devices(
    api_client, webhook_namespace, bind_webhook, kubeconfig
):
    client.CoreV1Api(api_client).create_namespaced_pod(
        webhook_namespace, pod("debugged-0", [container("main", [STORED_BIND_ENTRY, ORDER_ENTRY])])
    )
    bind(api_client, webhook_namespace, "debugged-0", "node1", "0,1", 0)
    Kubectl(kubeconfig).ok(
        "-n", webhook_namespace, "debug", "pod/debugged-0", "--image=busybox", "--container=debugger", "--", "true"
    )

    (debugger,) = get_pod(api_client, webhook_namespace, "debugged-0")["spec"]["ephemeralContainers"]
    assert debugger["name"] == "debugger"
    assert debugger["env"] == [STORED_BIND_ENTRY, ORDER_ENTRY]

"""Updates and debug containers through the real API server, with the chart's own webhook
configurations (tests/e2e/webhook_registration.py renders them with `helm template`).

- An update that leaves the map alone is never refused for the map: the Job controller
  removing its finalizer from a finished pod whose map is broken goes through, and so does
  every such update while no webhook answers at all (the chart's map-changed-on-update
  matchCondition keeps them from the webhook). A change to the map is still judged.
- `kubectl debug` adds an ephemeral container to a running pod of ours: it gets the devices
  of its pod, and a second one can be added (the first is never rewritten, which the API
  server would refuse).
- CronJobs, ReplicaSets and DaemonSets with a broken map are refused at creation.
"""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from . import webhook_registration
from .charts import KUBECTL
from .cluster import create, env_seen, get_pod, ignoring_not_found, wait_for_pods
from .components import make_certs
from .isolation import RUN_ID, bring_under_webhook
from .processes import free_port
from .waiting import NotYet, wait_for
from .workloads import (
    MAP_ANNOTATION,
    PLACEMENT_ANNOTATION,
    bare_pod,
    container,
    indexed_job,
    mapped_controller,
    replicaset,
)

pytestmark = pytest.mark.e2e

BROKEN_MAP = "0=node1\n"  # line 1 has no ":<devices>"
JOB_FINALIZER = "batch.kubernetes.io/job-tracking"
HOLD = "gpu-scheduler-e2e/hold"
ORDER = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


def refused(call) -> ApiException:
    """The API server's refusal of call(), however the client wraps it."""
    with pytest.raises((ApiException, utils.FailToCreateError)) as raised:
        call()
    error = raised.value
    return error.api_exceptions[0] if isinstance(error, utils.FailToCreateError) else error


@pytest.mark.local_only
def test_the_job_controller_removes_its_finalizer_from_a_finished_pod_whose_map_is_broken(
    api_client, product, new_namespace
):
    """A Job whose pods existed before the webhook covered their namespace, with a broken map.
    When its pod fails, the Job controller's UPDATE removing the tracking finalizer must be
    admitted; before, /validate judged the whole (unchanged) map and refused it, so the pod
    kept its finalizer and the Job never finished."""
    namespace = new_namespace("e2e-finalizer", labelled=False)
    create(api_client, namespace, [indexed_job("sweep", BROKEN_MAP, completions=1, parallelism=1)])
    core = client.CoreV1Api(api_client)

    def tracked_pod() -> dict:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=sweep").to_dict()["items"]
        if not pods or JOB_FINALIZER not in (pods[0]["metadata"].get("finalizers") or []):
            raise NotYet(f"pods: {[p['metadata']['name'] for p in pods]}")
        return pods[0]

    name = wait_for("the Job's pod with its tracking finalizer", tracked_pod, 30)["metadata"]["name"]
    bring_under_webhook(api_client, namespace)
    webhook_registration.wait_until_called(api_client, namespace)
    # The webhook does see this pod's updates: a change to its map is judged (dry run).
    change = refused(
        lambda: core.patch_namespaced_pod(
            name, namespace, {"metadata": {"annotations": {MAP_ANNOTATION: "0=node2\n"}}}, dry_run="All"
        )
    )
    assert change.status == 422 and "line 1:" in change.body, change.body

    # What the kubelet reports when the pod's container fails; the Job controller then
    # counts the failure and removes its finalizer with an UPDATE of the pod.
    core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Failed"}})

    def finalizer_removed() -> dict:
        pod = get_pod(api_client, namespace, name)
        if JOB_FINALIZER in (pod["metadata"].get("finalizers") or []):
            raise NotYet(f"finalizers {pod['metadata'].get('finalizers')}")
        return pod

    pod = wait_for(f"the Job controller to remove {JOB_FINALIZER} from {name}", finalizer_removed, 30)
    assert pod["metadata"]["annotations"][MAP_ANNOTATION] == BROKEN_MAP


@pytest.mark.local_only
def test_updates_that_leave_the_map_alone_pass_while_no_webhook_answers(api_client, product, new_namespace, tmp_path):
    """The chart's configurations, pointed at a port where nothing listens, their validating
    webhooks set to failurePolicy Fail (the chart's are Ignore, which would let every update
    through and hide whether the webhook was called): changes to the map are refused, but a
    finalizer removal, a label or a rollout restart of our objects never reach a webhook that
    fails closed, so its outage cannot block them. (A rollout restart of a StatefulSet whose
    template lacks the bind entry reaches workloads.mutate, whose Ignore the chart sets and
    this test keeps.)"""
    namespace = new_namespace("e2e-outage", labelled=False)
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    pod = bare_pod("held-0", "0=node1:0\n")
    pod["metadata"]["finalizers"] = [HOLD]
    statefulset = mapped_controller("StatefulSet", "idle", BROKEN_MAP, replicas=0, serviceName="idle")
    create(api_client, namespace, [pod, statefulset])

    dead_label = ("gpu-scheduler-e2e/dead-webhook", RUN_ID)
    name = f"gpu-scheduler-e2e-dead-{RUN_ID}"
    certs = make_certs(tmp_path / "certs")  # a CA nothing serves with: no webhook answers at all
    configurations = webhook_registration.render(
        name, f"https://127.0.0.1:{free_port()}", certs.ca_bundle, namespace_label=dead_label
    )
    for configuration in configurations:
        if configuration["kind"] == "ValidatingWebhookConfiguration":
            for webhook in configuration["webhooks"]:
                webhook["failurePolicy"] = "Fail"
    try:
        webhook_registration.apply(api_client, configurations)
        core.patch_namespace(namespace, {"metadata": {"labels": {dead_label[0]: dead_label[1]}}})

        def map_change_refused() -> ApiException:
            try:
                core.patch_namespaced_pod(
                    "held-0", namespace, {"metadata": {"annotations": {MAP_ANNOTATION: "0=node2:0\n"}}}, dry_run="All"
                )
            except ApiException as err:
                if "failed calling webhook" in (err.body or ""):
                    return err
                raise
            raise NotYet("a map change was admitted: the API server has not picked up the configuration yet")

        wait_for("the API server to send map changes to the dead webhook", map_change_refused, 30)

        core.patch_namespaced_pod("held-0", namespace, {"metadata": {"labels": {"touched": "yes"}}})
        core.patch_namespaced_pod("held-0", namespace, {"metadata": {"finalizers": None}})
        restart = {"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"}
        apps.patch_namespaced_stateful_set(
            "idle", namespace, {"spec": {"template": {"metadata": {"annotations": restart}}}}
        )
        apps.patch_namespaced_stateful_set("idle", namespace, {"spec": {"replicas": 0, "minReadySeconds": 1}})

        template_change = refused(
            lambda: apps.patch_namespaced_stateful_set(
                "idle", namespace, {"spec": {"template": {"metadata": {"annotations": {MAP_ANNOTATION: "0=node2\n"}}}}}
            )
        )
        assert "failed calling webhook" in template_change.body, template_change.body
        held = core.read_namespaced_pod("held-0", namespace)
        assert not held.metadata.finalizers and held.metadata.labels["touched"] == "yes"
    finally:
        webhook_registration.delete(api_client, name)
        # Should the test stop early, the finalizer must not keep the namespace from going.
        ignoring_not_found(core.patch_namespaced_pod, "held-0", namespace, {"metadata": {"finalizers": None}})


def kubectl_debug(kubeconfig: str, namespace: str, pod: str, container_name: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(KUBECTL),
            "--kubeconfig",
            kubeconfig,
            "debug",
            "-n",
            namespace,
            pod,
            f"--image={container('x')['image']}",
            f"--container={container_name}",
            "--",
            "true",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_kubectl_debug_gives_each_new_debug_container_the_pods_devices(kubeconfig, api_client, product, ns):
    create(api_client, ns, [bare_pod("debugged-2", "2=node3:0,1\n")])
    # Bound first: what a container sees through a fieldRef on the bind's annotation is there
    # only once the pod is bound (a literal is there from creation).
    (pod,) = wait_for_pods(api_client, ns, 1, timeout=30)
    assert env_seen(pod, pod["spec"]["containers"][0])["CUDA_VISIBLE_DEVICES"] == "0,1"

    first = kubectl_debug(kubeconfig, ns, "debugged-2", "debugger-1")
    assert first.returncode == 0, first.stderr
    # The second request carries the first container unchanged; patching it again (as the
    # webhook once would have) makes the API server refuse the whole request.
    second = kubectl_debug(kubeconfig, ns, "debugged-2", "debugger-2")
    assert second.returncode == 0, second.stderr

    pod = get_pod(api_client, ns, "debugged-2")
    debuggers = {c["name"]: env_seen(pod, c) for c in pod["spec"]["ephemeralContainers"]}
    expected = {"CUDA_VISIBLE_DEVICES": "0,1", ORDER[0]: ORDER[1]}
    assert debuggers == {"debugger-1": expected, "debugger-2": expected}
    assert PLACEMENT_ANNOTATION in pod["metadata"]["annotations"]


def cronjob(name: str, scheduling_map: str) -> dict:
    job = indexed_job(name, scheduling_map, completions=1, parallelism=1)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job["spec"]}},
    }


def daemonset(name: str, scheduling_map: str) -> dict:
    return mapped_controller("DaemonSet", name, scheduling_map)


@pytest.mark.parametrize("make", [cronjob, replicaset, daemonset], ids=lambda make: make.__name__)
def test_workloads_of_every_registered_kind_with_a_broken_map_are_refused_naming_the_line(
    api_client, product, ns, make
):
    workload = make("broken", BROKEN_MAP)
    error = refused(lambda: create(api_client, ns, [workload]))
    assert error.status == 422, error.body
    assert f"{workload['kind']} {ns}/broken" in error.body
    assert "line 1:" in error.body

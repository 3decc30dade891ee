"""`gpu-scheduler scheduler` as a real process against the real local API server.

Each test runs its own scheduler processes under a scheduler name of its
own, in a namespace of its own, so nothing else on the cluster (another
test's scheduler, say) touches its pods. Assertions read the cluster through
the kubernetes client, independently of the scheduler's own API code.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e import waiting
from e2e.cluster import BIND_ENTRY, DEVICES_FIELD_PATH, container_env, delete_fake_node, get_pod, with_bind_entries
from e2e.processes import free_port
from gpu_scheduler.placement import TOTAL_ANNOTATION_BYTES, annotation_bytes, bind_annotations, parse_map
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.cluster

MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n"
EXPECTED_NODES = {"job-0": "node1", "job-1": "node2", "job-2": "node3", "job-3": "node4"}
EXPECTED_GPUS = {"job-0": "0,1", "job-1": "2", "job-2": "0,1,2", "job-3": "3"}


def wait_until(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    """e2e.waiting's wait_until, in the order this file's many calls give: condition first."""
    return waiting.wait_until(what, condition, timeout, interval)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


class SchedulerProcess:
    """One `gpu-scheduler scheduler` subprocess with its log and probe port."""

    def __init__(self, kubeconfig: str, log_dir: Path, name: str, *args: str) -> None:
        self.port = free_port()
        self.log_path = log_dir / f"scheduler-{uuid.uuid4().hex[:6]}.log"
        self._log = self.log_path.open("w")
        command = [
            sys.executable,
            "-m",
            "gpu_scheduler",
            "scheduler",
            "--kubeconfig",
            kubeconfig,
            "--scheduler-name",
            name,
            "--metrics-port",
            str(self.port),
            "--bind-address",
            "127.0.0.1",
            *args,
        ]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ready(self, timeout: float = 15) -> None:
        wait_until(
            lambda: self.process.poll() is not None or http_status(self.url("/readyz")) == 200,
            timeout,
            "/readyz to answer 200",
        )
        assert self.process.poll() is None, f"scheduler exited early:\n{self.log()}"

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url("/metrics"), timeout=2) as response:
            return response.read().decode()

    def terminate(self, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text()


@pytest.fixture
def start_scheduler(kubeconfig, namespace, tmp_path):
    """start_scheduler(*flags) -> a ready SchedulerProcess for this test's scheduler name."""
    name = f"sched-{uuid.uuid4().hex[:8]}"
    started: list[SchedulerProcess] = []

    def start(*args: str, wait: bool = True) -> SchedulerProcess:
        process = SchedulerProcess(kubeconfig, tmp_path, name, "--namespace", namespace, *args)
        started.append(process)
        if wait:
            process.wait_ready()
        return process

    start.scheduler_name = name
    yield start
    for process in started:
        process.kill()


@pytest.fixture
def core(api_client):
    return client.CoreV1Api(api_client)


def make_pod(
    core,
    namespace: str,
    name: str,
    scheduler_name: str,
    map_text: str = MAP,
    *,
    spec: dict | None = None,
    labels: dict | None = None,
    annotations: dict | None = None,
    requests: dict | None = None,
    bind_entries: bool = True,
) -> None:
    """Creates a pod of `scheduler_name`. Its containers without a CUDA_VISIBLE_DEVICES entry get
    the one the README gives (the bind's devices through the downward API), unless
    `bind_entries` is False: the scheduler binds no pod with a map whose containers lack it."""
    container = {"name": "main", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": requests}
    pod_spec = {"schedulerName": scheduler_name, "containers": [container], **(spec or {})}
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {
                "name": name,
                "labels": labels or {},
                "annotations": {"gpu-scheduling-map": map_text, **(annotations or {})},
            },
            "spec": with_bind_entries(pod_spec) if bind_entries else pod_spec,
        },
    )


def node_of(core, namespace: str, name: str) -> str | None:
    return core.read_namespaced_pod(name, namespace).spec.node_name


def events_of(api_client, namespace: str, pod: str, reason: str) -> list:
    events = client.EventsV1Api(api_client).list_namespaced_event(namespace).items
    return [e for e in events if e.regarding.name == pod and e.reason == reason]


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@pytest.fixture
def kwok_node(core):
    """kwok_node(name, alias, taints=..., labels=..., resources=...) creates a Ready KWOK node;
    it and its pods go after the test. With wait_untainted, it returns once the node controller
    has lifted the not-ready taint the API server puts on every new node."""
    created: list[str] = []

    def create(
        name: str,
        alias: str | None = None,
        *,
        taints: tuple[dict, ...] = (),
        labels: dict | None = None,
        resources: dict | None = None,
        wait_untainted: bool = False,
    ) -> None:
        resources = resources or {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"}
        core.create_node(
            {
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"type": "kwok-test", **({"gpu-node-name": alias} if alias else {}), **(labels or {})},
                },
                "spec": {"taints": list(taints)},
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kwok node"}
                    ],
                },
            }
        )
        created.append(name)
        if wait_untainted:
            wait_until(
                lambda: not any(t.key == NOT_READY_TAINT for t in core.read_node(name).spec.taints or ()),
                60,
                f"the not-ready taint to leave node {name}",
                interval=0.5,
            )

    yield create
    for name in created:
        delete_fake_node(core.api_client, name)


def test_a_pod_the_bind_would_push_past_the_annotation_limit_is_refused_and_one_at_the_limit_runs(
    start_scheduler, core, api_client, namespace
):
    """Seen on kube-apiserver 1.37: a Binding's annotations are stored without the 256 KiB check,
    and the pod is then refused every update, the status its node writes included. The pod one
    byte over is refused, saying so; the one at the limit is bound and its status still written."""
    start_scheduler("--leader-elect=false")
    map_text = "0=node1:0,1\n"
    bind = annotation_bytes(bind_annotations(parse_map(map_text)[0]))
    for name, spare in (("at-limit-0", 0), ("over-limit-0", -1)):
        used = len("gpu-scheduling-map") + len(map_text) + len("example.com/notes") + bind
        notes = {"example.com/notes": "x" * (TOTAL_ANNOTATION_BYTES - used - spare)}
        make_pod(core, namespace, name, start_scheduler.scheduler_name, map_text, annotations=notes)

    wait_until(lambda: node_of(core, namespace, "at-limit-0"), 10, "at-limit-0 to be bound")
    # The node's status update is accepted: kwok marks the bound pod Running.
    wait_until(
        lambda: core.read_namespaced_pod("at-limit-0", namespace).status.phase == "Running", 20, "at-limit-0 Running"
    )
    refused = wait_until(
        lambda: [e.note for e in events_of(api_client, namespace, "over-limit-0", "FailedScheduling")],
        10,
        "a FailedScheduling event about over-limit-0",
    )
    assert f"would be {TOTAL_ANNOTATION_BYTES + 1} bytes" in refused[0] and "its Binding would add" in refused[0]
    assert node_of(core, namespace, "over-limit-0") is None


def test_bare_pods_are_bound_to_their_map_nodes_with_scheduled_events(start_scheduler, core, api_client, namespace):
    scheduler = start_scheduler("--leader-elect=false")
    assert http_status(scheduler.url("/healthz")) == 200
    for name in EXPECTED_NODES:
        make_pod(core, namespace, name, start_scheduler.scheduler_name)

    for name, node in EXPECTED_NODES.items():
        wait_until(lambda name=name: node_of(core, namespace, name), 10, f"{name} to be bound")
        assert node_of(core, namespace, name) == node
        # What the container sees: its entry reads the devices the bind wrote on the pod.
        stored = get_pod(api_client, namespace, name)
        assert container_env(stored) == {"main": EXPECTED_GPUS[name]}, stored["metadata"].get("annotations")
    for name, node in EXPECTED_NODES.items():
        events = wait_until(
            lambda name=name: events_of(api_client, namespace, name, "Scheduled"), 10, f"the Scheduled event of {name}"
        )
        assert len(events) == 1
        assert events[0].type == "Normal"
        assert events[0].note == (f"Successfully assigned {namespace}/{name} to {node} with GPUs {EXPECTED_GPUS[name]}")
        assert events[0].reporting_controller == start_scheduler.scheduler_name
    metrics = scheduler.metrics()
    assert 'gpu_scheduler_schedule_attempts_total{result="scheduled"} 4.0' in metrics
    assert 'gpu_scheduler_gpus_held{node="node3"} 3.0' in metrics
    assert "gpu_scheduler_leader 1.0" in metrics


def test_a_pod_waiting_for_a_missing_node_is_bound_as_soon_as_the_node_appears(
    start_scheduler, core, api_client, namespace, kwok_node
):
    alias = f"late-{uuid.uuid4().hex[:6]}"
    scheduler = start_scheduler("--leader-elect=false")
    make_pod(core, namespace, "late-0", start_scheduler.scheduler_name, f"0={alias}:1\n")

    failed = wait_until(
        lambda: events_of(api_client, namespace, "late-0", "FailedScheduling"), 10, "a FailedScheduling event"
    )
    assert failed[0].type == "Warning"
    assert f"node {alias} not found" in failed[0].note
    # Retries come 1, 2, 4, 8 s apart: after the 4th the next is ~8 s off, so
    # only the node event can explain a bind within 3 s of the node's creation.
    wait_until(lambda: 'result="unschedulable"} 4.0' in scheduler.metrics(), 15, "4 failed attempts", interval=0.05)
    assert node_of(core, namespace, "late-0") is None

    created = time.monotonic()
    kwok_node(f"{alias}-host", alias)
    wait_until(lambda: node_of(core, namespace, "late-0"), 10, "late-0 to be bound")
    assert time.monotonic() - created < 3
    assert node_of(core, namespace, "late-0") == f"{alias}-host"
    # Repeated failures for the same reason are one Event, not one per retry. (A new node
    # may also be refused once for its node.kubernetes.io/not-ready taint, which the API
    # server's admission puts on every new node until the node controller sees it Ready.)
    not_found = [e for e in events_of(api_client, namespace, "late-0", "FailedScheduling") if "not found" in e.note]
    assert len(not_found) == 1


def test_deny_policy_refuses_a_held_gpu_until_its_holder_is_gone(start_scheduler, core, api_client, namespace):
    start_scheduler("--leader-elect=false", "--gpu-sharing=deny")
    make_pod(core, namespace, "first-0", start_scheduler.scheduler_name, "0=node1:3\n")
    wait_until(lambda: node_of(core, namespace, "first-0"), 10, "first-0 to be bound")
    make_pod(core, namespace, "second-0", start_scheduler.scheduler_name, "0=node1:3\n")

    refused = wait_until(
        lambda: events_of(api_client, namespace, "second-0", "FailedScheduling"), 10, "second-0 to be refused"
    )
    assert f"GPU 3 by {namespace}/first-0" in refused[0].note
    assert "--gpu-sharing=deny" in refused[0].note
    assert node_of(core, namespace, "second-0") is None

    core.delete_namespaced_pod("first-0", namespace, grace_period_seconds=0)
    wait_until(lambda: node_of(core, namespace, "second-0"), 10, "second-0 to be bound once first-0 is gone")
    assert node_of(core, namespace, "second-0") == "node1"


def test_pods_created_while_no_scheduler_ran_are_placed_at_start(start_scheduler, core, namespace):
    for name in EXPECTED_NODES:
        make_pod(core, namespace, name, start_scheduler.scheduler_name)
    time.sleep(1)
    assert all(node_of(core, namespace, name) is None for name in EXPECTED_NODES)

    start_scheduler("--leader-elect=false")
    for name, node in EXPECTED_NODES.items():
        assert wait_until(lambda name=name: node_of(core, namespace, name), 10, f"{name} bound") == node


def lease_holder(api_client, namespace: str, name: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return lease.spec.holder_identity or ""


FAST_LEASE = ("--leader-elect-lease-duration=4", "--leader-elect-renew-deadline=3", "--leader-elect-retry-period=0.5")


def competing_for(namespace: str, lease: str) -> tuple[str, ...]:
    """The flags of a replica competing for the Lease `lease` in `namespace`, with FAST_LEASE's timing."""
    return (
        "--leader-elect=true",
        f"--leader-elect-resource-namespace={namespace}",
        f"--leader-elect-resource-name={lease}",
        *FAST_LEASE,
    )


def test_sigterm_hands_the_lease_back_and_exits_zero(start_scheduler, api_client, namespace):
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    scheduler = start_scheduler(*competing_for(namespace, lease))
    holder = wait_until(lambda: lease_holder(api_client, namespace, lease), 10, "the lease to be taken")
    assert holder.startswith(socket.gethostname() + "_")
    wait_until(lambda: "gpu_scheduler_leader 1.0" in scheduler.metrics(), 5, "the leader gauge")

    assert scheduler.terminate() == 0
    assert lease_holder(api_client, namespace, lease) == ""


def test_two_replicas_bind_every_pod_exactly_once_and_the_standby_takes_over(
    start_scheduler, core, api_client, namespace
):
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    flags = competing_for(namespace, lease)
    first = start_scheduler(*flags)
    wait_until(lambda: lease_holder(api_client, namespace, lease), 10, "a leader")
    second = start_scheduler(*flags)
    names = [f"job-{i}" for i in range(40)]
    map_text = "".join(f"{i}=node{i % 4 + 1}:{i % 4}\n" for i in range(len(names) + 5))
    for name in names:
        make_pod(core, namespace, name, start_scheduler.scheduler_name, map_text)
    for name in names:
        wait_until(lambda name=name: node_of(core, namespace, name), 15, f"{name} to be bound")

    def scheduled_events():
        events = client.EventsV1Api(api_client).list_namespaced_event(namespace).items
        return [e.regarding.name for e in events if e.reason == "Scheduled"]

    # Events are sent after binding, off the hot path: wait for them, then
    # check there is exactly one per pod.
    wait_until(lambda: len(scheduled_events()) >= len(names), 15, "a Scheduled event per pod")
    assert sorted(scheduled_events()) == sorted(names)

    leader, standby = (first, second) if "gpu_scheduler_leader 1.0" in first.metrics() else (second, first)
    assert "gpu_scheduler_leader 0.0" in standby.metrics()
    # One binding call per pod, all by the leader.
    assert f"gpu_scheduler_binding_duration_seconds_count {len(names)}.0" in leader.metrics()
    assert "gpu_scheduler_binding_duration_seconds_count 0.0" in standby.metrics()
    assert leader.terminate() == 0
    make_pod(core, namespace, "job-44", start_scheduler.scheduler_name, map_text)
    wait_until(lambda: node_of(core, namespace, "job-44"), 10, "the standby to bind job-44")
    assert "gpu_scheduler_leader 1.0" in standby.metrics()


def test_a_leader_that_cannot_renew_exits_non_zero(start_scheduler, api_client, namespace):
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    scheduler = start_scheduler(*competing_for(namespace, lease))
    wait_until(lambda: lease_holder(api_client, namespace, lease), 10, "the lease to be taken")
    # Another replica "takes" the lease (as after a network partition): the
    # leader sees a live foreign holder at every renewal until its deadline.
    client.CoordinationV1Api(api_client).patch_namespaced_lease(
        lease, namespace, {"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 60}}
    )
    assert scheduler.process.wait(10) == 1
    assert "lost leadership" in scheduler.log()


# -- deciding like kube-scheduler: the pinned node must be able to take the pod ----------------------


def pod_scheduled(core, namespace: str, name: str):
    """The pod's PodScheduled condition, or None."""
    conditions = core.read_namespaced_pod_status(name, namespace).status.conditions or []
    return next((c for c in conditions if c.type == "PodScheduled"), None)


def refused_with(api_client, core, namespace: str, pod: str, message: str, timeout: float = 15):
    """Waits for the FailedScheduling Event and the PodScheduled=False condition, both saying
    `message`; returns the condition."""
    wait_until(
        lambda: any(e.note == message for e in events_of(api_client, namespace, pod, "FailedScheduling")),
        timeout,
        f"a FailedScheduling event about {pod} saying {message!r} "
        f"(seen: {[e.note for e in events_of(api_client, namespace, pod, 'FailedScheduling')]})",
    )

    def condition():
        found = pod_scheduled(core, namespace, pod)
        return found if found is not None and found.message == message else None

    found = wait_until(condition, timeout, f"PodScheduled of {pod} to say {message!r}")
    assert (found.status, found.reason) == ("False", "Unschedulable")
    assert node_of(core, namespace, pod) is None
    return found


def test_a_pod_with_a_container_lacking_the_entry_is_refused_for_good_naming_it_and_its_init_containers_see_the_bind(
    start_scheduler, core, api_client, namespace
):
    start_scheduler("--leader-elect=false")
    # setup (an init container) has no CUDA_VISIBLE_DEVICES entry: it would see every GPU.
    lacking = {
        "initContainers": [{"name": "setup", "image": "busybox"}],
        "containers": [{"name": "main", "image": "busybox", "env": [dict(BIND_ENTRY)]}],
    }
    make_pod(core, namespace, "job-0", start_scheduler.scheduler_name, spec=lacking, bind_entries=False)
    # Every container has it: bound, and the init container sees the devices as the others do.
    whole = {
        "initContainers": [{"name": "setup", "image": "busybox"}],
        "containers": [{"name": "main", "image": "busybox"}],
    }
    make_pod(core, namespace, "job-1", start_scheduler.scheduler_name, spec=whole)

    message = (
        "container(s) setup of the pod have no CUDA_VISIBLE_DEVICES entry, so they would see every GPU of the "
        "node, not only the map's 0,1; give every container and init container the entry "
        f'`{{name: CUDA_VISIBLE_DEVICES, valueFrom: {{fieldRef: {{fieldPath: "{DEVICES_FIELD_PATH}"}}}}}}` '
        "(the chart's admission adds it to pods created while it runs) and create the pod again"
    )
    refused_with(api_client, core, namespace, "job-0", message)
    assert wait_until(lambda: node_of(core, namespace, "job-1"), 10, "job-1 to be bound") == "node2"
    assert container_env(get_pod(api_client, namespace, "job-1")) == {"init:setup": "2", "main": "2"}
    # For good: its containers cannot change, so it is not tried again (one FailedScheduling).
    time.sleep(5)
    assert [e.series for e in events_of(api_client, namespace, "job-0", "FailedScheduling")] == [None]
    assert node_of(core, namespace, "job-0") is None


def test_a_tainted_node_is_refused_in_kube_schedulers_words_and_the_pod_says_so_in_its_condition(
    start_scheduler, core, api_client, namespace, kwok_node
):
    node = f"tainted-{uuid.uuid4().hex[:6]}"
    kwok_node(node, taints=({"key": "dedicated", "value": "ml", "effect": "NoSchedule"},), wait_untainted=True)
    start_scheduler("--leader-elect=false")
    make_pod(core, namespace, "plain-0", start_scheduler.scheduler_name, f"0={node}:0\n")
    refused_with(
        api_client,
        core,
        namespace,
        "plain-0",
        f"0/1 nodes are available: 1 node(s) had untolerated taint {{dedicated: ml}}. "
        f"The map (line 1) pins the pod to node {node}, which TaintToleration refused.",
    )
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    make_pod(
        core,
        namespace,
        "tolerant-0",
        start_scheduler.scheduler_name,
        f"0={node}:0\n",
        spec={"tolerations": [toleration]},
    )
    assert wait_until(lambda: node_of(core, namespace, "tolerant-0"), 10, "tolerant-0 to be bound") == node


def test_a_node_outside_the_pods_node_selector_waits_until_it_is_labelled(
    start_scheduler, core, api_client, namespace, kwok_node
):
    node = f"unlabelled-{uuid.uuid4().hex[:6]}"
    kwok_node(node, wait_untainted=True)
    start_scheduler("--leader-elect=false")
    make_pod(
        core,
        namespace,
        "picky-0",
        start_scheduler.scheduler_name,
        f"0={node}:0\n",
        spec={"nodeSelector": {"zone": "a"}},
    )
    refused_with(
        api_client,
        core,
        namespace,
        "picky-0",
        f"0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
        f"The map (line 1) pins the pod to node {node}, which NodeAffinity refused.",
    )
    labelled = time.monotonic()
    core.patch_node(node, {"metadata": {"labels": {"zone": "a"}}})
    wait_until(lambda: node_of(core, namespace, "picky-0"), 10, "picky-0 to be bound once the node has the label")
    assert time.monotonic() - labelled < 3  # the node event, not the backoff


def test_pods_of_every_scheduler_count_against_the_nodes_resources(
    start_scheduler, core, api_client, namespace, kwok_node
):
    node = f"small-{uuid.uuid4().hex[:6]}"
    kwok_node(node, resources={"cpu": "2", "memory": "4Gi", "pods": "10", "nvidia.com/gpu": "4"}, wait_untainted=True)
    # A pod of another scheduler takes 1.5 of the node's 2 CPUs.
    make_pod(core, namespace, "other-0", "someone-else", f"0={node}:3\n", requests={"cpu": "1500m"})
    core.create_namespaced_pod_binding(
        "other-0",
        namespace,
        {"metadata": {"name": "other-0"}, "target": {"kind": "Node", "name": node}},
        _preload_content=False,
    )
    start_scheduler("--leader-elect=false")
    make_pod(core, namespace, "needs-1cpu-0", start_scheduler.scheduler_name, f"0={node}:0\n", requests={"cpu": "1"})
    refused_with(
        api_client,
        core,
        namespace,
        "needs-1cpu-0",
        f"0/1 nodes are available: 1 Insufficient cpu. "
        f"The map (line 1) pins the pod to node {node}, which NodeResourcesFit refused.",
    )
    freed = time.monotonic()
    core.delete_namespaced_pod("other-0", namespace, grace_period_seconds=0)
    wait_until(lambda: node_of(core, namespace, "needs-1cpu-0"), 10, "needs-1cpu-0 to be bound once the CPU is free")
    assert time.monotonic() - freed < 3  # the freed resources woke it, not the backoff


def test_an_ordinal_beyond_the_nodes_gpus_is_refused_and_00_is_gpu_0(start_scheduler, core, api_client, namespace):
    # Bug 5: "0=node1:7" was bound on a 4-GPU node; "00" and "0" were two GPUs to the ledger.
    start_scheduler("--leader-elect=false", "--gpu-sharing=deny")
    name = start_scheduler.scheduler_name
    make_pod(core, namespace, "beyond-0", name, "0=node1:1,7\n")
    refused_with(
        api_client,
        core,
        namespace,
        "beyond-0",
        "0/1 nodes are available: 1 node(s) had GPUs 0-3 (nvidia.com/gpu: 4), not GPU 7. "
        "The map (line 1) pins the pod to node node1, which GPUDevices refused.",
    )
    make_pod(core, namespace, "zero-0", name, "0=node1:0\n")
    wait_until(lambda: node_of(core, namespace, "zero-0"), 10, "zero-0 to be bound")
    make_pod(core, namespace, "double-zero-0", name, "0=node1:00\n")
    failed = wait_until(
        lambda: events_of(api_client, namespace, "double-zero-0", "FailedScheduling"), 10, "double-zero-0 refused"
    )
    assert f"GPU 00 by {namespace}/zero-0" in failed[0].note
    assert node_of(core, namespace, "double-zero-0") is None


def test_a_node_name_wins_over_an_alias_and_a_job_index_label_over_the_annotation(
    start_scheduler, core, namespace, kwok_node
):
    named = f"named-{uuid.uuid4().hex[:6]}"
    kwok_node(named, wait_untainted=True)
    kwok_node(f"{named}-other", alias=named, wait_untainted=True)  # its alias is the other's name
    start_scheduler("--leader-elect=false")
    name = start_scheduler.scheduler_name
    make_pod(core, namespace, "by-name-0", name, f"0={named}:0\n")
    assert wait_until(lambda: node_of(core, namespace, "by-name-0"), 10, "by-name-0 bound") == named
    index_key = "batch.kubernetes.io/job-completion-index"
    make_pod(
        core,
        namespace,
        "indexed",
        name,
        "0=node1:0\n1=node2:1\n",
        labels={index_key: "1"},
        annotations={index_key: "0"},
    )
    assert wait_until(lambda: node_of(core, namespace, "indexed"), 10, "indexed bound") == "node2"


def test_the_gpu_ledger_is_rebuilt_from_the_cluster_across_a_restart_under_deny(
    start_scheduler, core, api_client, namespace
):
    first = start_scheduler("--leader-elect=false", "--gpu-sharing=deny")
    name = start_scheduler.scheduler_name
    make_pod(core, namespace, "holder-0", name, "0=node2:3\n")
    wait_until(lambda: node_of(core, namespace, "holder-0"), 10, "holder-0 bound")
    assert first.terminate() == 0

    start_scheduler("--leader-elect=false", "--gpu-sharing=deny")
    make_pod(core, namespace, "second-0", name, "0=node2:3\n")
    failed = wait_until(lambda: events_of(api_client, namespace, "second-0", "FailedScheduling"), 10, "refused")
    assert f"GPU 3 by {namespace}/holder-0" in failed[0].note
    time.sleep(1)
    assert node_of(core, namespace, "second-0") is None
    core.delete_namespaced_pod("holder-0", namespace, grace_period_seconds=0)
    assert (
        wait_until(lambda: node_of(core, namespace, "second-0"), 10, "second-0 bound once the GPU is free") == "node2"
    )


def test_backoff_is_timed_at_run_time_doubling_to_its_cap_and_never_early(start_scheduler, core, namespace):
    initial, cap = 0.4, 1.6
    scheduler = start_scheduler(
        "--leader-elect=false", f"--pod-initial-backoff-seconds={initial}", f"--pod-max-backoff-seconds={cap}"
    )
    metric = 'gpu_scheduler_schedule_attempts_total{result="unschedulable"} '

    def failures() -> int:
        line = next(line for line in scheduler.metrics().splitlines() if line.startswith(metric))
        return int(float(line.split()[-1]))

    make_pod(core, namespace, "lost-0", start_scheduler.scheduler_name, f"0=nowhere-{uuid.uuid4().hex[:6]}:0\n")
    seen, last = [], 0
    deadline = time.monotonic() + 30
    while len(seen) < 7 and time.monotonic() < deadline:
        count = failures()
        if count != last:
            assert count == last + 1, f"attempts jumped from {last} to {count}"
            seen.append(time.monotonic())
            last = count
        time.sleep(0.01)
    assert len(seen) == 7, f"only {len(seen)} attempts in 30 s"
    gaps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
    expected = [min(initial * 2**i, cap) for i in range(len(gaps))]  # 0.4, 0.8, 1.6, 1.6, ...
    # Each retry waits its delay within the +-10% jitter; the probe sees an attempt up to one
    # scrape (~30 ms) late, so a gap may look that much shorter or longer.
    early = [(round(g, 3), e) for g, e in zip(gaps, expected, strict=True) if g < e * 0.9 - 0.05]
    late = [(round(g, 3), e) for g, e in zip(gaps, expected, strict=True) if g > e * 1.1 + 0.5]
    assert early == [], f"retried before its delay: {early} (gaps {gaps})"
    assert late == [], f"retried far after its delay: {late} (gaps {gaps})"
    print(f"\nretry gaps {[round(g, 2) for g in gaps]} s for delays {expected}")

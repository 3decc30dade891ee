"""NodePorts on the map's node: a hostPort taken there by any pod, or by a pod just assumed, is
refused in kube-scheduler's recorded words (testdata/kube_scheduler_messages.json), and the pod
is woken when the port frees."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.objects import assigned_pod, node_info, trim_pending_pod, watched_pod
from gpu_scheduler.scheduler.queue import ACTIVE, BACKOFF
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import ClusterCache, Code, SharingPolicy, decide
from gpu_scheduler.scheduling.ports import UsedPorts, host_ports
from recorded import ours, reason_for_the_pinned_node

NODE = "node3"


def api_node(name: str = NODE) -> dict:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": name},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def port(number: int, protocol: str | None = None, ip: str | None = None) -> dict:
    found = {"containerPort": 80, "hostPort": number}
    if protocol:
        found["protocol"] = protocol
    if ip:
        found["hostIP"] = ip
    return found


def api_pod(name: str, uid: str, ports=(), index: int = 0, node: str = "", scheduler: str = "gpu-scheduler", **spec):
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"{name}-{index}",
            "uid": uid,
            "annotations": {"gpu-scheduling-map": f"{index}={NODE}:{index}\n"},
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": node,
            "containers": [
                {"name": "main", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": str(index)}], "ports": list(ports)}
            ],
            **spec,
        },
    }


@pytest.fixture
def cache() -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_node(node_info(api_node()))
    return cache


def test_a_host_port_taken_on_the_node_is_refused_in_kube_schedulers_recorded_words(cache):
    cache.add_pod(
        assigned_pod(api_pod("web", "h", [port(18080)], node=NODE, scheduler="default-scheduler"), "gpu-scheduler")
    )
    decision = decide(trim_pending_pod(api_pod("train", "t", [port(18080)])), cache)
    assert decision.code is Code.UNSCHEDULABLE
    assert decision.plugin == "NodePorts"
    assert decision.reason == ours(reason_for_the_pinned_node("port-taker"), "NodePorts")
    # Another port, or the holder gone: it binds.
    assert decide(trim_pending_pod(api_pod("train", "t", [port(18081)])), cache).bind
    cache.remove_pod("h")
    assert decide(trim_pending_pod(api_pod("train", "t", [port(18080)])), cache).bind


@pytest.mark.parametrize(
    ("held", "wanted", "conflict"),
    [
        (port(80), port(80), True),
        (port(80), port(80, "UDP"), False),  # another protocol
        (port(80, ip="10.0.0.1"), port(80, ip="10.0.0.2"), False),  # two host IPs
        (port(80, ip="10.0.0.1"), port(80), True),  # 0.0.0.0 takes every IP
        (port(80), port(80, ip="10.0.0.1"), True),
        (port(80, "TCP", "10.0.0.1"), port(80, ip="10.0.0.1"), True),  # TCP is the default
    ],
)
def test_host_ports_conflict_as_kube_schedulers_host_port_info(held, wanted, conflict):
    used = UsedPorts()
    used.add(host_ports({"containers": [{"ports": [held]}]}))
    assert used.conflicts(host_ports({"containers": [{"ports": [wanted]}]})) is conflict


def test_sidecars_take_their_host_ports_and_other_init_containers_do_not():
    spec = {
        "initContainers": [
            {"name": "setup", "ports": [port(1)]},
            {"name": "proxy", "restartPolicy": "Always", "ports": [port(2)]},
        ],
        "containers": [{"name": "main", "ports": [{"containerPort": 3}, port(4)]}],
    }
    assert host_ports(spec) == (("TCP", "0.0.0.0", 2), ("TCP", "0.0.0.0", 4))


def test_a_port_is_free_once_every_pod_holding_it_is_gone(cache):
    for uid in ("a", "b"):
        cache.add_pod(assigned_pod(api_pod("web", uid, [port(9000)], node=NODE), "gpu-scheduler"))
    cache.remove_pod("a")
    assert cache.used_ports(NODE).conflicts((("TCP", "0.0.0.0", 9000),))
    cache.remove_pod("b")
    assert cache.used_ports(NODE).empty()
    assert "hostPorts" not in trim_pending_pod(api_pod("web", "c"))  # nothing kept for most pods


def test_two_pods_decided_back_to_back_cannot_both_take_a_port_and_the_freed_port_wakes_the_second():
    state = SchedulerState("gpu-node-name", SharingPolicy.WARN)
    state.nodes_listed([node_info(api_node())])
    state.pod_changed(watched_pod(api_pod("a", "ua", [port(7000)], index=0), "gpu-scheduler"))
    state.pod_changed(watched_pod(api_pod("b", "ub", [port(7000)], index=1), "gpu-scheduler"))
    uid, pod = state.pop(0.0)
    assert state.decide(uid, pod).bind  # assumed: its port is held from now on
    uid, pod = state.pop(0.0)
    decision = state.decide(uid, pod)
    assert decision.plugin == "NodePorts"
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state("ub") == BACKOFF
    assert state.pod_gone("ua") is True  # its binding found it deleted: the port frees, b is woken
    assert state.queue_state("ub") == ACTIVE

"""Pods created while no scheduler runs are all placed once one starts."""

from __future__ import annotations

import time
import uuid

import pytest

from .cluster import container_env, create, list_pods, map_nodes, wait_for_pods
from .workloads import bare_pod

pytestmark = pytest.mark.e2e

MAP = "".join(f"{i}=node{i % 4 + 1}:{i % 4}\n" for i in range(8))


def test_pods_created_before_the_scheduler_started_are_all_bound_when_it_starts(api_client, ns, start_scheduler):
    # A scheduler name of this test's own: the session's scheduler must not take these pods.
    # (The webhook handles gpu-scheduler's pods only, so these carry the README's entry
    # themselves: the devices the bind writes.)
    scheduler_name = f"gpu-scheduler-late-{uuid.uuid4().hex[:6]}"
    pods = [bare_pod(f"early-{i}", MAP, scheduler_name=scheduler_name, bind_entries=True) for i in range(8)]
    create(api_client, ns, pods)
    time.sleep(1)
    assert [p["spec"].get("nodeName") for p in list_pods(api_client, ns)] == [None] * 8

    start_scheduler(scheduler_name=scheduler_name)

    pods = wait_for_pods(api_client, ns, 8, timeout=30, phases=None)
    assert map_nodes(api_client, pods) == {f"early-{i}": f"node{i % 4 + 1}" for i in range(8)}
    # Each sees its line's devices, which the bind wrote.
    seen = {p["metadata"]["name"]: container_env(p) for p in pods}
    assert seen == {f"early-{i}": {"main": str(i % 4)} for i in range(8)}

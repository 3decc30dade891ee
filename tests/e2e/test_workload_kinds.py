"""Every kind of indexed pod the map can address, in several namespaces at once."""

from __future__ import annotations

import pytest

from .cluster import container_env, create, map_nodes, wait_for_pods
from .workloads import bare_pod, indexed_job

pytestmark = pytest.mark.e2e

JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
# KWOK completes Job pods on its own; either phase proves the pod was placed.
STARTED = ("Running", "Succeeded")


def placement_by(api_client, pods: list[dict], key) -> dict:
    """key(pod) -> (node as the map names it, the set of CUDA_VISIBLE_DEVICES values over its containers)."""
    nodes = map_nodes(api_client, pods)
    return {key(p): (nodes[p["metadata"]["name"]], set(container_env(p).values())) for p in pods}


def job_index(pod: dict) -> int:
    return int(pod["metadata"]["labels"][JOB_INDEX_LABEL])


def pod_name(pod: dict) -> str:
    return pod["metadata"]["name"]


def test_indexed_job_pods_and_bare_pods_in_several_namespaces_get_their_own_lines(api_client, product, new_namespace):
    job_namespace, first, second = (new_namespace("e2e-job"), new_namespace("e2e-bare"), new_namespace("e2e-bare"))
    create(
        api_client,
        job_namespace,
        [indexed_job("train", "0=node1:0\n1=node2:1\n2=node3:2,3\n", completions=3, parallelism=3)],
    )
    # The same pod names in two namespaces, each with its own map: a pod is
    # placed by its own annotation, never by a same-named pod elsewhere.
    create(api_client, first, [bare_pod(name, "0=node4:0\n1=node2:1,3\n") for name in ("trainer-0", "trainer-1")])
    create(api_client, second, [bare_pod(name, "0=node3:1\n1=node1:2\n") for name in ("trainer-0", "trainer-1")])

    job_pods = wait_for_pods(api_client, job_namespace, 3, timeout=90, phases=STARTED)
    first_pods = wait_for_pods(api_client, first, 2, timeout=90, phases=STARTED)
    second_pods = wait_for_pods(api_client, second, 2, timeout=90, phases=STARTED)

    assert placement_by(api_client, job_pods, job_index) == {
        0: ("node1", {"0"}),
        1: ("node2", {"1"}),
        2: ("node3", {"2,3"}),
    }
    assert placement_by(api_client, first_pods, pod_name) == {
        "trainer-0": ("node4", {"0"}),
        "trainer-1": ("node2", {"1,3"}),
    }
    assert placement_by(api_client, second_pods, pod_name) == {
        "trainer-0": ("node3", {"1"}),
        "trainer-1": ("node1", {"2"}),
    }

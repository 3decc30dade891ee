"""The webhook's NodeReader (webhook.readNodes, the chart's default) against kube-apiserver:
what it assumes of the API server, checked on the real one.

A node is read with resourceVersion=0, from the apiserver's watch cache, because a burst of
pods reads each of its nodes once per webhook worker (in a 1,000-pod burst on 100 nodes,
0.20 node GETs per pod, each a quorum read from etcd before). The oracle is etcd's own
request counter in the apiserver's /metrics, not anything the reader says; the same
reads without resourceVersion=0 are counted beside them, so the oracle is seen to count.
A 404 from the cache is confirmed from etcd: a node created a moment ago must be found."""

from __future__ import annotations

import uuid

import pytest
from gpu_scheduler.kube.client import KubeClient, load_configuration
from gpu_scheduler.webhook.nodes import NodeFacts, NodeReader
from prometheus_client.parser import text_string_to_metric_families

from .cluster import ALIAS_LABEL, kwok_node, wait_for_node_ready

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

NODES = 20
PASSES = 5  # each node read this many times, by a new reader each pass
# etcd gets of nodes that others cause meanwhile (a node's status written by kwok or the
# node lifecycle controller costs one): far below the NODES x PASSES that quorum reads make.
BACKGROUND = 10


def etcd_node_gets(kube: KubeClient) -> float:
    """kube-apiserver's count of get requests it sent etcd for nodes."""
    status, body = kube.request("GET", "/metrics")
    assert status == 200, body[:200]
    samples = [
        sample
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "etcd_requests_total"
    ]
    assert samples, "no etcd_requests_total in kube-apiserver's /metrics"
    return sum(s.value for s in samples if s.labels.get("operation") == "get" and s.labels.get("resource") == "nodes")


@pytest.fixture
def kube(kubeconfig) -> KubeClient:
    return KubeClient(load_configuration(kubeconfig), pool_size=2)


def test_nodes_are_read_from_the_apiservers_cache_not_from_etcd(kube, api_client, kwok_nodes):
    suffix = uuid.uuid4().hex[:6]
    names = [f"e2e-reader-{suffix}-{i}" for i in range(NODES)]
    for name in names:
        kwok_nodes(kwok_node(name))
    # A new node's status is written several times (kwok makes it Ready, the lifecycle
    # controller lifts its taints), each write an etcd get: the first run of this test
    # counted more than 3 in its window while they went on. Measured once they are done.
    for name in names:
        wait_for_node_ready(api_client, name, timeout=60)
    expected = [NodeFacts(n, None) for n in names]

    before = etcd_node_gets(kube)
    for _ in range(PASSES):
        reader = NodeReader(kube, ALIAS_LABEL)
        assert [reader.node(name) for name in names] == expected
    cached = etcd_node_gets(kube) - before

    before = etcd_node_gets(kube)
    for _ in range(PASSES):
        for name in names:
            kube.call("GET", f"/api/v1/nodes/{name}")
    quorum = etcd_node_gets(kube) - before

    reads = NODES * PASSES
    assert quorum >= reads, f"the oracle did not count {reads} quorum reads of nodes: {quorum}"
    assert cached <= BACKGROUND, f"{reads} reads of nodes by the webhook's reader cost etcd {cached:g} gets"


def test_a_node_created_a_moment_ago_is_found_and_a_missing_one_is_none(kube, kwok_nodes):
    suffix = uuid.uuid4().hex[:6]
    # Reading from the cache alone, without asking etcd after a 404, failed this in 1 of 2 runs.
    for i in range(30):
        name, alias = f"e2e-fresh-{suffix}-{i}", f"gpu-box-{suffix}-{i}"
        fresh = kwok_node(name)
        fresh["metadata"]["labels"][ALIAS_LABEL] = alias
        kwok_nodes(fresh)
        # Read at once by a new reader, as a webhook worker would for a pod created on it.
        assert NodeReader(kube, ALIAS_LABEL).node(name) == NodeFacts(name, alias)
    assert NodeReader(kube, ALIAS_LABEL).node(f"e2e-missing-{suffix}") is None

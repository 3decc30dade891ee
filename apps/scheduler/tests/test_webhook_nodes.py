"""The webhook's NodeReader: which reads it asks kube-apiserver for, and what it keeps.

Against kube-apiserver itself (its watch cache, etcd and RBAC) it runs in
tests/e2e/test_webhook_node_reader.py and tests/faults/test_identities_of_the_chart.py."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.client import ApiError
from gpu_scheduler.scheduling.inventory import COUNT_LABEL, INVENTORY_ANNOTATION, Gpu, Inventory
from gpu_scheduler.webhook.gpu_nodes import PublishedGpus, trim_node
from gpu_scheduler.webhook.nodes import CACHE_SECONDS, NodeFacts, NodeReader, NodeReadError
from inventories import GPU0, ONE_A100

# What the API server answers from its watch cache; written out, not imported, so that a
# reader asking etcd (no resourceVersion) fails these tests.
FROM_CACHE = {"resourceVersion": "0"}


class Api:
    """A KubeClient's call() over a dict of nodes; `cached` is what the watch cache holds
    (the nodes by default), so a node can be in etcd and not yet in the cache."""

    def __init__(self, nodes: dict[str, dict], cached: set[str] | None = None, status: int | None = None) -> None:
        self.nodes, self.status, self.asked = nodes, status, []
        self.cached = set(nodes) if cached is None else cached

    def call(self, method, path, query=None, timeout=30.0):
        self.asked.append((method, path, query))
        assert timeout > 0
        if self.status is not None:  # 0: no answer at all
            raise ApiError(method, path, self.status, b'{"kind":"Status","message":"nope"}')
        name = path.rsplit("/", 1)[1]
        visible = self.cached if query == FROM_CACHE else set(self.nodes)
        if name not in visible:
            raise ApiError(method, path, 404, b'{"kind":"Status","message":"not found"}')
        return self.nodes[name]


def node(name: str, alias: str | None = None) -> dict:
    labels = {"gpu-node-name": alias} if alias else {}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "status": {"capacity": {"cpu": "8"}}}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_node_is_read_from_the_apiservers_cache_once_and_kept():
    api, clock = Api({"n1": node("n1", "box-1")}), Clock()
    reader = NodeReader(api, "gpu-node-name", clock=clock)
    assert reader.node("n1") == NodeFacts("n1", "box-1")
    clock.now += CACHE_SECONDS - 0.1
    assert reader.node("n1") == NodeFacts("n1", "box-1")
    # One read, from the watch cache (resourceVersion=0), not a quorum read from etcd.
    assert api.asked == [("GET", "/api/v1/nodes/n1", FROM_CACHE)]
    clock.now += 0.2
    reader.node("n1")
    assert len(api.asked) == 2


def test_a_node_the_cache_does_not_hold_yet_is_confirmed_from_etcd():
    # Created a moment ago: a 404 from the cache alone would refuse pods created on it.
    api = Api({"fresh": node("fresh", "box-2")}, cached=set())
    assert NodeReader(api, "gpu-node-name").node("fresh") == NodeFacts("fresh", "box-2")
    assert api.asked == [
        ("GET", "/api/v1/nodes/fresh", FROM_CACHE),
        ("GET", "/api/v1/nodes/fresh", None),
    ]


def test_a_missing_node_is_none_after_both_reads_and_is_kept_as_missing():
    api = Api({})
    reader = NodeReader(api, "gpu-node-name")
    assert reader.node("gone") is None
    assert reader.node("gone") is None
    assert [query for _, _, query in api.asked] == [FROM_CACHE, None]


@pytest.mark.parametrize("status", [403, 500, 0])
def test_a_node_that_cannot_be_read_is_a_node_read_error_naming_it(status):
    api = Api({"n1": node("n1")}, status=status)
    with pytest.raises(NodeReadError, match=r"could not read node n1: GET /api/v1/nodes/n1"):
        NodeReader(api, "gpu-node-name").node("n1")
    assert len(api.asked) == 1  # only a 404 is asked again


def gpu_node(name: str, inventory: Inventory | str) -> dict:
    text = inventory if isinstance(inventory, str) else inventory.to_annotation()
    count = "1" if isinstance(inventory, str) else str(len(inventory.gpus))
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {COUNT_LABEL: count}, "annotations": {INVENTORY_ANNOTATION: text}},
    }


class Watched(PublishedGpus):
    """PublishedGpus with its informer's state set by hand (the informer itself:
    test_informer.py; this watch against kube-apiserver: tests/e2e/test_webhook_node_reader.py)."""

    def __init__(self, current: bool = True) -> None:
        super().__init__(client=None)
        self.is_current = current

    def current(self) -> bool:
        return self.is_current


def test_the_watch_asks_only_for_the_nodes_that_publish_gpus():
    watched = Watched()
    assert watched.informer._path == "/api/v1/nodes"
    assert watched.informer._selectors == {"labelSelector": COUNT_LABEL}


def test_a_current_watch_answers_for_every_node_with_no_read():
    api, watched = Api({"n1": node("n1")}), Watched()
    watched.replace([trim_node(gpu_node("gpu1", ONE_A100))], listed_at=0.0)
    reader = NodeReader(api, "gpu-node-name", published=watched)
    assert reader.inventory("gpu1") == ONE_A100
    assert reader.inventory("n1") is None  # not watched: it publishes no GPUs
    assert reader.inventory("nowhere") is None
    assert api.asked == []


def test_the_watch_follows_a_node_publishing_changing_and_leaving():
    watched = Watched()
    watched.replace([], listed_at=0.0)
    assert watched.inventory("gpu1") is None
    watched.upsert(trim_node(gpu_node("gpu1", ONE_A100)))
    first = watched.inventory("gpu1")
    assert first == ONE_A100 and watched.inventory("gpu1") is first  # parsed once
    two = Inventory(
        "550.54.15", (*ONE_A100.gpus, Gpu(1, GPU0.replace("0000-4000", "1111-4000"), "00000000:08:00.0", "x", 1))
    )
    watched.upsert(trim_node(gpu_node("gpu1", two)))
    assert watched.inventory("gpu1") == two
    watched.delete(trim_node(gpu_node("gpu1", two)))  # deleted, or its label removed
    assert watched.inventory("gpu1") is None
    watched.upsert(trim_node(gpu_node("gpu2", ONE_A100)))
    watched.replace([trim_node(gpu_node("gpu3", ONE_A100))], listed_at=1.0)  # a new list: gpu2 is gone
    assert watched.inventory("gpu2") is None and watched.inventory("gpu3") == ONE_A100


def test_an_unreadable_published_inventory_is_no_inventory():
    watched = Watched()
    watched.replace([trim_node(gpu_node("gpu1", "{not json"))], listed_at=0.0)
    assert watched.inventory("gpu1") is None


@pytest.mark.parametrize("current", [False, None])
def test_until_the_watch_is_current_the_node_is_read(current):
    api = Api({"gpu1": gpu_node("gpu1", ONE_A100)})
    published = None if current is None else Watched(current=current)
    reader = NodeReader(api, "gpu-node-name", published=published)
    assert reader.inventory("gpu1") == ONE_A100
    assert reader.inventory("gone") is None
    assert [path for _, path, _ in api.asked] == ["/api/v1/nodes/gpu1", "/api/v1/nodes/gone", "/api/v1/nodes/gone"]

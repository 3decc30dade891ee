"""The oracles' reading of what a container sees (cluster.env_seen, container_env), on pods made
up here: a literal, the bind's fieldRef resolved against the stored pod, nothing. Each must see
the wrong devices where they are wrong. No cluster: these run with the unit tests. The product's
own reading (gpu_scheduler.placement.container_devices) must agree with the oracle's."""

from __future__ import annotations

import copy

import pytest
from faults.gpu_oracle import devices_of
from gpu_scheduler.placement import bind_env_entry, container_devices

from .cluster import (
    BIND_ENTRY,
    DEVICES_ANNOTATION,
    FROM_BIND,
    container_env,
    devices_entry,
    env_seen,
    with_bind_entries,
)
from .placement_check import PodPlacement
from .workloads import Expected, bare_pod


def pod(*containers: dict, init: tuple[dict, ...] = (), annotations: dict | None = None) -> dict:
    spec: dict = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": "p-0", "annotations": annotations or {}}, "spec": spec}


def literal(name: str, value: str) -> dict:
    return {"name": name, "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": value}]}


def from_bind(name: str) -> dict:
    return {"name": name, "env": [copy.deepcopy(BIND_ENTRY)]}


BOUND = {DEVICES_ANNOTATION: "0,1"}


def test_the_bind_entry_is_the_products():
    assert BIND_ENTRY == bind_env_entry()


def test_a_literal_is_seen_as_written_and_the_fieldref_as_the_annotation_the_bind_wrote():
    bound = pod(literal("a", "2"), from_bind("b"), init=(from_bind("setup"),), annotations=BOUND)
    assert container_env(bound) == {"init:setup": "0,1", "a": "2", "b": "0,1"}


def test_before_the_bind_the_fieldref_sees_nothing_and_no_entry_is_none():
    unbound = pod(from_bind("a"), {"name": "b"}, {"name": "c", "env": [{"name": "OTHER", "value": "x"}]})
    assert container_env(unbound) == {"a": "", "b": None, "c": None}


def test_the_last_entry_of_a_name_wins_and_other_sources_never_look_like_devices():
    container = {
        "name": "a",
        "env": [
            {"name": "CUDA_VISIBLE_DEVICES", "value": "3"},
            {"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "EMPTY"},
        ],
    }
    stored = pod(container)
    stored["spec"]["nodeName"] = "node1"
    seen = env_seen(stored, container)
    assert seen == {"CUDA_VISIBLE_DEVICES": "<from configMapKeyRef>", "NODE": "node1", "EMPTY": ""}


def test_a_stored_fieldref_with_its_api_version_is_the_bind_entry():
    stored_entry = {
        "name": "CUDA_VISIBLE_DEVICES",
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": BIND_ENTRY["valueFrom"]["fieldRef"]["fieldPath"]}},
    }
    container = {"name": "a", "env": [stored_entry]}
    assert devices_entry(container) == FROM_BIND
    assert container_env(pod(container, annotations=BOUND)) == {"a": "0,1"}
    assert devices_entry(literal("a", "0")) == "0"
    assert devices_entry({"name": "a"}) is None


def test_the_placement_check_fails_a_pod_whose_bind_wrote_other_devices_or_none():
    expected = Expected("node1", "0,1")

    def problems(stored: dict) -> list[str]:
        row = PodPlacement("p-0", 0, expected, "node1", "node1", "Running", container_env(stored))
        return row.problems()

    assert problems(pod(from_bind("a"), annotations=BOUND)) == []
    assert problems(pod(from_bind("a"), annotations={DEVICES_ANNOTATION: "2"})) != []
    assert problems(pod(from_bind("a"))) != []  # bound without the annotation: it sees no GPU
    assert problems(pod(literal("a", "0,1"), from_bind("b"), annotations={DEVICES_ANNOTATION: "3"})) != []


def test_the_gpu_oracle_counts_the_devices_the_bind_gave():
    assert devices_of(pod(from_bind("a"), literal("b", "2"), annotations=BOUND)) == ("0", "1", "2")
    assert devices_of(pod(from_bind("a"))) == ()


def test_with_bind_entries_gives_every_container_without_an_entry_the_readmes_and_keeps_the_others():
    built = bare_pod("p-0", "0=node1:0\n", bind_entries=True)
    assert built["spec"]["containers"][0]["env"] == [BIND_ENTRY]
    spec = {"initContainers": [{"name": "i"}], "containers": [literal("a", "1"), {"name": "b", "env": [{"name": "X"}]}]}
    with_bind_entries(spec)
    assert spec["initContainers"][0]["env"] == [BIND_ENTRY]
    assert spec["containers"][0] == literal("a", "1")
    assert spec["containers"][1]["env"] == [{"name": "X"}, BIND_ENTRY]
    assert "env" not in bare_pod("p-0", "0=node1:0\n")["spec"]["containers"][0]


@pytest.mark.parametrize(
    "stored",
    [
        pod(from_bind("a"), annotations=BOUND),
        pod(from_bind("a")),
        pod(literal("a", "0,1"), from_bind("b"), annotations={DEVICES_ANNOTATION: "2"}),
        pod(literal("a", "3"), init=(from_bind("i"),), annotations=BOUND),
        pod({"name": "a"}, literal("b", "1")),
    ],
)
def test_the_oracle_and_the_product_read_the_same_devices(stored):
    # The product's reading: each container's literal or the annotation, no entry left out.
    product = container_devices(stored)
    product_seen = {name: product.seen(name, value) for name, value in product.values}
    oracle = {name.removeprefix("init:"): value for name, value in container_env(stored).items()}
    assert oracle == product_seen

"""A pod created with spec.nodeName set runs where it says, with no scheduler asked:
the webhook reads that node and refuses the pod when its map line names another
node (issue 16, point 10), by the node's alias label as the scheduler resolves it."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .cluster import ALIAS_LABEL, create, env_seen, get_pod, kwok_node
from .workloads import bare_pod

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]


def pinned(name: str, node_name: str, line_node: str) -> dict:
    pod = bare_pod(name, f"0={line_node}:1,2\n")
    pod["spec"]["nodeName"] = node_name
    return pod


def refusal(api_client, namespace: str, pod: dict) -> str:
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api_client).create_namespaced_pod(namespace, pod)
    return refused.value.body


def test_a_pod_created_on_a_node_is_admitted_only_when_its_map_line_names_that_node_or_its_alias(
    api_client, product, ns, kwok_nodes
):
    suffix = uuid.uuid4().hex[:6]
    node, alias = f"e2e-pinned-{suffix}", f"gpu-box-{suffix}"
    labelled = kwok_node(node)
    labelled["metadata"]["labels"][ALIAS_LABEL] = alias
    kwok_nodes(labelled)

    # The line names the node by its alias label: the same node, admitted with its devices.
    create(api_client, ns, [pinned("by-alias-0", node, alias)])
    admitted = get_pod(api_client, ns, "by-alias-0")
    assert admitted["spec"]["nodeName"] == node
    # What its container sees: no Binding is ever sent for it, so a fieldRef on the bind's
    # annotation would see nothing; admission must have given it the devices themselves.
    assert env_seen(admitted, admitted["spec"]["containers"][0]).get("CUDA_VISIBLE_DEVICES") == "1,2"

    # The line names node2, which is not this node's alias: refused, naming both and the label.
    body = refusal(api_client, ns, pinned("other-0", node, "node2"))
    assert f"spec.nodeName is {node} but line 1 of its gpu-scheduling-map names node node2" in body
    assert f"{node}'s {ALIAS_LABEL} label is {alias}" in body

    # A node that does not exist cannot carry the line's alias either.
    missing = f"e2e-missing-{suffix}"
    body = refusal(api_client, ns, pinned("missing-0", missing, "node2"))
    assert f"no node {missing} exists" in body

"""The chart's node restriction for the GPU inventory agent, enforced by the real kube-apiserver.

RBAC lets the agent's ServiceAccount patch every node; the chart's ValidatingAdmissionPolicy
(agent.nodeRestriction) must hold it to the node its pod runs on, and there to the annotation
gpu-scheduler/gpus and the labels gpu-scheduler/gpu-model and gpu-scheduler/gpu-count. Its CEL
cannot be evaluated offline, so here the agent's objects, rendered by `helm template` as the
chart ships them (ServiceAccount, ClusterRole and binding, the policy and its binding), are
applied to the local control plane, in a namespace and under names of their own. A pod of that
ServiceAccount is bound to a KWOK node of this test, and a token bound to that pod (as the
kubelet mounts one: TokenRequest with boundObjectRef kind Pod, which carries the pod's node
name, authentication.kubernetes.io/node-name) makes the requests. No agent process runs: the
requests are the merge patches the agent sends (gpu_scheduler/agent/publish.py).

Not run by default on a shared machine: bring the local control plane up
(`bash scripts/local-up.sh`), then
    .venv/bin/pytest -m e2e tests/e2e/test_agent_node_policy.py
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from commands import run
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .charts import KUBECTL, SCHEDULER_CHART, helm_template
from .cluster import (
    create_token,
    delete_node,
    get_json,
    ignoring_not_found,
    kwok_node,
    token_kubeconfig,
    wait_for_node_ready,
)
from .isolation import delete_namespace
from .waiting import NotYet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

# The kind the chart's policy template asks the API server for (.Capabilities.APIVersions).
POLICY_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
MERGE_PATCH = "application/merge-patch+json"
INVENTORY = "gpu-scheduler/gpus"
COUNT_LABEL = "gpu-scheduler/gpu-count"
MODEL_LABEL = "gpu-scheduler/gpu-model"


@dataclass(frozen=True)
class Answer:
    status: int
    body: str


@dataclass(frozen=True)
class AgentSetup:
    policy: str
    namespace: str
    own_node: str
    other_node: str
    agent: client.ApiClient  # a token bound to a pod on own_node
    unbound: client.ApiClient  # a token of the same account bound to no pod


def rendered_agent_objects(release: str, namespace: str) -> list[dict]:
    """The agent's objects but its DaemonSet, as the chart renders them for an API server that
    serves ValidatingAdmissionPolicy (no image is ever pulled: registry left empty)."""
    documents = helm_template(
        release, SCHEDULER_CHART, namespace, "--api-versions", POLICY_API, "--set", "agent.enabled=true"
    )
    return [
        d
        for d in documents
        if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "agent"
        and d["kind"] != "DaemonSet"
    ]


def token_client(admin_kubeconfig: str, token: str, path: Path) -> client.ApiClient:
    """An API client for the admin's cluster that authenticates with `token` only."""
    return config.new_client_from_config(config_file=str(token_kubeconfig(admin_kubeconfig, token, path, "agent")))


def patch(api: client.ApiClient, path: str, body: dict, dry_run: bool = False) -> Answer:
    """One merge patch, as the agent sends it; the answer whatever its status."""
    query = [("dryRun", "All")] if dry_run else []
    method, url, headers, serialized, _ = api.param_serialize(
        "PATCH",
        path,
        query_params=query,
        header_params={"Content-Type": MERGE_PATCH, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api.call_api(method, url, header_params=headers, body=serialized)
        response.read()
        return Answer(response.status, response.data.decode(errors="replace"))
    except ApiException as err:
        return Answer(err.status, err.body if isinstance(err.body, str) else (err.body or b"").decode())


def inventory_patch(annotations: dict | None = None, labels: dict | None = None) -> dict:
    return {"metadata": {"annotations": annotations or {}, "labels": labels or {}}}


def refused_by_policy(answer: Answer, policy: str, *words: str) -> None:
    assert answer.status == 403, answer
    assert f"ValidatingAdmissionPolicy '{policy}'" in answer.body, answer.body
    for word in words:
        assert word in answer.body, answer.body


@pytest.fixture(scope="module")
def setup(api_client, kubeconfig, tmp_path_factory):
    suffix = uuid.uuid4().hex[:6]
    release, namespace = f"gpu-scheduler-np-{suffix}", f"gs-np-{suffix}"
    own_node, other_node = f"e2e-agent-{suffix}-own", f"e2e-agent-{suffix}-other"
    directory = tmp_path_factory.mktemp("agent-policy")
    objects = rendered_agent_objects(release, namespace)
    kinds = sorted(d["kind"] for d in objects)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ], kinds
    (policy,) = [d["metadata"]["name"] for d in objects if d["kind"] == "ValidatingAdmissionPolicy"]
    (account,) = [d["metadata"]["name"] for d in objects if d["kind"] == "ServiceAccount"]
    manifest = directory / "agent.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    core = client.CoreV1Api(api_client)
    clients: list[client.ApiClient] = []
    core.create_namespace({"metadata": {"name": namespace, "labels": {"gpu-scheduler-test": "true"}}})
    try:
        applied = run([KUBECTL, "--kubeconfig", kubeconfig, "apply", "-f", manifest])
        assert applied.returncode == 0, applied.stderr
        for node in (own_node, other_node):
            core.create_node(kwok_node(node))
        # Ready and untainted: the node lifecycle controller changes nothing during the tests.
        for node in (own_node, other_node):
            wait_for_node_ready(api_client, node, timeout=60)
        # The agent's pod, as the DaemonSet would make it on own_node (KWOK runs no container).
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent"},
            "spec": {
                "serviceAccountName": account,
                "nodeName": own_node,
                "containers": [{"name": "agent", "image": "registry.invalid/gpu-scheduler:never-pulled"}],
            },
        }
        core.create_namespaced_pod(namespace, pod)
        bound_to_pod = ("--bound-object-kind=Pod", "--bound-object-name=agent")
        bound = create_token(KUBECTL, kubeconfig, namespace, account, *bound_to_pod)
        unbound = create_token(KUBECTL, kubeconfig, namespace, account)
        clients += [
            token_client(kubeconfig, bound, directory / "bound.kubeconfig"),
            token_client(kubeconfig, unbound, directory / "unbound.kubeconfig"),
        ]
        found = AgentSetup(policy, namespace, own_node, other_node, *clients)

        # The API server loads policies asynchronously: wait until it refuses (dry run, nothing
        # stored) what RBAC alone allows.
        def enforced() -> Answer:
            answer = patch(found.agent, f"/api/v1/nodes/{other_node}", inventory_patch({INVENTORY: "{}"}), True)
            # Not RBAC's 403, which names the account (called as the policy is).
            if answer.status != 403 or f"ValidatingAdmissionPolicy '{policy}'" not in answer.body:
                raise NotYet(f"{answer.status}: {answer.body[:300]}")
            return answer

        wait_for(f"the policy {policy} to be enforced", enforced, timeout=30)
        yield found
    finally:
        for api in clients:
            api.close()
        run([KUBECTL, "--kubeconfig", kubeconfig, "delete", "--ignore-not-found", "--wait=false", "-f", manifest])
        ignoring_not_found(core.delete_namespaced_pod, "agent", namespace, grace_period_seconds=0)
        for node in (own_node, other_node):
            delete_node(api_client, node)
        delete_namespace(api_client, namespace)


def node_metadata(api_client, name: str) -> dict:
    return get_json(api_client, f"/api/v1/nodes/{name}")["metadata"]


def guarded_fields(api_client, name: str) -> dict:
    """What the policy keeps from the agent (status and resourceVersion move with KWOK's heartbeats)."""
    node = get_json(api_client, f"/api/v1/nodes/{name}")
    metadata = node["metadata"]
    return {
        "labels": metadata.get("labels"),
        "annotations": metadata.get("annotations"),
        "finalizers": metadata.get("finalizers"),
        "spec": node.get("spec"),
    }


def test_the_agent_publishes_on_its_own_node(setup, api_client):
    inventory = json.dumps({"gpus": []})
    answer = patch(
        setup.agent,
        f"/api/v1/nodes/{setup.own_node}",
        inventory_patch({INVENTORY: inventory}, {COUNT_LABEL: "4", MODEL_LABEL: "NVIDIA-A100"}),
    )

    assert answer.status == 200, answer
    stored = node_metadata(api_client, setup.own_node)
    assert stored["annotations"][INVENTORY] == inventory
    assert (stored["labels"][COUNT_LABEL], stored["labels"][MODEL_LABEL]) == ("4", "NVIDIA-A100")
    # A node with no GPU left to name loses its model label (a merge patch's null).
    removed = patch(setup.agent, f"/api/v1/nodes/{setup.own_node}", inventory_patch(labels={MODEL_LABEL: None}))
    assert removed.status == 200, removed
    assert MODEL_LABEL not in node_metadata(api_client, setup.own_node)["labels"]


@pytest.mark.compat
def test_another_node_is_refused(setup, api_client):
    answer = patch(setup.agent, f"/api/v1/nodes/{setup.other_node}", inventory_patch({INVENTORY: "{}"}))

    refused_by_policy(answer, setup.policy, f"agent of node {setup.own_node} may not change node {setup.other_node}")
    assert INVENTORY not in (node_metadata(api_client, setup.other_node).get("annotations") or {})


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (inventory_patch(labels={"team": "gpu"}), ["may not change the node label(s) team"]),
        (inventory_patch(labels={"kubernetes.io/hostname": None}), ["label(s) kubernetes.io/hostname"]),
        (inventory_patch({"example.com/owner": "agent"}), ["may not change the node annotation(s) example.com/owner"]),
        ({"spec": {"unschedulable": True}}, ["may not change a node's spec"]),
        ({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}, ["may not change a node's spec"]),
        ({"metadata": {"finalizers": ["example.com/hold"]}}, ["finalizers or ownerReferences"]),
    ],
    ids=["label", "label-removed", "annotation", "unschedulable", "taint", "finalizer"],
)
def test_anything_but_the_inventory_is_refused_on_its_own_node(setup, api_client, body, words):
    before = guarded_fields(api_client, setup.own_node)

    answer = patch(setup.agent, f"/api/v1/nodes/{setup.own_node}", body)

    refused_by_policy(answer, setup.policy, *words)
    assert guarded_fields(api_client, setup.own_node) == before


def test_the_inventory_with_anything_else_is_refused_whole(setup, api_client):
    before = guarded_fields(api_client, setup.own_node)

    answer = patch(
        setup.agent,
        f"/api/v1/nodes/{setup.own_node}",
        {"metadata": {"annotations": {INVENTORY: "{}"}, "labels": {"team": "gpu"}}, "spec": {"unschedulable": True}},
    )

    # The API server names the first validation that failed: the policy checks the spec first.
    refused_by_policy(answer, setup.policy, "a node's spec")
    assert guarded_fields(api_client, setup.own_node) == before


def test_a_token_that_names_no_node_may_change_nothing(setup):
    # A token of the same account bound to no pod carries no node name.
    answer = patch(setup.unbound, f"/api/v1/nodes/{setup.own_node}", inventory_patch({INVENTORY: "{}"}))

    refused_by_policy(answer, setup.policy, "token names no node", "agent.nodeRestriction.enabled=false")


def test_the_status_subresource_stays_out_of_the_agents_reach(setup):
    answer = patch(setup.agent, f"/api/v1/nodes/{setup.own_node}/status", {"status": {"capacity": {"cpu": "1"}}})

    # RBAC, not the policy: the agent has no right on nodes/status at all.
    assert answer.status == 403, answer
    assert "nodes/status" in answer.body, answer.body


def test_nobody_elses_node_updates_are_matched(setup, api_client):
    # The admin changes what the agent may not: the policy matches the agent's account only.
    answer = patch(api_client, f"/api/v1/nodes/{setup.other_node}", inventory_patch(labels={"team": "gpu"}))

    assert answer.status == 200, answer

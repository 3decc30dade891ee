"""The GPU inventory agent (agent.*) and the webhook's node reads (webhook.readNodes), as
`helm template` renders them.

The node restriction policy is rendered only for an API server that serves
admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, so it is checked with and without
`--api-versions`. What its CEL allows and refuses takes a real API server:
tests/e2e/test_agent_node_policy.py.
"""

from __future__ import annotations

import pytest
from e2e.charts import KUBE_VERSION_ARGS

from .conftest import (
    REGISTRY_SET,
    SCHEDULER_CHART,
    SCHEDULER_NAMESPACE,
    annotations,
    container_args,
    flag,
    kubernetes_validate,
    pod_spec,
    refused_render,
    run,
    wave,
)

pytestmark = pytest.mark.delivery

AGENT = "gpu-scheduler-agent"
WEBHOOK = "gpu-scheduler-webhook"
POLICY_API = ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",)
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
AGENT_USER = f"system:serviceaccount:{SCHEDULER_NAMESPACE}:{AGENT}"
# The label NVIDIA GPU feature discovery (and the GPU Operator) puts on nodes with GPUs.
GPU_NODES = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
            ]
        }
    }
}


def agent_policies(rendered) -> list[dict]:
    """The agent's ValidatingAdmissionPolicy and its binding (the chart has others: the guard of
    the device annotations, test_chart_bind_mode.py)."""
    return [d for d in rendered.of_kind(*POLICY_KINDS) if d["metadata"]["name"] == AGENT]


def agent_container(rendered) -> dict:
    (container,) = pod_spec(rendered.one("DaemonSet", AGENT))["containers"]
    return container


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def of_component(rendered, component: str) -> list[dict]:
    return [d for d in rendered.docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == component]


# -- the DaemonSet -----------------------------------------------------------------------


def test_the_agent_runs_on_every_gpu_node_with_its_node_name(render):
    rendered = render(SCHEDULER_CHART)
    daemonset = rendered.one("DaemonSet", AGENT)
    spec = pod_spec(daemonset)
    container = agent_container(rendered)
    args = container_args(daemonset)

    assert daemonset["spec"]["selector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "gpu-scheduler",
            "app.kubernetes.io/instance": "gpu-scheduler",
            "app.kubernetes.io/component": "agent",
        }
    }
    assert (
        daemonset["spec"]["selector"]["matchLabels"].items()
        <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    )
    assert args[0] == "agent"
    assert flag(args, "node-name") == "$(NODE_NAME)"
    assert flag(args, "interval") == "60"
    assert (flag(args, "log-format"), flag(args, "log-level")) == ("json", "info")
    env = env_of(container)
    assert env["NODE_NAME"] == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    # The NVIDIA runtime injects NVML for these, without a GPU taken from the device plugin.
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    for part in ("requests", "limits"):
        assert not [r for r in container["resources"][part] if r.startswith("nvidia.com/")], container["resources"]
    assert container["resources"] == {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}}
    assert spec["affinity"] == GPU_NODES
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # Empty runtimeClassName: a missing RuntimeClass would have every agent pod refused.
    assert "runtimeClassName" not in spec and "priorityClassName" not in spec and "nodeSelector" not in spec
    # It serves nothing: no port, no probe.
    assert not {"ports", "livenessProbe", "readinessProbe"} & container.keys()
    assert daemonset["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}


def test_the_agent_mounts_its_token_and_runs_locked_down(render):
    rendered = render(SCHEDULER_CHART)
    spec = pod_spec(rendered.one("DaemonSet", AGENT))
    account = rendered.one("ServiceAccount", AGENT)

    assert spec["serviceAccountName"] == AGENT
    assert spec["automountServiceAccountToken"] is True
    assert account["automountServiceAccountToken"] is True
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert "hostNetwork" not in spec and "hostPID" not in spec


def test_agent_values_reach_its_pods(render):
    rendered = render(
        SCHEDULER_CHART,
        "agent.interval=15",
        "agent.runtimeClassName=nvidia",
        "agent.priorityClassName=system-node-critical",
        "agent.affinity.nodeAffinity=null",
        "agent.nodeSelector.example\\.com/gpu=present",
        "agent.tolerations[0].operator=Exists",
        "agent.podLabels.team=gpu",
        "agent.podLabels.app\\.kubernetes\\.io/component=other",
        "agent.podAnnotations.example\\.com/owner=gpu",
        "agent.extraArgs={--log-level=debug,--once}",
        "agent.extraEnv[0].name=LD_LIBRARY_PATH",
        "agent.extraEnv[0].value=/opt/fake-nvml",
        "agent.extraVolumes[0].name=fake-nvml",
        "agent.extraVolumes[0].hostPath.path=/opt/fake-nvml",
        "agent.extraVolumeMounts[0].name=fake-nvml",
        "agent.extraVolumeMounts[0].mountPath=/opt/fake-nvml",
        "agent.extraVolumeMounts[0].readOnly=true",
        "agent.updateStrategy.type=OnDelete",
        "agent.updateStrategy.rollingUpdate=null",
    )
    daemonset = rendered.one("DaemonSet", AGENT)
    spec = pod_spec(daemonset)
    container = agent_container(rendered)
    metadata = daemonset["spec"]["template"]["metadata"]

    assert flag(container["args"][:-2], "interval") == "15"
    # Last: a flag given again overrides the chart's (the last one wins).
    assert container["args"][-2:] == ["--log-level=debug", "--once"]
    assert container["env"][-1] == {"name": "LD_LIBRARY_PATH", "value": "/opt/fake-nvml"}
    assert container["volumeMounts"] == [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "fake-nvml", "mountPath": "/opt/fake-nvml", "readOnly": True},
    ]
    assert spec["volumes"][-1] == {"name": "fake-nvml", "hostPath": {"path": "/opt/fake-nvml"}}
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["nodeSelector"] == {"example.com/gpu": "present"}
    assert "affinity" not in spec
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert metadata["labels"]["team"] == "gpu"
    assert metadata["labels"]["app.kubernetes.io/component"] == "agent"
    assert metadata["annotations"] == {"example.com/owner": "gpu"}
    assert daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_agent_service_account_takes_its_name_and_annotations_from_values(render):
    rendered = render(
        SCHEDULER_CHART,
        "agent.serviceAccount.name=inventory",
        "agent.serviceAccount.annotations.team=gpu",
        api_versions=POLICY_API,
    )
    account = rendered.one("ServiceAccount", "inventory")
    binding = rendered.one("ClusterRoleBinding", AGENT)
    policy = rendered.one("ValidatingAdmissionPolicy", AGENT)

    assert annotations(account) == {"team": "gpu", "argocd.argoproj.io/sync-wave": "3"}
    assert pod_spec(rendered.one("DaemonSet", AGENT))["serviceAccountName"] == "inventory"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "inventory", "namespace": SCHEDULER_NAMESPACE}]
    # The policy holds the account the pods run as.
    (condition,) = policy["spec"]["matchConditions"]
    assert f"'system:serviceaccount:{SCHEDULER_NAMESPACE}:inventory'" in condition["expression"]


# -- RBAC ----------------------------------------------------------------------------------


def test_the_agent_may_get_and_patch_nodes_and_nothing_else(render):
    rendered = render(SCHEDULER_CHART)
    role = rendered.one("ClusterRole", AGENT)
    binding = rendered.one("ClusterRoleBinding", AGENT)

    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AGENT, "namespace": SCHEDULER_NAMESPACE}]
    # Nothing namespaced: the agent reads no Secret, ConfigMap or pod.
    assert [d["kind"] for d in of_component(rendered, "agent") if d["kind"] in ("Role", "RoleBinding")] == []


# -- the node restriction policy ----------------------------------------------------------


def test_the_policy_is_rendered_only_where_the_api_server_serves_it(render):
    without = render(SCHEDULER_CHART)
    served = render(SCHEDULER_CHART, api_versions=POLICY_API)
    disabled = render(SCHEDULER_CHART, "agent.nodeRestriction.enabled=false", api_versions=POLICY_API)

    assert agent_policies(without) == []
    assert agent_policies(disabled) == []
    assert sorted(d["kind"] for d in agent_policies(served)) == sorted(POLICY_KINDS)
    for rendered in (without, disabled):
        # RBAC alone: the agent still runs.
        rendered.one("DaemonSet", AGENT)
        rendered.one("ClusterRole", AGENT)


def test_the_policy_matches_the_agents_node_updates_only(render):
    rendered = render(SCHEDULER_CHART, api_versions=POLICY_API)
    policy = rendered.one("ValidatingAdmissionPolicy", AGENT)["spec"]
    binding = rendered.one("ValidatingAdmissionPolicyBinding", AGENT)["spec"]

    assert binding == {"policyName": AGENT, "validationActions": ["Deny"]}
    # A PATCH reaches admission as an UPDATE; nodes/status is left out (RBAC grants none of it).
    assert policy["matchConstraints"] == {
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}]
    }
    (condition,) = policy["matchConditions"]
    assert condition["expression"].split() == [
        "has(request.userInfo.username)",
        "&&",
        "request.userInfo.username",
        "==",
        f"'{AGENT_USER}'",
    ]
    assert policy["failurePolicy"] == "Fail"
    assert "paramKind" not in policy


def test_the_policy_checks_the_tokens_node_and_every_key_but_the_inventory(render):
    policy = render(SCHEDULER_CHART, api_versions=POLICY_API).one("ValidatingAdmissionPolicy", AGENT)["spec"]
    variables = {v["name"]: " ".join(v["expression"].split()) for v in policy["variables"]}
    validations = [" ".join(v["expression"].split()) for v in policy["validations"]]

    assert "request.userInfo.extra['authentication.kubernetes.io/node-name']" in variables["tokenNodes"]
    assert variables["ownLabels"] == "['gpu-scheduler/gpu-model', 'gpu-scheduler/gpu-count']"
    assert "k != 'gpu-scheduler/gpus'" in variables["changedAnnotations"]
    # Absent maps compare as empty ones: has() before every read.
    for name in ("oldLabels", "newLabels", "oldAnnotations", "newAnnotations"):
        assert variables[name].startswith("has("), variables[name]
    assert validations[:2] == [
        "size(variables.tokenNodes) > 0",
        "size(variables.tokenNodes) == 0 || object.metadata.name in variables.tokenNodes",
    ]
    assert "object.spec == oldObject.spec" in validations[2]
    assert validations[3:5] == ["size(variables.changedLabels) == 0", "size(variables.changedAnnotations) == 0"]
    for validation in policy["validations"]:
        assert validation["reason"] == "Forbidden"
        # The API server refuses a message with a line break.
        assert validation["message"] and "\n" not in validation["message"], validation
        assert validation["message"].startswith("the gpu-scheduler agent")
    assert "do not carry the node name" in policy["validations"][0]["message"]
    assert "agent.nodeRestriction.enabled=false" in policy["validations"][0]["message"]


def test_the_policy_exists_before_the_agent_runs(render):
    rendered = render(SCHEDULER_CHART, api_versions=POLICY_API)

    policy_waves = {wave(d) for d in agent_policies(rendered)}
    agent_waves = {wave(d) for d in of_component(rendered, "agent") if d["kind"] not in POLICY_KINDS}

    assert policy_waves == {-1}
    # After the scheduler's wave: an agent that cannot start never holds the scheduler back.
    assert agent_waves == {3} and wave(rendered.one("Deployment", "gpu-scheduler-scheduler")) < 3


@pytest.mark.parametrize("api_versions", [(), POLICY_API], ids=["plain", "with-policy-api"])
def test_agent_disabled_renders_nothing_of_it(render, api_versions):
    rendered = render(SCHEDULER_CHART, "agent.enabled=false", api_versions=api_versions)

    assert of_component(rendered, "agent") == []
    assert rendered.of_kind("DaemonSet") == [] and agent_policies(rendered) == []
    assert AGENT not in [d["metadata"]["name"] for d in rendered.docs]


def test_the_policy_passes_the_kubernetes_1_35_and_1_37_schemas(render, lint_bin, tmp_path):
    docs = of_component(render(SCHEDULER_CHART, "agent.runtimeClassName=nvidia", api_versions=POLICY_API), "agent")

    result = kubernetes_validate(lint_bin, tmp_path / "agent.yaml", docs)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout


# -- priority and the critical pods quota ---------------------------------------------------


def test_a_critical_class_the_quota_counts_is_refused_for_the_agent(helm):
    argv = [helm, "template", "gpu-scheduler", SCHEDULER_CHART, *KUBE_VERSION_ARGS, "--set", REGISTRY_SET]

    counted = run([*argv, "--set", "agent.priorityClassName=system-cluster-critical"])
    without_quota = run(
        [*argv, "--set", "agent.priorityClassName=system-cluster-critical", "--set", "criticalPodsQuota.enabled=false"]
    )
    other_class = run([*argv, "--set", "agent.priorityClassName=system-node-critical"])

    assert counted.returncode != 0
    assert "agent.priorityClassName system-cluster-critical is counted by the release's criticalPodsQuota" in (
        counted.stderr
    )
    assert without_quota.returncode == 0, without_quota.stderr
    assert other_class.returncode == 0, other_class.stderr


# -- webhook.readNodes -----------------------------------------------------------------------


def test_the_webhook_reads_and_watches_nodes_by_default(render):
    rendered = render(SCHEDULER_CHART)
    spec = pod_spec(rendered.one("Deployment", WEBHOOK))
    (container,) = spec["containers"]
    role = rendered.one("ClusterRole", WEBHOOK)
    binding = rendered.one("ClusterRoleBinding", WEBHOOK)

    assert spec["automountServiceAccountToken"] is True
    assert rendered.one("ServiceAccount", WEBHOOK)["automountServiceAccountToken"] is True
    # A GET of the node a pre-bound pod names; a list+watch of the GPU nodes
    # for the devices they publish. Never a write.
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WEBHOOK}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": WEBHOOK, "namespace": SCHEDULER_NAMESPACE}]
    assert env_of(container)["WEBHOOK_READ_NODES"] == {"name": "WEBHOOK_READ_NODES", "value": "true"}
    # The scheduler's alias label, so both resolve a map's node alike.
    assert env_of(container)["ALIAS_LABEL"] == {"name": "ALIAS_LABEL", "value": "gpu-node-name"}
    assert render(SCHEDULER_CHART, "aliasLabel=rack-slot").one("Deployment", WEBHOOK)["spec"]["template"]["spec"][
        "containers"
    ][0]["env"][1] == {"name": "ALIAS_LABEL", "value": "rack-slot"}
    # Read before its configurations send it pods (wave 1).
    assert wave(role) == wave(binding) == wave(rendered.one("Deployment", WEBHOOK)) == 0


def test_without_read_nodes_the_webhook_has_no_credentials_at_all(render):
    rendered = render(SCHEDULER_CHART, "webhook.readNodes=false")
    spec = pod_spec(rendered.one("Deployment", WEBHOOK))
    (container,) = spec["containers"]

    assert spec["automountServiceAccountToken"] is False
    assert rendered.one("ServiceAccount", WEBHOOK)["automountServiceAccountToken"] is False
    webhook_rbac = [d for d in rendered.of_kind("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    assert WEBHOOK not in [d["metadata"]["name"] for d in webhook_rbac]
    assert env_of(container)["WEBHOOK_READ_NODES"] == {"name": "WEBHOOK_READ_NODES", "value": "false"}
    # The environment is the chart's own plus extraEnv, as before.
    assert [e["name"] for e in container["env"]] == ["WEBHOOK_READ_NODES", "ALIAS_LABEL"]


def test_an_existing_webhook_account_still_gets_its_token_when_it_reads_nodes(render):
    rendered = render(SCHEDULER_CHART, "webhook.serviceAccount.create=false", "webhook.serviceAccount.name=admission")

    assert pod_spec(rendered.one("Deployment", WEBHOOK))["automountServiceAccountToken"] is True
    assert rendered.one("ClusterRoleBinding", WEBHOOK)["subjects"][0]["name"] == "admission"


# -- the schema ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ("agent.enable=true", "enable"),
        ("agent.nodeRestriction.enable=true", "enable"),
        ("agent.nodeRestriction.enabled=yes", "agent/nodeRestriction/enabled"),
        ("agent.serviceAccount.nmae=x", "nmae"),
        ("agent.interval=0", "agent/interval"),
        ("agent.runtimeClassName=Not_Valid", "agent/runtimeClassName"),
        ("agent.updateStrategy.type=Recreate", "agent/updateStrategy/type"),
        ("agent.updateStrategy.rollingUpdate.maxUnavailable=ten", "maxUnavailable"),
        ("agent.extraVolumeMounts[0].name=x", "mountPath"),
        ("agent.extraVolume[0].name=x", "extraVolume"),
        ("agent.podLabels.team=Not Valid", "agent/podLabels"),
        ("webhook.readNodes=yes", "webhook/readNodes"),
    ],
)
def test_schema_rejects_a_mistyped_agent_value(helm, assignment, complaint):
    stderr = refused_render(helm, SCHEDULER_CHART, assignment)
    assert complaint in stderr, stderr

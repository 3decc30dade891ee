"""What the charts render for running a release in production (helm template, values -> objects).

The default image reference, PodDisruptionBudgets, priority classes and the quota
they may need, the opt-out label, NetworkPolicies, the certificate renewal
CronJob, the `helm test` hook, and the example values files in docs/examples.
What the API server does with them is tested in test_release_cluster.py.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from e2e.charts import KUBE_VERSION_ARGS

from .conftest import (
    CHECK_CHART,
    REGISTRY_SET,
    REPO,
    SCHEDULER_CHART,
    TEST_REGISTRY,
    annotations,
    container_args,
    flag,
    kubernetes_validate,
    pod_spec,
    refused_render,
    run,
)

pytestmark = pytest.mark.delivery

EXAMPLES = REPO / "docs" / "examples"
GPU_SCHEDULER = REPO / ".venv" / "bin" / "gpu-scheduler"
CRITICAL = "system-cluster-critical"
# Both charts' default image.registry: where users' release pipelines push is theirs to say.
PLACEHOLDER_REGISTRY = "registry.gitlab.com/your-group/gpu-scheduler"


def chart_meta(chart) -> dict:
    return yaml.safe_load((chart / "Chart.yaml").read_text())


def values(chart) -> dict:
    return yaml.safe_load((chart / "values.yaml").read_text())


# -- the image -------------------------------------------------------------


def test_both_charts_pull_the_release_of_their_app_version_from_one_registry(render):
    registries = {values(chart)["image"]["registry"] for chart in (SCHEDULER_CHART, CHECK_CHART)}
    images = {
        owner["metadata"]["name"]: pod_spec(owner)["containers"][0]["image"]
        for chart in (SCHEDULER_CHART, CHECK_CHART)
        for owner in render(chart).pod_owners()
    }

    # One value, the same in both charts: the release pipeline checks it (scripts/version.py).
    assert registries == {PLACEHOLDER_REGISTRY}
    for chart in (SCHEDULER_CHART, CHECK_CHART):
        assert chart_meta(chart)["appVersion"] == chart_meta(chart)["version"]
    version = chart_meta(SCHEDULER_CHART)["appVersion"]
    assert set(images.values()) == {
        f"{TEST_REGISTRY}/gpu-scheduler:{version}",
        f"{TEST_REGISTRY}/gpu-scheduler-check:{version}",
    }, images


@pytest.mark.parametrize("chart", [SCHEDULER_CHART, CHECK_CHART], ids=lambda c: c.name)
def test_the_charts_refuse_kubernetes_older_than_1_35(helm, chart):
    """kubeVersion >=1.35: the oldest Kubernetes make test-compat proves; 1.34 is refused
    before anything is rendered, 1.35 is not."""

    def rendered(kube_version: str):
        return run([helm, "template", chart.name, chart, "--kube-version", kube_version, "--set", REGISTRY_SET])

    refused = rendered("v1.34.9")
    assert refused.returncode != 0, "rendered for Kubernetes 1.34"
    assert "incompatible with Kubernetes v1.34.9" in refused.stderr, refused.stderr
    accepted = rendered("v1.35.0")
    assert accepted.returncode == 0, accepted.stderr


@pytest.mark.parametrize("chart", [SCHEDULER_CHART, CHECK_CHART], ids=lambda c: c.name)
@pytest.mark.parametrize("sets", [(), (f"image.registry={PLACEHOLDER_REGISTRY}/", "image.tag=0.0.9")])
def test_the_placeholder_registry_is_refused_in_one_line_that_says_what_to_set(helm, chart, sets):
    """A first `helm install` with the defaults would create pods stuck in ImagePullBackOff;
    it stops before anything is created, and says what to set."""
    argv = [helm, "template", chart.name, chart, *KUBE_VERSION_ARGS]
    for assignment in sets:
        argv += ["--set", assignment]

    result = run(argv)

    assert result.returncode != 0, "the placeholder registry was rendered"
    # Helm's own hint about --debug follows on a line of its own.
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert PLACEHOLDER_REGISTRY in line
    assert "--set image.registry=<your registry>" in line
    assert "--set image.registry= " in line or line.rstrip().endswith("--set image.registry="), line


def test_pinning_a_release_changes_every_image_and_the_version_label(render):
    rendered = render(SCHEDULER_CHART, "image.tag=0.0.9")

    for owner in rendered.pod_owners():
        assert pod_spec(owner)["containers"][0]["image"].endswith("/gpu-scheduler:0.0.9"), owner["metadata"]["name"]
        assert owner["metadata"]["labels"]["app.kubernetes.io/version"] == "0.0.9"


def test_the_version_script_sees_one_version_everywhere():
    result = run(["python3", REPO / "scripts" / "version.py"])

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == chart_meta(SCHEDULER_CHART)["appVersion"]


# -- disruption budgets and priority ------------------------------------------


@pytest.mark.parametrize("component", ["scheduler", "webhook"])
def test_a_disruption_budget_only_with_more_than_one_replica(render, component):
    name = f"gpu-scheduler-{component}"
    one = render(SCHEDULER_CHART, f"{component}.replicas=1")
    three = render(SCHEDULER_CHART, f"{component}.replicas=3", f"{component}.podDisruptionBudget.minAvailable=2")

    assert name not in [d["metadata"]["name"] for d in one.of_kind("PodDisruptionBudget")]
    budget = three.one("PodDisruptionBudget", name)
    assert budget["spec"]["minAvailable"] == 2
    assert budget["spec"]["selector"] == three.one("Deployment", name)["spec"]["selector"]


def test_scheduler_and_webhook_are_system_cluster_critical_and_nothing_else_is(render):
    rendered = render(SCHEDULER_CHART)

    classes = {o["metadata"]["name"]: pod_spec(o).get("priorityClassName") for o in rendered.pod_owners()}

    assert classes.pop("gpu-scheduler-scheduler") == CRITICAL
    assert classes.pop("gpu-scheduler-webhook") == CRITICAL
    assert set(classes.values()) == {None}, classes


def quota(rendered) -> dict | None:
    found = rendered.of_kind("ResourceQuota")
    assert len(found) <= 1
    return found[0] if found else None


def test_a_quota_admits_the_critical_pods_of_the_release_with_room_for_a_rolling_update(render):
    found = quota(render(SCHEDULER_CHART, "scheduler.replicas=2", "webhook.replicas=3"))

    assert found["metadata"]["name"] == "gpu-scheduler-critical-pods"
    assert found["spec"] == {
        "hard": {"pods": "10"},
        "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [CRITICAL]}]},
    }
    # Before the Deployments' pods exist (wave 0 and 2).
    assert int(annotations(found)["argocd.argoproj.io/sync-wave"]) < 0


@pytest.mark.parametrize(
    ("sets", "namespace", "why"),
    [
        ((), "kube-system", "kube-system needs no quota"),
        (("scheduler.priorityClassName=", "webhook.priorityClassName=high"), None, "no critical class in use"),
        (("criticalPodsQuota.enabled=false",), None, "turned off"),
    ],
)
def test_no_quota_where_none_is_needed(render, sets, namespace, why):
    assert quota(render(SCHEDULER_CHART, *sets, namespace=namespace)) is None, why


def test_the_quota_names_only_the_classes_in_use(render):
    found = quota(
        render(SCHEDULER_CHART, "scheduler.priorityClassName=", "webhook.priorityClassName=system-node-critical")
    )

    assert found["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["system-node-critical"]
    assert found["spec"]["hard"] == {"pods": "4"}


# -- network policies ---------------------------------------------------------


def test_no_network_policy_unless_asked(render):
    assert render(SCHEDULER_CHART).of_kind("NetworkPolicy") == []


def test_network_policies_open_only_the_webhook_and_metrics_ports(render):
    peer = '[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]'
    rendered = render(SCHEDULER_CHART, "networkPolicy.enabled=true", "webhook.port=9443")
    with_peers = _render_json(f"networkPolicy.metrics.from={peer}")

    for component, port in (("webhook", 9443), ("scheduler", 10251)):
        policy = rendered.one("NetworkPolicy", f"gpu-scheduler-{component}")
        deployment = rendered.one("Deployment", f"gpu-scheduler-{component}")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert policy["spec"]["ingress"] == [{"ports": [{"port": port, "protocol": "TCP"}]}]
        ports = {p["containerPort"] for c in pod_spec(deployment)["containers"] for p in c["ports"]}
        assert port in ports
    (rule,) = with_peers["gpu-scheduler-scheduler"]["spec"]["ingress"]
    assert rule["from"] == yaml.safe_load(peer)


def _render_json(assignment: str) -> dict:
    result = run(
        [
            REPO / ".cache" / "bin" / "helm",
            "template",
            "gpu-scheduler",
            SCHEDULER_CHART,
            *KUBE_VERSION_ARGS,
            "--set",
            REGISTRY_SET,
            "--set",
            "networkPolicy.enabled=true",
            "--set-json",
            assignment,
        ]
    )
    assert result.returncode == 0, result.stderr
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "NetworkPolicy"}


# -- certificate renewal ------------------------------------------------------


def test_a_daily_cronjob_renews_the_certificate_with_the_hook_jobs_command(render):
    rendered = render(SCHEDULER_CHART)
    cronjob = rendered.one("CronJob", "gpu-scheduler-certs-renewal")
    patch_job = rendered.one("Job", "gpu-scheduler-certs-patch")

    assert cronjob["spec"]["schedule"] == "17 3 * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    # Exactly the post-install hook's command: trust the new CA first, then write the Secret.
    assert container_args(cronjob) == container_args(patch_job)
    assert flag(container_args(cronjob), "patch-webhook") == "gpu-scheduler"
    spec = pod_spec(cronjob)
    assert spec["serviceAccountName"] == "gpu-scheduler-certs-renewal"
    assert spec["automountServiceAccountToken"] is True
    # Standing objects, not hooks: they must exist between upgrades.
    for doc in rendered.docs:
        if doc["metadata"]["name"] == "gpu-scheduler-certs-renewal":
            assert "helm.sh/hook" not in annotations(doc), doc["kind"]


@pytest.mark.parametrize(
    "sets",
    [
        ("certs.mode=cert-manager",),
        ("certs.mode=provided", "certs.existingSecret=tls"),
        ("certs.renewal.enabled=false",),
    ],
)
def test_no_renewal_cronjob_where_the_chart_does_not_own_the_certificate(render, sets):
    assert render(SCHEDULER_CHART, *sets).of_kind("CronJob") == []


# -- helm test ----------------------------------------------------------------


def test_helm_test_runs_the_smoke_test_after_its_rbac(render):
    rendered = render(SCHEDULER_CHART, "tests.namespace=gpu-probe", "tests.devices=1")
    tests = [d for d in rendered.docs if annotations(d).get("helm.sh/hook") == "test"]
    pod = rendered.one("Pod", "gpu-scheduler-smoke-test")
    args = container_args(pod)

    assert sorted(f"{d['kind']}/{d['metadata'].get('namespace', '-')}" for d in tests) == [
        "ClusterRole/-",
        "ClusterRoleBinding/-",
        "Pod/gpu-scheduler-system",
        "Role/gpu-probe",
        "RoleBinding/gpu-probe",
        "ServiceAccount/gpu-scheduler-system",
    ]
    for doc in tests:
        weight = int(annotations(doc)["helm.sh/hook-weight"])
        assert weight == (0 if doc["kind"] == "Pod" else -10), doc["kind"]
        # The pod outlives a pass: `helm test --logs` reads it after helm deleted the
        # hook-succeeded objects (a passing test failed with "pod not found" on KinD).
        policy = "before-hook-creation" if doc["kind"] == "Pod" else "before-hook-creation,hook-succeeded"
        assert annotations(doc)["helm.sh/hook-delete-policy"] == policy, doc["kind"]
    assert args[0] == "smoke-test"
    assert flag(args, "namespace") == "gpu-probe"
    assert flag(args, "devices") == "1"
    assert flag(args, "scheduler-name") == "gpu-scheduler"
    assert flag(args, "image") == pod_spec(pod)["containers"][0]["image"]
    assert not [a for a in args if a.startswith("--node")]
    assert pod_spec(pod)["serviceAccountName"] == "gpu-scheduler-smoke-test"
    # The release namespace is never served by the webhook: the probe says so itself.
    (env,) = pod_spec(pod)["containers"][0]["env"]
    assert env == {"name": "RELEASE_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}


def test_a_named_test_node_needs_no_cluster_wide_rights(render):
    rendered = render(SCHEDULER_CHART, "tests.node=gpu-7")

    assert flag(container_args(rendered.one("Pod", "gpu-scheduler-smoke-test")), "node") == "gpu-7"
    names = [d["metadata"]["name"] for d in rendered.of_kind("ClusterRole", "ClusterRoleBinding")]
    assert "gpu-scheduler-smoke-test" not in names


# -- the schema ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ("certs.renewal.schedule=daily", "certs/renewal/schedule"),
        ("image.registry=Registry.Example.com", "image/registry"),
        ("image.tag=v1 2", "image/tag"),
        ("tests.namespace=Not_A_Namespace", "tests/namespace"),
        ("networkPolicy.webhok.from=x", "networkPolicy"),
        ("criticalPodsQuota.pods=3", "criticalPodsQuota"),
        ("scheduler.podDisruptionBudget.maxUnavailable=1", "podDisruptionBudget"),
        ("scheduler.priorityClassName=Critical", "scheduler/priorityClassName"),
    ],
)
def test_schema_rejects_a_wrong_release_value(helm, assignment, complaint):
    stderr = refused_render(helm, SCHEDULER_CHART, assignment, release="x")
    assert complaint in stderr, stderr


# -- the example values files --------------------------------------------------

EXAMPLE_FILES = sorted(EXAMPLES.glob("*/*.values.yaml"))


def test_there_is_a_kind_and_a_gpu_cluster_example_for_each_chart():
    assert [f.relative_to(EXAMPLES).as_posix() for f in EXAMPLE_FILES] == [
        "gpu-cluster/gpu-scheduler-check.values.yaml",
        "gpu-cluster/gpu-scheduler.values.yaml",
        "kind/gpu-scheduler-check.values.yaml",
        "kind/gpu-scheduler.values.yaml",
    ]


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_each_example_renders_and_validates_against_kubernetes(helm, lint_bin, example, tmp_path):
    chart = REPO / "charts" / example.name.removesuffix(".values.yaml")
    argv = [helm, "template", chart.name, chart, *KUBE_VERSION_ARGS, "--namespace", "examples", "-f", example]
    if yaml.safe_load(example.read_text())["image"]["registry"] == PLACEHOLDER_REGISTRY:
        # A line for users to replace with their registry (the charts refuse the placeholder).
        argv += ["--set", REGISTRY_SET]
    rendered = run(argv)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d and not d["apiVersion"].startswith("monitoring.")]

    validated = kubernetes_validate(lint_bin, tmp_path / "rendered.yaml", docs)

    assert validated.returncode == 0, validated.stdout + validated.stderr


@pytest.mark.parametrize(
    "example", sorted(EXAMPLES.glob("*/gpu-scheduler-check.values.yaml")), ids=lambda p: p.parent.name
)
def test_each_example_map_is_valid_and_has_a_line_per_replica(example):
    settings = yaml.safe_load(example.read_text())

    checked = subprocess.run(
        [GPU_SCHEDULER, "map", "validate"],
        input=settings["schedulingMap"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert checked.returncode == 0, checked.stderr
    indexes = sorted(int(i) for i in yaml.safe_load(checked.stdout))
    assert indexes == list(range(settings["replicas"]))


def test_the_gpu_cluster_example_uses_the_nvidia_runtime_and_real_node_names():
    settings = yaml.safe_load((EXAMPLES / "gpu-cluster" / "gpu-scheduler-check.values.yaml").read_text())
    nodes = {line.split("=", 1)[1].split(":")[0] for line in settings["schedulingMap"].splitlines() if "=" in line}

    assert settings["runtimeClassName"] == "nvidia"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in settings["extraEnv"]
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", node) and "." in node for node in nodes), nodes

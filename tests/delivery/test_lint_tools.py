"""The delivery files pass the real linters and validators users and CI run.

helm lint --strict (charts), kubernetes-validate (rendered manifests against
the Kubernetes 1.35 and 1.37 schemas, strict), yamllint (every YAML file but Helm
templates), hadolint (Dockerfiles), check-jsonschema (.gitlab-ci.yml against
GitLab's schema) and gitlab-ci-local (the pipeline's lint and test jobs run on
this host with the shell executor).
"""

from __future__ import annotations

import pytest

from .conftest import CHECK_CHART, REGISTRY_SET, REPO, SCHEDULER_CHART, kubernetes_validate, run

pytestmark = pytest.mark.delivery

# Kinds of add-ons (cert-manager, Prometheus Operator): not in the Kubernetes schemas.
ADDON_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
CHART_VARIANTS = [
    (SCHEDULER_CHART, ()),
    (
        SCHEDULER_CHART,
        (
            "certs.mode=cert-manager",
            "metrics.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.grafanaDashboard.enabled=true",
        ),
    ),
    (SCHEDULER_CHART, ("certs.mode=provided", "certs.existingSecret=my-tls")),
    (SCHEDULER_CHART, ("webhook.hostNetwork=true", "webhook.port=10250")),
    (
        SCHEDULER_CHART,
        (
            "image.digest=sha256:" + "0" * 64,
            "scheduler.serviceAccount.annotations.team=gpu",
            "scheduler.podLabels.team=gpu",
            "scheduler.topologySpreadConstraints[0].maxSkew=1",
            "scheduler.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "scheduler.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            "scheduler.podDisruptionBudget.unhealthyPodEvictionPolicy=AlwaysAllow",
            "webhook.extraArgs={--workers=3}",
            "webhook.extraEnv[0].name=TZ",
            "webhook.extraEnv[0].value=UTC",
        ),
    ),
    (
        SCHEDULER_CHART,
        (
            "commonLabels.team=gpu",
            "commonAnnotations.owner=gpu-platform",
            "scheduler.livenessProbe.timeoutSeconds=3",
            "webhook.startupProbe.tcpSocket.port=https",
            "webhook.startupProbe.failureThreshold=30",
            "certs.job.nodeSelector.pool=system",
            "certs.job.tolerations[0].operator=Exists",
            "certs.job.priorityClassName=system-cluster-critical",
            "global.imageRegistry=mirror.example.com/gpu",
        ),
    ),
    (CHECK_CHART, ()),
    (
        CHECK_CHART,
        (
            "podLabels.team=gpu",
            "podAnnotations.owner=gpu",
            "topologySpreadConstraints[0].maxSkew=1",
            "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
            "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        ),
    ),
]


@pytest.mark.parametrize(("chart", "sets"), CHART_VARIANTS)
def test_helm_lint_strict_passes(helm, chart, sets):
    argv = [helm, "lint", "--strict", chart]
    for assignment in (REGISTRY_SET, *sets):
        argv += ["--set", assignment]

    result = run(argv)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(("chart", "sets"), CHART_VARIANTS)
def test_rendered_manifests_match_the_kubernetes_1_35_and_1_37_schemas(render, lint_bin, tmp_path, chart, sets):
    docs = [doc for doc in render(chart, *sets).docs if not doc["apiVersion"].startswith(ADDON_GROUPS)]

    result = kubernetes_validate(lint_bin, tmp_path / "rendered.yaml", docs)

    assert result.returncode == 0, result.stdout + result.stderr
    # --quiet prints only problems; a kind without a schema is one too.
    assert result.stdout.strip() == "", result.stdout


def test_kubernetes_validate_rejects_an_unknown_field(lint_bin, tmp_path):
    # The check above must be able to fail: strict mode refuses a typo.
    manifest = tmp_path / "typo.yaml"
    manifest.write_text("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  portz: []\n")

    result = kubernetes_validate(lint_bin, manifest)

    assert result.returncode != 0
    assert "portz" in result.stdout + result.stderr


def test_yamllint_passes_on_every_yaml_file(lint_bin):
    result = run([lint_bin / "yamllint", "--strict", "--format", "parsable", "."], cwd=REPO)

    assert result.returncode == 0, result.stdout + result.stderr


def test_yamllint_covers_values_and_ci_files_but_not_helm_templates(lint_bin):
    result = run([lint_bin / "yamllint", "--list-files", "."], cwd=REPO)

    listed = set(result.stdout.split())
    assert {
        "./.gitlab-ci.yml",
        "./charts/gpu-scheduler/values.yaml",
        "./charts/gpu-scheduler/Chart.yaml",
        "./charts/gpu-scheduler-check/values.yaml",
        "./cluster/kind-config.yaml",
        "./argocd/applicationset.yaml",
        "./argocd/appproject.yaml",
    } <= listed
    assert not [f for f in listed if "/templates/" in f or f.startswith("./.cache/")]


def test_hadolint_passes_on_both_dockerfiles(lint_bin):
    result = run(
        [lint_bin / "hadolint", "apps/scheduler/Dockerfile", "apps/check/Dockerfile"],
        cwd=REPO,
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_gitlab_ci_matches_gitlabs_schema(lint_bin):
    result = run(
        [
            lint_bin / "check-jsonschema",
            "--builtin-schema",
            "vendor.gitlab-ci",
            ".gitlab-ci.yml",
        ],
        cwd=REPO,
    )

    assert result.returncode == 0, result.stdout + result.stderr

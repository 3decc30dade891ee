"""argocd/: the AppProject and the ApplicationSet that deploy both charts in order on the
clusters labelled for them, and the root Application that keeps argocd/ applied from git.

Offline, the manifests are checked against the charts they deploy (every kind
the charts render is allowed, nothing else cluster-wide). On the local
control plane (marker `cluster`), Argo CD's own CRDs (from the module of the
Argo CD we build, cluster/argocd/go.mod) are applied and the manifests are
applied server-side, so the API server validates every field against the
real schema. No Argo CD
controller runs there: what Argo CD then does with them is not exercised.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest
import yaml

from .conftest import (
    CHECK_CHART,
    CHECK_NAMESPACE,
    REPO,
    SCHEDULER_CHART,
    SCHEDULER_NAMESPACE,
    run,
)

ARGOCD = REPO / "argocd"
ARGOCD_MODULE_DIR = REPO / "cluster" / "argocd"
ARGOCD_MODULE = "github.com/argoproj/argo-cd/v3"
REPO_URL = "https://gitlab.com/your-group/gpu-scheduler.git"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}
# Argo CD renders with the cluster's API versions: the agent's node restriction needs the
# first, the bind mode's MutatingAdmissionPolicy the second.
CLUSTER_API_VERSIONS = (
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
)
EVERY_MODE = [
    (
        SCHEDULER_CHART,
        (
            "certs.mode=job",
            "metrics.serviceMonitor.enabled=true",
            "networkPolicy.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.grafanaDashboard.enabled=true",
        ),
    ),
    (SCHEDULER_CHART, ("certs.mode=cert-manager",)),
    (SCHEDULER_CHART, ("certs.mode=provided", "certs.existingSecret=tls")),
    (CHECK_CHART, ()),
]


def manifest(name: str) -> dict:
    return yaml.safe_load((ARGOCD / name).read_text())


PROJECT = manifest("appproject.yaml")
APPSET = manifest("applicationset.yaml")
ROOT = {doc["kind"]: doc for doc in yaml.safe_load_all((ARGOCD / "root.yaml").read_text())}
# One clusters generator per chart: the clusters it goes to (by label) and its parameters.
GENERATORS = [g["clusters"] for g in APPSET["spec"]["generators"]]
SOURCES = APPSET["spec"]["template"]["spec"]["sources"]


def group_kind(doc: dict) -> tuple[str, str]:
    api_version = doc["apiVersion"]
    return (api_version.split("/")[0] if "/" in api_version else "", doc["kind"])


def argocd_runs(doc: dict) -> bool:
    """Argo CD applies every object but `helm test` hooks: it maps only pre/post-install/upgrade
    hooks to its phases, so a hook of type test alone has no phase and never runs."""
    return (doc["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"


def rendered_kinds(render) -> set[tuple[str, str]]:
    return {
        group_kind(doc)
        for chart, sets in EVERY_MODE
        for doc in render(chart, *sets, api_versions=CLUSTER_API_VERSIONS).docs
        if argocd_runs(doc)
    }


@pytest.mark.delivery
def test_project_allows_exactly_the_cluster_scoped_kinds_the_charts_create(render):
    allowed = {(r["group"], r["kind"]) for r in PROJECT["spec"]["clusterResourceWhitelist"]}
    created = {gk for gk in rendered_kinds(render) if gk[1] in CLUSTER_SCOPED}

    # Namespace: created by Argo CD itself (CreateNamespace=true).
    assert allowed == created | {("", "Namespace")}
    for rule in PROJECT["spec"]["clusterResourceWhitelist"]:
        assert rule["name"] == "gpu-scheduler*", rule


@pytest.mark.delivery
def test_project_allows_every_namespaced_kind_of_every_chart_mode(render):
    allowed = {(r["group"], r["kind"]) for r in PROJECT["spec"]["namespaceResourceWhitelist"]}
    namespaced = {gk for gk in rendered_kinds(render) if gk[1] not in CLUSTER_SCOPED}

    assert allowed == namespaced


@pytest.mark.delivery
def test_project_is_limited_to_this_repository_and_our_two_namespaces():
    assert PROJECT["spec"]["sourceRepos"] == [REPO_URL]
    # Any cluster Argo CD knows: which ones is the ApplicationSet's labels' choice.
    assert {(d["server"], d["namespace"]) for d in PROJECT["spec"]["destinations"]} == {
        ("*", SCHEDULER_NAMESPACE),
        ("*", CHECK_NAMESPACE),
    }


@pytest.mark.delivery
def test_applicationset_generates_scheduler_then_check_per_labelled_cluster():
    assert [(g["values"]["chart"], g["values"]["namespace"], g["values"]["stage"]) for g in GENERATORS] == [
        ("gpu-scheduler", SCHEDULER_NAMESPACE, "1"),
        ("gpu-scheduler-check", CHECK_NAMESPACE, "2"),
    ]
    # The scheduler on every cluster labelled for it; the check only where also opted in.
    assert [g["selector"] for g in GENERATORS] == [
        {"matchLabels": {"gpu-scheduler/deploy": "true"}},
        {"matchLabels": {"gpu-scheduler/deploy": "true", "gpu-scheduler/check": "true"}},
    ]
    for generator in GENERATORS:
        assert (REPO / "charts" / generator["values"]["chart"] / "Chart.yaml").is_file(), generator
    template = APPSET["spec"]["template"]
    # One Application per chart and cluster.
    assert template["metadata"]["name"] == "{{ .values.chart }}-{{ .nameNormalized }}"
    assert template["metadata"]["labels"]["stage"] == "{{ .values.stage }}"
    # Deleting the ApplicationSet deletes what both Applications deployed, in reverse order.
    assert template["metadata"]["finalizers"] == ["resources-finalizer.argocd.argoproj.io"]
    assert APPSET["spec"]["strategy"]["deletionOrder"] == "Reverse"
    assert template["spec"]["project"] == PROJECT["metadata"]["name"]
    assert template["spec"]["destination"] == {"server": "{{ .server }}", "namespace": "{{ .values.namespace }}"}


@pytest.mark.delivery
def test_each_chart_takes_its_clusters_values_file_from_the_same_commit():
    charts, values = SOURCES
    assert charts["path"] == "charts/{{ .values.chart }}"
    assert charts["helm"]["releaseName"] == "{{ .values.chart }}"
    assert charts["helm"]["valueFiles"] == ["$values/clusters/{{ .name }}/values-{{ .values.chart }}.yaml"]
    # A cluster with no file of its own takes the chart's values.
    assert charts["helm"]["ignoreMissingValueFiles"] is True
    assert values == {"repoURL": charts["repoURL"], "targetRevision": charts["targetRevision"], "ref": "values"}
    assert charts["repoURL"] == REPO_URL


@pytest.mark.delivery
def test_the_deployed_revision_is_recorded_in_git_the_default_branch_until_a_release_is_pinned():
    """Recreating the ApplicationSet deploys the same thing: the revision is in git, the
    charts at it name their images (nothing is set on the live Applications). HEAD (the
    default branch) works before any tag exists; a pinned release is a tag vX.Y.Z."""
    revision = SOURCES[0]["targetRevision"]
    version = run(["python3", REPO / "scripts" / "version.py"]).stdout.strip()

    match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", revision)
    assert revision == "HEAD" or match, f"revision {revision!r} is neither HEAD nor a release tag vX.Y.Z"
    # A tag that can exist: never ahead of the version this commit declares.
    assert not match or tuple(map(int, match.groups())) <= tuple(map(int, version.split(".")))
    assert not SOURCES[0]["helm"].get("parameters")
    assert "ignoreApplicationDifferences" not in APPSET["spec"]


@pytest.mark.delivery
def test_the_root_application_keeps_argocd_applied_from_the_default_branch():
    project, root = ROOT["AppProject"], ROOT["Application"]
    source = root["spec"]["source"]
    assert (source["repoURL"], source["targetRevision"], source["path"]) == (REPO_URL, "HEAD", "argocd")
    assert root["spec"]["project"] == project["metadata"]["name"]
    assert root["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    # Deleting the root leaves what it applied: removing the gpu-scheduler is deleting the ApplicationSet.
    assert "finalizers" not in root["metadata"]
    # Its project writes Argo CD's own objects in Argo CD's namespace, nothing else.
    assert project["spec"]["sourceRepos"] == [REPO_URL]
    assert project["spec"]["destinations"] == [{"server": "https://kubernetes.default.svc", "namespace": "argocd"}]
    assert {(r["group"], r["kind"]) for r in project["spec"]["namespaceResourceWhitelist"]} == {
        ("argoproj.io", "AppProject"),
        ("argoproj.io", "ApplicationSet"),
        ("argoproj.io", "Application"),
    }
    assert not project["spec"].get("clusterResourceWhitelist")
    assert root["spec"]["destination"] == project["spec"]["destinations"][0]


@pytest.mark.delivery
def test_rolling_sync_steps_follow_the_stage_label_in_order():
    strategy = APPSET["spec"]["strategy"]

    assert strategy["type"] == "RollingSync"
    assert [step["matchExpressions"] for step in strategy["rollingSync"]["steps"]] == [
        [{"key": "stage", "operator": "In", "values": ["1"]}],
        [{"key": "stage", "operator": "In", "values": ["2"]}],
    ]


@pytest.mark.delivery
def test_generated_applications_sync_with_prune_self_heal_and_keep_the_ca_bundle():
    spec = APPSET["spec"]["template"]["spec"]

    assert spec["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    assert {
        "CreateNamespace=true",
        "ServerSideApply=true",
        "RespectIgnoreDifferences=true",
    } <= set(spec["syncPolicy"]["syncOptions"])
    ignored = {(d["group"], d["kind"]): d["jqPathExpressions"] for d in spec["ignoreDifferences"]}
    assert ignored == {
        ("admissionregistration.k8s.io", kind): [".webhooks[]?.clientConfig.caBundle"]
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    }


def kustomize(kubectl, folder) -> dict[tuple[str, str], dict]:
    """`kubectl kustomize FOLDER`: the objects users apply with `kubectl apply -k`, by (kind, name)."""
    built = run([kubectl, "kustomize", folder])
    assert built.returncode == 0, built.stderr
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(built.stdout)}


@pytest.mark.delivery
def test_kustomization_applies_every_file_in_the_argocd_namespace(kubectl):
    objects = kustomize(kubectl, ARGOCD)

    assert set(objects) == {
        ("AppProject", "gpu-scheduler"),
        ("ApplicationSet", "gpu-scheduler"),
        ("AppProject", "gpu-scheduler-gitops"),
        ("Application", "gpu-scheduler-gitops"),
    }
    assert {doc["metadata"]["namespace"] for doc in objects.values()} == {"argocd"}
    assert objects[("ApplicationSet", "gpu-scheduler")]["spec"] == APPSET["spec"]
    assert objects[("Application", "gpu-scheduler-gitops")]["spec"] == ROOT["Application"]["spec"]


@pytest.mark.delivery
def test_one_repository_and_revision_set_once_reach_every_place_that_names_them(kubectl, tmp_path):
    # One value for users: the first source's repoURL (and beside it the
    # revision). A fork that changes only those lines gets projects that allow
    # exactly its repository, a root Application that watches it, and a
    # values source at the same revision as the charts.
    fork = tmp_path / "argocd"
    shutil.copytree(ARGOCD, fork)
    ours = "https://gitlab.example.com/team/gpu-scheduler.git"
    appset = yaml.safe_load((fork / "applicationset.yaml").read_text())
    appset["spec"]["template"]["spec"]["sources"][0].update(repoURL=ours, targetRevision="v0.1.0")
    (fork / "applicationset.yaml").write_text(yaml.safe_dump(appset))

    objects = kustomize(kubectl, fork)

    for project in ("gpu-scheduler", "gpu-scheduler-gitops"):
        assert objects[("AppProject", project)]["spec"]["sourceRepos"] == [ours]
    assert objects[("AppProject", "gpu-scheduler")]["spec"]["destinations"] == PROJECT["spec"]["destinations"]
    assert objects[("Application", "gpu-scheduler-gitops")]["spec"]["source"]["repoURL"] == ours
    # The root follows the default branch whatever release the charts are pinned to.
    assert objects[("Application", "gpu-scheduler-gitops")]["spec"]["source"]["targetRevision"] == "HEAD"
    sources = objects[("ApplicationSet", "gpu-scheduler")]["spec"]["template"]["spec"]["sources"]
    assert [(s["repoURL"], s["targetRevision"]) for s in sources] == [(ours, "v0.1.0"), (ours, "v0.1.0")]


def wait_established(base: list, crd: str, timeout: float = 60) -> None:
    """Until the API server serves the CRD (`kubectl wait` errors before it has conditions)."""
    jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + timeout
    while True:
        status = run([*base, "get", "crd", crd, "-o", f"jsonpath={jsonpath}"])
        if status.stdout.strip() == "True":
            return
        assert time.monotonic() < deadline, f"CRD {crd} not Established after {timeout}s"
        time.sleep(0.5)


def argocd_crds():
    """manifests/crds of the Argo CD release cluster/argocd/go.mod pins (Go's module cache)."""
    go_mod = (ARGOCD_MODULE_DIR / "go.mod").read_text()
    version = re.search(rf"^\s*{re.escape(ARGOCD_MODULE)} (v\S+)", go_mod, re.M)
    assert version, f"{ARGOCD_MODULE} is not required in {ARGOCD_MODULE_DIR / 'go.mod'}"
    download = subprocess.run(
        ["go", "mod", "download", "-json", f"{ARGOCD_MODULE}@{version[1]}"],
        cwd=ARGOCD_MODULE_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert download.returncode == 0, f"go mod download {ARGOCD_MODULE}@{version[1]}: {download.stdout}{download.stderr}"
    crds = json.loads(download.stdout)["Dir"] + "/manifests/crds"
    return crds


@pytest.fixture(scope="module")
def argocd_namespace(kubeconfig, kubectl):
    """The Argo CD CRDs installed and the argocd namespace there; our objects removed after."""
    crds = argocd_crds()
    base = [kubectl, "--kubeconfig", kubeconfig]
    applied = run([*base, "apply", "--server-side", "-k", crds])
    assert applied.returncode == 0, applied.stderr
    for crd in ("applications", "applicationsets", "appprojects"):
        wait_established(base, f"{crd}.argoproj.io")
    # The manifests name their namespace (argocd), as users apply them.
    existed = run([*base, "get", "namespace", "argocd"]).returncode == 0
    if not existed:
        created = run([*base, "create", "namespace", "argocd"])
        assert created.returncode == 0, created.stderr
    yield "argocd"
    run([*base, "delete", "--ignore-not-found", "--wait=false", "-k", ARGOCD])
    if not existed:
        run([*base, "delete", "namespace", "argocd", "--wait=false"])


@pytest.mark.cluster
def test_api_server_accepts_the_argocd_manifests_against_the_real_crds(kubeconfig, kubectl, argocd_namespace):
    base = [kubectl, "--kubeconfig", kubeconfig, "--namespace", argocd_namespace]

    # Strict field validation: an unknown or misplaced field is an error, not a warning.
    result = run([*base, "apply", "--server-side", "--validate=strict", "-k", ARGOCD])

    assert result.returncode == 0, result.stdout + result.stderr
    stored = run([*base, "get", "applicationset", "gpu-scheduler", "-o", "yaml"])
    appset = yaml.safe_load(stored.stdout)
    assert appset["spec"]["strategy"] == APPSET["spec"]["strategy"]
    assert (
        appset["spec"]["template"]["spec"]["ignoreDifferences"]
        == (APPSET["spec"]["template"]["spec"]["ignoreDifferences"])
    )
    project = yaml.safe_load(run([*base, "get", "appproject", "gpu-scheduler", "-o", "yaml"]).stdout)
    assert project["spec"]["clusterResourceWhitelist"] == PROJECT["spec"]["clusterResourceWhitelist"]


@pytest.mark.cluster
def test_api_server_rejects_a_misspelt_field_in_an_applicationset(kubeconfig, kubectl, argocd_namespace, tmp_path):
    # The check above can fail: the CRD schema is strict about field names.
    broken = yaml.safe_load((ARGOCD / "applicationset.yaml").read_text())
    broken["spec"]["strategy"]["rollingSynk"] = broken["spec"]["strategy"].pop("rollingSync")
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))

    result = run(
        [
            kubectl,
            "--kubeconfig",
            kubeconfig,
            "--namespace",
            argocd_namespace,
            "apply",
            "--server-side",
            "--validate=strict",
            "--dry-run=server",
            "-f",
            path,
        ]
    )

    assert result.returncode != 0
    assert "rollingSynk" in result.stderr

"""argocd/: the AppProject and the ApplicationSet that deploy both released charts in order on the
clusters labelled for them, each at the version and with the values its cluster Secret names, and
the root Application that keeps the ApplicationSet applied from git (the AppProject only by opt-in).

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
# The opt-in that keeps the AppProject gpu-scheduler applied from git.
PROJECTS_FROM_GIT = {doc["kind"]: doc for doc in yaml.safe_load_all((ARGOCD / "appprojects-from-git.yaml").read_text())}
# What each cluster Secret tells the ApplicationSet: required, then optional.
REQUIRED_ANNOTATIONS = ("gpu-scheduler/chart-registry", "gpu-scheduler/chart-version", "gpu-scheduler/values-repo")
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
def test_project_takes_any_source_and_is_limited_to_our_two_namespaces():
    # The sources are each cluster Secret's (its annotations): no list here could name them.
    assert PROJECT["spec"]["sourceRepos"] == ["*"]
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


def annotation_read(template: str, key: str) -> bool:
    """Whether a field's template reads annotation `key` of the cluster Secret (tolerating a Secret
    without annotations: missingkey=error refuses .metadata.annotations then)."""
    return f'index (index .metadata "annotations" | default dict) "{key}"' in template


def refuses_without(template: str, key: str) -> bool:
    """Whether the template fails, naming the cluster and `key`, when the annotation is missing."""
    return (
        annotation_read(template, key)
        and "{{- if not $v }}{{ fail (printf" in template
        and f'.name "{key}") }}}}{{{{ end }}}}' in template
    )


@pytest.mark.delivery
def test_each_chart_comes_from_the_registry_and_version_its_cluster_secret_names():
    charts, _ = SOURCES
    # Argo CD's Helm OCI source: a repoURL without scheme, and the chart's name.
    assert charts["chart"] == "{{ .values.chart }}"
    assert "path" not in charts
    assert refuses_without(charts["repoURL"], "gpu-scheduler/chart-registry")
    assert charts["repoURL"].endswith('{{- $v | trimPrefix "oci://" | trimSuffix "/" }}')
    assert refuses_without(charts["targetRevision"], "gpu-scheduler/chart-version")
    assert charts["targetRevision"].endswith('{{- $v | trimPrefix "v" }}')
    assert charts["helm"]["releaseName"] == "{{ .values.chart }}"
    assert not charts["helm"].get("parameters")
    assert "ignoreApplicationDifferences" not in APPSET["spec"]


@pytest.mark.delivery
def test_each_chart_takes_its_clusters_values_file_from_the_platforms_repository():
    charts, values = SOURCES
    (value_file,) = charts["helm"]["valueFiles"]
    assert value_file.startswith("$values/{{ ")
    assert annotation_read(value_file, "gpu-scheduler/values-path")
    assert value_file.endswith(' | default "clusters" }} {{- "/" }}{{ .name }}/values-{{ .values.chart }}.yaml')
    # A cluster with no file of its own takes the chart's values.
    assert charts["helm"]["ignoreMissingValueFiles"] is True
    assert set(values) == {"repoURL", "targetRevision", "ref"}
    assert values["ref"] == "values"
    assert refuses_without(values["repoURL"], "gpu-scheduler/values-repo")
    assert annotation_read(values["targetRevision"], "gpu-scheduler/values-revision")
    assert values["targetRevision"].endswith(' | default "HEAD" }}')


@pytest.mark.delivery
def test_nothing_a_user_sets_is_written_in_argocd():
    """No repository, registry or version in the ApplicationSet: every source's fields are read
    from the cluster Secret, so nobody edits (or forks) argocd/ to deploy."""
    spec = json.dumps(APPSET["spec"])
    assert "://" not in spec.replace('\\"oci://\\"', ""), "a URL is written in the ApplicationSet"
    for field in (SOURCES[0]["repoURL"], SOURCES[0]["targetRevision"], SOURCES[1]["repoURL"]):
        assert field.startswith("{{ $v := index") and field.endswith(" }}"), field
    assert [key for key in REQUIRED_ANNOTATIONS if key in spec] == list(REQUIRED_ANNOTATIONS)


@pytest.mark.delivery
def test_the_root_application_keeps_only_the_applicationset_applied_from_the_default_branch():
    project, root = ROOT["AppProject"], ROOT["Application"]
    source = root["spec"]["source"]
    assert (source["repoURL"], source["targetRevision"], source["path"]) == (REPO_URL, "HEAD", "argocd")
    # The one file, not kustomization.yaml: never itself, its project or the AppProject.
    assert source["directory"] == {"include": "applicationset.yaml"}
    assert root["spec"]["project"] == project["metadata"]["name"]
    assert root["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    # Deleting the root leaves what it applied: removing the gpu-scheduler is deleting the ApplicationSet.
    assert "finalizers" not in root["metadata"]
    # Its project writes ApplicationSets in Argo CD's namespace, nothing else.
    assert project["spec"]["sourceRepos"] == [REPO_URL]
    assert project["spec"]["destinations"] == [{"server": "https://kubernetes.default.svc", "namespace": "argocd"}]
    assert project["spec"]["namespaceResourceWhitelist"] == [{"group": "argoproj.io", "kind": "ApplicationSet"}]
    assert not project["spec"].get("clusterResourceWhitelist")
    assert root["spec"]["destination"] == project["spec"]["destinations"][0]


@pytest.mark.delivery
def test_appprojects_from_git_is_an_opt_in_of_its_own_that_applies_the_appproject_only():
    project, app = PROJECTS_FROM_GIT["AppProject"], PROJECTS_FROM_GIT["Application"]
    source = app["spec"]["source"]
    assert (source["repoURL"], source["targetRevision"], source["path"]) == (REPO_URL, "HEAD", "argocd")
    assert source["directory"] == {"include": "appproject.yaml"}
    assert app["spec"]["project"] == project["metadata"]["name"] != ROOT["AppProject"]["metadata"]["name"]
    assert project["spec"]["namespaceResourceWhitelist"] == [{"group": "argoproj.io", "kind": "AppProject"}]
    assert project["spec"]["sourceRepos"] == [REPO_URL]
    assert project["spec"]["destinations"] == ROOT["AppProject"]["spec"]["destinations"]
    assert not project["spec"].get("clusterResourceWhitelist")
    assert "finalizers" not in app["metadata"]
    # Not applied by `kubectl apply -k argocd/`: an opt-in is a command of its own.
    assert "appprojects-from-git.yaml" not in yaml.safe_load((ARGOCD / "kustomization.yaml").read_text())["resources"]


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
def test_the_project_url_is_the_same_everywhere_argocd_names_it():
    """The project's own URL (root.yaml's source), which its maintainers set once: the same in
    every file of argocd/ that names a git repository."""
    named = set()
    for path in sorted(ARGOCD.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            named.update(doc["spec"].get("sourceRepos", []))
            named.update([doc["spec"]["source"]["repoURL"]] if "source" in doc["spec"] else [])
    assert named - {"*"} == {REPO_URL}


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


def argocd_crds(version: str | None = None) -> str:
    """manifests/crds of an Argo CD release (Go's module cache): by default the one
    cluster/argocd/go.mod pins."""
    if version is None:
        go_mod = (ARGOCD_MODULE_DIR / "go.mod").read_text()
        pinned = re.search(rf"^\s*{re.escape(ARGOCD_MODULE)} (v\S+)", go_mod, re.M)
        assert pinned, f"{ARGOCD_MODULE} is not required in {ARGOCD_MODULE_DIR / 'go.mod'}"
        version = pinned[1]
    download = subprocess.run(
        ["go", "mod", "download", "-json", f"{ARGOCD_MODULE}@{version}"],
        cwd=ARGOCD_MODULE_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert download.returncode == 0, f"go mod download {ARGOCD_MODULE}@{version}: {download.stdout}{download.stderr}"
    return json.loads(download.stdout)["Dir"] + "/manifests/crds"


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
    stored = run([*base, "get", "applicationsets.argoproj.io", "gpu-scheduler", "-o", "yaml"])
    appset = yaml.safe_load(stored.stdout)
    assert appset["spec"]["strategy"] == APPSET["spec"]["strategy"]
    assert (
        appset["spec"]["template"]["spec"]["ignoreDifferences"]
        == (APPSET["spec"]["template"]["spec"]["ignoreDifferences"])
    )
    project = yaml.safe_load(run([*base, "get", "appprojects.argoproj.io", "gpu-scheduler", "-o", "yaml"]).stdout)
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


# The newest Argo CD whose AppProject CRD has no `name` in clusterResourceWhitelist items (read
# from the releases' manifests/crds: v3.0.0 to v3.2.0 lack it, v3.3.0 has it). Such an Argo CD
# would allow every object of a listed kind, where the project means only gpu-scheduler*'s.
ARGOCD_WITHOUT_NAMES = "v3.2.0"


@pytest.mark.cluster
def test_an_argocd_too_old_for_the_projects_names_refuses_the_project_at_apply(kubeconfig, kubectl, tmp_path):
    """`kubectl apply -k argocd/` against that Argo CD's CRD: refused (strict field validation,
    kubectl's default, and server-side apply alike), never stored without the names. The CRD is
    installed under a group of this test's own, so the real one of other tests is not touched."""
    group = "argocd-v3-2.gpu-scheduler.test"
    crd = yaml.safe_load(open(f"{argocd_crds(ARGOCD_WITHOUT_NAMES)}/appproject-crd.yaml").read())
    items = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert "name" not in items["clusterResourceWhitelist"]["items"]["properties"]
    # Names of its own too: with the kind's own names and short names, kubectl would resolve
    # `kubectl get appproject` of other tests to this group.
    crd["spec"]["group"] = group
    crd["spec"]["names"] = {"kind": "OldAppProject", "listKind": "OldAppProjectList", "plural": "oldappprojects"}
    crd["spec"]["names"]["singular"] = "oldappproject"
    crd["metadata"]["name"] = f"oldappprojects.{group}"
    # In namespace default, which every cluster has: nothing is stored (a server-side dry run).
    metadata = {**PROJECT["metadata"], "namespace": "default"}
    project = {**PROJECT, "apiVersion": f"{group}/v1alpha1", "kind": "OldAppProject", "metadata": metadata}
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd))
    (tmp_path / "project.yaml").write_text(yaml.safe_dump(project))
    base = [kubectl, "--kubeconfig", kubeconfig]
    created = run([*base, "apply", "--server-side", "-f", tmp_path / "crd.yaml"])
    assert created.returncode == 0, created.stderr
    try:
        wait_established(base, crd["metadata"]["name"])
        for how in ([], ["--server-side"]):
            refused = run([*base, "apply", *how, "--dry-run=server", "-f", tmp_path / "project.yaml"])
            assert refused.returncode != 0, f"apply {how}: accepted: {refused.stdout}"
            assert "clusterResourceWhitelist[0].name" in refused.stderr, refused.stderr
    finally:
        run([*base, "delete", "--ignore-not-found", "-f", tmp_path / "crd.yaml"])

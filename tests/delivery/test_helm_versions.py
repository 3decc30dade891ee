"""The charts under the helm every test uses (Helm 4, .cache/bin/helm) and under Helm 3's
last line (.cache/bin/helm3), which users may still run until Helm 3's security fixes end
(February 2027).

Helm 4 is checked everywhere else; here only what differs between the two, and what a plain
`helm template` without a cluster does: it must render something correct or refuse, saying why.
"""

from __future__ import annotations

import pytest
import yaml
from commands import run
from e2e.charts import KUBE_VERSION_ARGS
from prerequisites import missing

from .conftest import BIN, CHECK_CHART, REGISTRY_SET, SCHEDULER_CHART, _fetch

pytestmark = pytest.mark.delivery

HELM3 = BIN / "helm3"
CHARTS = (SCHEDULER_CHART, CHECK_CHART)
# What a cluster of 1.36+ serves and a Helm render without one does not know by kind.
MUTATING_POLICY_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


@pytest.fixture(scope="module")
def helm3(helm):
    # `make tools` fetches it where it can; where not, it said so and these checks cannot run.
    if not HELM3.exists():
        _fetch_quietly()
    if not HELM3.exists():
        missing(f"{HELM3} is missing: `make tools` could not fetch helm 3 (its log says why)")
    version = run([HELM3, "version", "--template", "{{.Version}}"]).stdout
    assert version.startswith("v3."), f"{HELM3} is {version}, not Helm 3"
    return HELM3


def _fetch_quietly() -> None:
    try:
        _fetch("fetch-tools.sh", [HELM3])
    except pytest.fail.Exception:
        pass


def documents(stdout: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(stdout) if doc]


def test_the_projects_helm_is_helm_4(helm):
    version = run([helm, "version", "--template", "{{.Version}}"]).stdout
    assert version.startswith("v4."), f"{helm} is {version}: make tools should put Helm 4 there"


@pytest.mark.parametrize("chart", CHARTS, ids=lambda chart: chart.name)
def test_helm3_lints_the_charts_strictly(helm3, chart):
    result = run([helm3, "lint", "--strict", chart, "--set", REGISTRY_SET])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("api_versions", [(), (MUTATING_POLICY_API,)], ids=["1.35", "1.36+"])
@pytest.mark.parametrize("chart", CHARTS, ids=lambda chart: chart.name)
def test_helm3_and_helm4_render_the_same_objects(helm, helm3, chart, api_versions):
    # Helm 3 renders for Kubernetes 1.34 without a cluster (refused by kubeVersion), so both
    # are told the Kubernetes the tests run.
    argv = ["template", chart.name, chart, *KUBE_VERSION_ARGS, "--set", REGISTRY_SET]
    for api_version in api_versions:
        argv += ["--api-versions", api_version]
    rendered = {}
    for name, binary in (("helm 4", helm), ("helm 3", helm3)):
        result = run([binary, *argv])
        assert result.returncode == 0, f"{name}: {result.stderr}"
        rendered[name] = documents(result.stdout)
    # The same objects; not in the same order: Helm sorts a release's objects by kind, and
    # Helm 4 puts the webhook configurations before the admission policies, Helm 3 after
    # (seen with 4.3.1 and 3.19.0). The chart orders nothing by it (Argo CD: sync waves).
    by_identity = lambda docs: sorted(docs, key=lambda doc: (doc["kind"], doc["metadata"]["name"]))  # noqa: E731
    assert by_identity(rendered["helm 4"]) == by_identity(rendered["helm 3"])


def test_helm4_template_without_a_cluster_renders_bind_mode_through_the_webhook(helm):
    # No --kube-version: Helm 4.1+ renders for its own client's Kubernetes (4.3: 1.37), which the
    # charts accept. No cluster: .Capabilities.APIVersions lists group/versions only, never a
    # kind, so MutatingAdmissionPolicy is not known to be served and bind mode (the default)
    # gives pods lacking the entry through the webhook, which works on every Kubernetes the
    # chart accepts (1.35+).
    result = run([helm, "template", "gpu-scheduler", SCHEDULER_CHART, "--set", REGISTRY_SET])
    assert result.returncode == 0, result.stderr
    docs = documents(result.stdout)
    kinds = {doc["kind"] for doc in docs}
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    assert "MutatingAdmissionPolicy" not in kinds
    (mutating,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    (needs,) = [c for c in mutating["webhooks"][0]["matchConditions"] if c["name"] == "needs-the-webhook"]
    # A pod with a map and a container lacking the entry goes to the webhook.
    assert "'gpu-scheduling-map' in object.metadata.annotations" in needs["expression"]


def test_helm3_template_without_kube_version_refuses_clearly(helm3):
    # What a Helm 3 user sees without --kube-version: the chart's kubeVersion, named.
    result = run([helm3, "template", "gpu-scheduler", SCHEDULER_CHART, "--set", REGISTRY_SET])
    assert result.returncode != 0
    assert "requires kubeVersion: >=1.35.0-0" in result.stderr

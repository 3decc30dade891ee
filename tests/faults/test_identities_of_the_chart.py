"""The scheduler and the certificate Job under exactly the identities and RBAC the chart installs.

The chart's ServiceAccounts, (Cluster)Roles and (Cluster)RoleBindings are rendered with
`helm template` and applied into a release namespace of their own. The real
`gpu-scheduler scheduler` then runs with the chart's container arguments and a token of the
chart's scheduler ServiceAccount: it must do its whole job (list and watch pods and nodes,
bind, write Events, hold its Lease) and nothing else: every action outside its job is refused
by `kubectl auth can-i --as=...` and, attempted for real with the token, answered 403. That the
scheduler itself attempted nothing it may not do is read from the API server's audit log
(audit.py: cluster/local/audit-policy.yaml logs every ServiceAccount's requests with their
answers), not from its own log: no request of its account answered 401 or 403, and among them
those of its whole job, each answered with success. IDENTITIES_BROKEN=1 runs that test against a
scheduler that also lists Secrets and keeps quiet about the 403 (identity_hooks/): it must fail.

tests/delivery/test_helm_install.py already runs the certificate Jobs' commands with their
token and checks with `can-i` what that account may not do; here the same account's
forbidden actions are attempted for real. The webhook's account may only read nodes
(webhook.readNodes): its real NodeReader reads a node's alias and its watch of the nodes
that publish GPUs lists with the account's token, and everything else is refused; with
readNodes=false it has no RBAC and no token at all (tests/delivery/test_helm_template.py).
Read-only root file systems and non-root users are the chart's golden tests
(tests/delivery/test_pod_security.py).
"""

from __future__ import annotations

import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from commands import run
from e2e.charts import KUBECTL, SCHEDULER_CHART, helm_template
from e2e.cluster import (
    container_env,
    delete_cluster_rbac,
    get_pod,
    kubectl_apply,
    pod_events,
    service_account_kubeconfig,
)
from e2e.components import GPU_SCHEDULER
from e2e.isolation import delete_namespace
from e2e.processes import ManagedProcess, free_port
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .bursts import expected_node
from .conftest import track, untrack

pytestmark = pytest.mark.faults

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
HOOKS = Path(__file__).parent / "identity_hooks"
# Set to run the scheduler's test against a build that quietly reads Secrets: it must fail.
BROKEN = os.environ.get("IDENTITIES_BROKEN") == "1"
# The requests of the scheduler's whole job, (verb, resource) as the audit log names them.
SCHEDULER_JOB = {
    ("list", "pods"),
    ("watch", "pods"),
    ("list", "nodes"),
    ("watch", "nodes"),
    ("create", "pods/binding"),
    ("patch", "pods/status"),
    ("create", "events"),
}


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    scheduler_name: str
    documents: tuple[dict, ...]

    def one(self, kind: str, name: str) -> dict:
        (found,) = [d for d in self.documents if d["kind"] == kind and d["metadata"]["name"] == name]
        return found

    def account(self, component: str) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}-{component}"


@pytest.fixture(scope="module")
def release(kubeconfig, api_client):
    suffix = uuid.uuid4().hex[:6]
    name, namespace = f"gpu-scheduler-faults-{suffix}", f"gs-faults-{suffix}"
    scheduler_name = f"faults-rbac-{suffix}"
    # The commands run on this host: the image (any registry) is never pulled.
    documents = tuple(helm_template(name, SCHEDULER_CHART, namespace, "--set", f"schedulerName={scheduler_name}"))
    # Not the `helm test` hook's: it lives in the probe's namespace and is tested on its own
    # (tests/delivery/test_release_cluster.py).
    rbac = [
        d
        for d in documents
        if d["kind"] in RBAC_KINDS and (d["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"
    ]
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": namespace}})
    kubectl_apply(KUBECTL, kubeconfig, rbac, namespace)
    yield Release(name, namespace, scheduler_name, documents)
    delete_cluster_rbac(api_client, rbac)
    delete_namespace(api_client, namespace)


def token_kubeconfig(admin_kubeconfig: str, release: Release, component: str, path: Path) -> Path:
    """A kubeconfig that authenticates with a fresh token of the chart's ServiceAccount, as its pod would."""
    return service_account_kubeconfig(KUBECTL, admin_kubeconfig, release.namespace, f"{release.name}-{component}", path)


def container_args(workload: dict) -> list[str]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


@pytest.fixture(scope="module")
def chart_scheduler(kubeconfig, release, tmp_path_factory):
    """`gpu-scheduler scheduler` with the chart Deployment's arguments, as its ServiceAccount.

    Only what a pod gets from its environment differs: $(POD_NAMESPACE) is the release
    namespace, and /metrics listens on a free port of 127.0.0.1 instead of 10251."""
    directory = tmp_path_factory.mktemp("chart-scheduler")
    identity = token_kubeconfig(kubeconfig, release, "scheduler", directory / "kubeconfig")
    port = free_port()
    args = [
        a.replace("$(POD_NAMESPACE)", release.namespace) if "$(POD_NAMESPACE)" in a else a
        for a in container_args(release.one("Deployment", f"{release.name}-scheduler"))
    ]
    args = [f"--metrics-port={port}" if a.startswith("--metrics-port=") else a for a in args]
    env = {**os.environ, "KUBECONFIG": str(identity), "POD_NAMESPACE": release.namespace}
    if BROKEN:
        env["PYTHONPATH"] = str(HOOKS)
    process = track(
        ManagedProcess(
            "chart-scheduler",
            [str(GPU_SCHEDULER), *args, "--bind-address=127.0.0.1"],
            directory / "scheduler.log",
            env=env,
        )
    )
    process.start()
    try:
        process.wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout=60)
        yield process
    finally:
        process.stop()
        untrack(process)


def test_the_scheduler_does_its_whole_job_with_only_the_charts_rbac(
    api_client, release, chart_scheduler, ns, audit_log
):
    coordination = client.CoordinationV1Api(api_client)

    def leads():
        try:
            lease = coordination.read_namespaced_lease(release.name, release.namespace)
        except ApiException as err:
            raise NotYet(f"no Lease {release.namespace}/{release.name} yet ({err.status})") from None
        if not lease.spec.holder_identity:
            raise NotYet("the Lease has no holder")
        return lease

    # Its identity, as the API server stores it: in the User-Agent of each of its requests.
    holder = wait_for("the scheduler to hold its Lease", leads, 30).spec.holder_identity
    scheduling_map = "".join(f"{i}={expected_node(i)}:{i % 4}\n" for i in range(4))
    # With the README's entry: no webhook serves this release's scheduler name here.
    for i in range(4):
        client.CoreV1Api(api_client).create_namespaced_pod(
            ns, bare_pod(f"rbac-{i}", scheduling_map, scheduler_name=release.scheduler_name, bind_entries=True)
        )
    client.CoreV1Api(api_client).create_namespaced_pod(
        ns, bare_pod("rbac-waits-4", "4=no-such-node:0\n", scheduler_name=release.scheduler_name, bind_entries=True)
    )

    bound = wait_for(
        "the four placeable pods to be bound",
        lambda: _bound(api_client, ns, [f"rbac-{i}" for i in range(4)]),
        30,
    )
    assert bound == {f"rbac-{i}": expected_node(i) for i in range(4)}
    # Its bindings wrote the devices each container sees.
    seen = {f"rbac-{i}": container_env(get_pod(api_client, ns, f"rbac-{i}")) for i in range(4)}
    assert seen == {f"rbac-{i}": {"main": str(i % 4)} for i in range(4)}

    def events_of(name: str, reason: str) -> list[dict]:
        found = [e for e in pod_events(api_client, ns, name) if e["reason"] == reason]
        if not found:
            raise NotYet(f"no {reason} event about {name}")
        return found

    scheduled = wait_for("Scheduled events", lambda: [events_of(f"rbac-{i}", "Scheduled") for i in range(4)], 20)
    assert all(len(found) == 1 for found in scheduled)
    failed = wait_for("a FailedScheduling event", lambda: events_of("rbac-waits-4", "FailedScheduling"), 20)
    assert "no-such-node" in failed[0]["message"]

    def condition() -> dict:
        pod = client.CoreV1Api(api_client).read_namespaced_pod_status("rbac-waits-4", ns)
        found = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        if found is None or found.reason != "Unschedulable":
            raise NotYet(f"PodScheduled is {found}")
        return found

    # Written through pods/status, the one write to pods the chart allows besides bindings.
    assert "no-such-node" in wait_for("the PodScheduled=False condition", condition, 20).message
    # Stopped, so that its watches end and are logged with their answers, and its log is whole.
    assert chart_scheduler.stop() == 0, chart_scheduler.log_tail()
    # The account's requests sent by this process: the other tests try forbidden things with the
    # same account's token on purpose, under another User-Agent.
    answers = [a for a in audit_log.answers_to(release.account("scheduler")) if a.identity == holder]
    assert answers, f"no request of {release.account('scheduler')} with identity {holder} in the audit log"
    refused = [str(a) for a in answers if a.code in (401, 403)]
    assert refused == [], f"the API server refused {len(refused)} requests of the scheduler: {refused[:10]}"
    succeeded = {(a.verb, a.resource) for a in answers if 200 <= a.code < 300}
    assert SCHEDULER_JOB - succeeded == set(), f"not in the audit log with success: {SCHEDULER_JOB - succeeded}"
    assert {("create", "leases"), ("update", "leases")} & succeeded, "no write of its Lease succeeded"
    assert "PRIVATE KEY" not in chart_scheduler.log_path.read_text(errors="replace")


def _bound(api_client, namespace: str, names: list[str]) -> dict[str, str]:
    core = client.CoreV1Api(api_client)
    nodes = {name: core.read_namespaced_pod(name, namespace).spec.node_name for name in names}
    if not all(nodes.values()):
        raise NotYet(f"unbound: {[n for n, node in nodes.items() if not node]}")
    return nodes


# What an identity must never do: (description, `kubectl auth can-i` verb and resource, namespace
# or None for cluster scope ("{release}" is the release namespace, "{ns}" the test's), and the
# real attempt). Destructive attempts name objects that do not exist: a wrongly allowed one
# answers 404 instead of 403, and nothing is harmed.
NOBODY = "faults-does-not-exist"


def scheduler_forbidden(release: Release, ns: str):
    def event(api):
        body = {"metadata": {"name": NOBODY}, "involvedObject": {"kind": "Pod", "name": NOBODY, "namespace": ns}}
        return client.CoreV1Api(api).create_namespaced_event(ns, body)

    return [
        ("delete a pod", "delete", "pods", ns, lambda api: client.CoreV1Api(api).delete_namespaced_pod(NOBODY, ns)),
        ("get a pod", "get", "pods", ns, lambda api: client.CoreV1Api(api).read_namespaced_pod(NOBODY, ns)),
        (
            "create a pod",
            "create",
            "pods",
            ns,
            lambda api: client.CoreV1Api(api).create_namespaced_pod(ns, bare_pod("forbidden-0", "0=node1:0\n")),
        ),
        (
            "patch a pod",
            "patch",
            "pods",
            ns,
            lambda api: client.CoreV1Api(api).patch_namespaced_pod(NOBODY, ns, {"metadata": {"labels": {"x": "y"}}}),
        ),
        (
            "read a Secret of its own namespace",
            "get",
            "secrets",
            release.namespace,
            lambda api: client.CoreV1Api(api).read_namespaced_secret(NOBODY, release.namespace),
        ),
        (
            "list Secrets in kube-system",
            "list",
            "secrets",
            "kube-system",
            lambda api: client.CoreV1Api(api).list_namespaced_secret("kube-system"),
        ),
        (
            "patch a node",
            "patch",
            "nodes",
            None,
            lambda api: client.CoreV1Api(api).patch_node(NOBODY, {"metadata": {"labels": {"x": "y"}}}),
        ),
        ("delete a node", "delete", "nodes", None, lambda api: client.CoreV1Api(api).delete_node(NOBODY)),
        (
            "update a webhook configuration",
            "update",
            "mutatingwebhookconfigurations",
            None,
            lambda api: client.AdmissionregistrationV1Api(api).patch_mutating_webhook_configuration(
                NOBODY, {"metadata": {"labels": {"x": "y"}}}
            ),
        ),
        ("write a core/v1 Event", "create", "events", ns, event),
        (
            "update another Lease",
            "update",
            "leases.coordination.k8s.io",
            release.namespace,
            lambda api: client.CoordinationV1Api(api).patch_namespaced_lease(
                NOBODY, release.namespace, {"metadata": {"labels": {"x": "y"}}}
            ),
        ),
        (
            "create a Lease in kube-system",
            "create",
            "leases.coordination.k8s.io",
            "kube-system",
            lambda api: client.CoordinationV1Api(api).create_namespaced_lease(
                "kube-system", {"metadata": {"name": NOBODY}, "spec": {}}
            ),
        ),
        (
            "bind itself to cluster-admin",
            "create",
            "clusterrolebindings",
            None,
            lambda api: client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
                {
                    "metadata": {"name": NOBODY},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": f"{release.name}-scheduler", "namespace": release.namespace}
                    ],
                }
            ),
        ),
    ]


def certs_job_forbidden(release: Release, ns: str):
    return [
        (
            "list Secrets",
            "list",
            "secrets",
            release.namespace,
            lambda api: client.CoreV1Api(api).list_namespaced_secret(release.namespace),
        ),
        (
            "read another Secret",
            "get",
            "secrets",
            release.namespace,
            lambda api: client.CoreV1Api(api).read_namespaced_secret(NOBODY, release.namespace),
        ),
        (
            "update another Secret",
            "update",
            "secrets",
            release.namespace,
            lambda api: client.CoreV1Api(api).patch_namespaced_secret(
                NOBODY, release.namespace, {"metadata": {"labels": {"x": "y"}}}
            ),
        ),
        (
            "list Secrets in kube-system",
            "list",
            "secrets",
            "kube-system",
            lambda api: client.CoreV1Api(api).list_namespaced_secret("kube-system"),
        ),
        (
            "create a pod",
            "create",
            "pods",
            ns,
            lambda api: client.CoreV1Api(api).create_namespaced_pod(ns, bare_pod("forbidden-0", "0=node1:0\n")),
        ),
        (
            "update another webhook configuration",
            "update",
            "mutatingwebhookconfigurations",
            None,
            lambda api: client.AdmissionregistrationV1Api(api).patch_mutating_webhook_configuration(
                NOBODY, {"metadata": {"labels": {"x": "y"}}}
            ),
        ),
        (
            "delete a webhook configuration",
            "delete",
            "validatingwebhookconfigurations",
            None,
            lambda api: client.AdmissionregistrationV1Api(api).delete_validating_webhook_configuration(NOBODY),
        ),
    ]


def can_i(kubeconfig: str, account: str, verb: str, resource: str, namespace: str | None) -> str:
    scope = ["-n", namespace] if namespace else []
    answer = run([KUBECTL, "--kubeconfig", kubeconfig, "auth", "can-i", verb, resource, *scope, f"--as={account}"])
    return answer.stdout.strip()


def refusals(kubeconfig: str, identity: Path, account: str, forbidden) -> dict[str, str]:
    """description -> what went wrong; empty when can-i says no and the real attempt got 403."""
    api = config.new_client_from_config(config_file=str(identity))
    problems = {}
    try:
        for description, verb, resource, namespace, attempt in forbidden:
            answer = can_i(kubeconfig, account, verb, resource, namespace)
            if answer != "no":
                problems[description] = f"kubectl auth can-i {verb} {resource} says {answer!r}"
                continue
            try:
                attempt(api)
                problems[description] = "the real attempt succeeded"
            except ApiException as err:
                if err.status != 403:
                    problems[description] = f"the real attempt answered {err.status}, not 403"
    finally:
        api.close()
    return problems


def test_the_scheduler_account_is_refused_everything_outside_its_job(kubeconfig, release, ns, tmp_path):
    identity = token_kubeconfig(kubeconfig, release, "scheduler", tmp_path / "kubeconfig")
    forbidden = scheduler_forbidden(release, ns)

    problems = refusals(kubeconfig, identity, release.account("scheduler"), forbidden)

    assert problems == {}
    print(f"\nrefused (can-i no, and 403 for real): {', '.join(d for d, *_ in forbidden)}")


def test_the_certificate_job_account_is_refused_for_real_beyond_its_secret_and_webhooks(
    kubeconfig, release, ns, tmp_path
):
    identity = token_kubeconfig(kubeconfig, release, "certs", tmp_path / "kubeconfig")
    forbidden = certs_job_forbidden(release, ns)

    problems = refusals(kubeconfig, identity, release.account("certs"), forbidden)

    assert problems == {}


def test_private_keys_are_owner_only_and_never_printed(kubeconfig, release, certs, api_client, tmp_path):
    # The files `gpu-scheduler certs --out-dir` wrote for this suite's webhook.
    assert stat.S_IMODE(certs.key_file.stat().st_mode) == 0o600
    # The certificate Job's own command, as its account: it writes the key into the Secret
    # and must not print it anywhere.
    identity = token_kubeconfig(kubeconfig, release, "certs", tmp_path / "kubeconfig")
    job = release.one("Job", f"{release.name}-certs-create")
    created = run([GPU_SCHEDULER, *container_args(job)], env={**os.environ, "KUBECONFIG": str(identity)})

    assert created.returncode == 0, created.stderr
    assert "PRIVATE KEY" not in created.stdout + created.stderr
    secret = client.CoreV1Api(api_client).read_namespaced_secret(f"{release.name}-webhook-tls", release.namespace)
    assert set(secret.data) == {"tls.crt", "tls.key", "ca.crt"}


def test_the_webhook_account_reads_nodes_and_nothing_else(kubeconfig, release, api_client, tmp_path):
    """The webhook's NodeReader and its watch of the nodes that publish GPUs (webhook.readNodes,
    the chart's default) with a token of the chart's webhook ServiceAccount: a node and its
    alias label are read, a missing node is None, the watch lists and stays current, and
    writing a node or reading anything else is refused."""
    from gpu_scheduler.kube.client import ApiError, KubeClient, load_configuration
    from gpu_scheduler.webhook.gpu_nodes import PublishedGpus
    from gpu_scheduler.webhook.nodes import NodeFacts, NodeReader

    identity = token_kubeconfig(kubeconfig, release, "webhook", tmp_path / "kubeconfig")
    kube = KubeClient(load_configuration(str(identity)), pool_size=2)
    reader = NodeReader(kube, "gpu-node-name")
    name = client.CoreV1Api(api_client).list_node().items[0].metadata.name
    labels = client.CoreV1Api(api_client).read_node(name).metadata.labels or {}
    assert reader.node(name) == NodeFacts(name, labels.get("gpu-node-name"))
    assert reader.node(f"no-such-node-{uuid.uuid4().hex[:6]}") is None
    published = PublishedGpus(kube)
    published.start()
    try:

        def listed() -> None:
            if not published.current():
                raise NotYet(published.informer.current() or "not listed yet")

        wait_for("the webhook's watch of the nodes that publish GPUs to list", listed, timeout=30)
    finally:
        published.informer.stop()
    for path in (f"/api/v1/namespaces/{release.namespace}/pods", "/api/v1/namespaces", "/api/v1/secrets"):
        with pytest.raises(ApiError) as refused:
            kube.call("GET", path)
        assert refused.value.status == 403, path
    with pytest.raises(ApiError) as refused:
        kube.call(
            "PATCH",
            f"/api/v1/nodes/{name}",
            body={"metadata": {"labels": {"gpu-scheduler-test": "written"}}},
            content_type="application/merge-patch+json",
        )
    assert refused.value.status == 403

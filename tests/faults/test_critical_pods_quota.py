"""system-cluster-critical outside kube-system: what a real API server does, with and without the chart's quota.

The chart gives the scheduler and the webhook priorityClassName system-cluster-critical.
An upstream kube-apiserver (this local control plane) admits such a pod in any namespace.
Clusters that limit the critical classes (GKE does; any API server whose ResourceQuota
admission configuration lists them in limitedResources) admit one only where a
ResourceQuota's scopeSelector names its class. To see both, this test starts a second
kube-apiserver beside the local one: same binary, same flags, same etcd, plus that
admission configuration. Through it, the chart's own pod templates (as dry-run pods) are
refused in the release namespace until the chart's ResourceQuota is there, and admitted
after; the quota then holds exactly as many as the chart computed.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from e2e.charts import SCHEDULER_CHART, helm_template
from e2e.isolation import delete_namespace
from e2e.processes import ManagedProcess, free_port
from e2e.waiting import NotYet, wait_for
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .conftest import track, untrack

pytestmark = pytest.mark.faults

CRITICAL = ("system-node-critical", "system-cluster-critical")
LIMITED = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AdmissionConfiguration",
    "plugins": [
        {
            "name": "ResourceQuota",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "ResourceQuotaConfiguration",
                "limitedResources": [
                    {
                        "resource": "pods",
                        "matchScopes": [{"scopeName": "PriorityClass", "operator": "In", "values": list(CRITICAL)}],
                    }
                ],
            },
        }
    ],
}


@pytest.fixture(scope="module")
def limiting_api_server(control_plane, kubeconfig, tmp_path_factory):
    """A second kube-apiserver on the same etcd that limits the critical classes; its kubeconfig."""
    directory = tmp_path_factory.mktemp("limiting-apiserver")
    (directory / "admission.yaml").write_text(yaml.safe_dump(LIMITED))
    port = free_port()
    launch = control_plane.launches["kube-apiserver"]
    argv = [a for a in launch.argv if not a.startswith(("--secure-port=", "--admission-control-config-file="))]
    # It must not take over the `kubernetes` Service's endpoints from the real one.
    argv += [f"--secure-port={port}", f"--admission-control-config-file={directory / 'admission.yaml'}"]
    argv += ["--endpoint-reconciler-type=none"]
    process = track(ManagedProcess("limiting-kube-apiserver", argv, directory / "kube-apiserver.log"))
    document = yaml.safe_load(Path(kubeconfig).read_text())
    for cluster in document["clusters"]:
        server = cluster["cluster"]["server"]
        cluster["cluster"]["server"] = server.rsplit(":", 1)[0] + f":{port}"
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    process.start()
    try:
        api = config.new_client_from_config(config_file=str(path))

        def ready() -> None:
            if not process.alive():
                raise AssertionError(f"the second kube-apiserver exited:\n{process.log_tail()}")
            try:
                client.VersionApi(api).get_code(_request_timeout=2)
                client.CoreV1Api(api).list_namespace(limit=1, _request_timeout=2)
            except Exception as err:  # noqa: BLE001 - not serving yet, whatever the reason
                raise NotYet(str(err)[:200]) from None

        wait_for("the second kube-apiserver to serve", ready, 120, interval=0.5)
        yield api
        api.close()
    finally:
        process.stop()
        untrack(process)


@pytest.fixture
def release_namespace(api_client):
    name = f"gs-critical-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api_client).create_namespace(
        {"metadata": {"name": name, "labels": {"gpu-scheduler-test": "true"}}}
    )
    yield name
    delete_namespace(api_client, name)


def rendered(namespace: str) -> list[dict]:
    # KWOK runs no containers: the image (any registry) is never pulled.
    return helm_template("gpu-scheduler", SCHEDULER_CHART, namespace)


def chart_pods(documents: list[dict]) -> dict[str, dict]:
    """A pod of each Deployment, from its template, as the ReplicaSet controller would create it."""
    pods = {}
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        template = deployment["spec"]["template"]
        pods[deployment["metadata"]["name"]] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{deployment['metadata']['name']}-probe", "labels": template["metadata"]["labels"]},
            "spec": template["spec"],
        }
    return pods


def refusal(api, namespace: str, pod: dict) -> str | None:
    try:
        client.CoreV1Api(api).create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as err:
        return f"{err.status}: {err.body}"
    return None


def test_critical_pods_need_the_charts_quota_only_where_the_api_server_limits_them(
    api_client, limiting_api_server, release_namespace
):
    documents = rendered(release_namespace)
    pods = chart_pods(documents)
    (quota,) = [d for d in documents if d["kind"] == "ResourceQuota"]
    assert {name: pod["spec"]["priorityClassName"] for name, pod in pods.items()} == {
        "gpu-scheduler-scheduler": "system-cluster-critical",
        "gpu-scheduler-webhook": "system-cluster-critical",
    }

    for account in (
        d
        for d in documents
        if d["kind"] == "ServiceAccount" and "helm.sh/hook" not in d["metadata"].get("annotations", {})
    ):
        client.CoreV1Api(api_client).create_namespaced_service_account(release_namespace, account)

    # Upstream defaults (the local API server): admitted anywhere, no quota needed.
    assert {name: refusal(api_client, release_namespace, pod) for name, pod in pods.items()} == dict.fromkeys(pods)
    # Limited: refused, naming the scope, until a quota names the class.
    refused = {name: refusal(limiting_api_server, release_namespace, pod) for name, pod in pods.items()}
    for name, message in refused.items():
        assert message and "insufficient quota to match these scopes" in message, (name, message)

    client.CoreV1Api(api_client).create_namespaced_resource_quota(release_namespace, quota)

    def admitted() -> dict:
        answers = {name: refusal(limiting_api_server, release_namespace, pod) for name, pod in pods.items()}
        if any(answers.values()):
            raise NotYet(f"still refused: {answers}")
        return answers

    # The quota reaches the second API server through its own watch.
    wait_for("the chart's pods to be admitted under the chart's quota", admitted, 30)
    stored = client.CoreV1Api(api_client).read_namespaced_resource_quota(quota["metadata"]["name"], release_namespace)
    assert stored.spec.hard == {"pods": "8"}  # twice the 2 + 2 replicas

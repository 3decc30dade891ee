"""Golden checks of charts/gpu-scheduler-check as `helm template` renders it."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from commands import run
from e2e.charts import KUBE_VERSION_ARGS
from gpu_scheduler.placement import (
    DEVICES_ANNOTATION,
    FROM_BIND,
    MAP_ANNOTATION,
    PLACEMENT_ANNOTATION,
    bind_env_entry,
    container_devices,
    parse_map,
)

from .conftest import CHECK_CHART, HELM, REGISTRY_SET, container_args, flag, pod_spec, refused_render

pytestmark = pytest.mark.delivery

# The task's map, verbatim.
TASK_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def statefulset(rendered) -> dict:
    (found,) = rendered.of_kind("StatefulSet")
    return found


def test_default_map_is_exactly_the_tasks_five_lines(render):
    template = statefulset(render(CHECK_CHART))["spec"]["template"]

    annotation = template["metadata"]["annotations"][MAP_ANNOTATION]

    assert annotation == TASK_MAP
    placements = {i: (e.node, e.cuda_visible_devices) for i, e in parse_map(annotation).items()}
    assert placements == {
        0: ("node1", "0,1"),
        1: ("node2", "2"),
        2: ("node3", "0,1,2"),
        3: ("node4", "3"),
        4: ("node4", "3"),
    }


@pytest.mark.parametrize(
    ("release", "name"),
    [
        ("gpu-scheduler-check", "gpu-scheduler-check"),
        ("team-a-gpu-scheduler-check", "team-a-gpu-scheduler-check"),
        ("demo", "demo-gpu-scheduler-check"),
    ],
)
def test_check_objects_are_named_after_the_release(render, release, name):
    rendered = render(CHECK_CHART, release=release)
    sts = statefulset(rendered)
    (service,) = rendered.of_kind("Service")

    assert sts["metadata"]["name"] == service["metadata"]["name"] == sts["spec"]["serviceName"] == name
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= (sts["spec"]["template"]["metadata"]["labels"].items())


def test_two_check_releases_in_one_namespace_share_no_name_and_no_pod(render):
    first, second = (render(CHECK_CHART, release=release) for release in ("check-a", "check-b"))

    names = [{d["metadata"]["name"] for d in r.docs} for r in (first, second)]
    assert not names[0] & names[1]
    assert statefulset(first)["spec"]["selector"] != statefulset(second)["spec"]["selector"]


def test_fullname_override_renames_statefulset_and_service(render):
    rendered = render(CHECK_CHART, "fullnameOverride=check-b")

    assert statefulset(rendered)["metadata"]["name"] == "check-b"
    assert [s["metadata"]["name"] for s in rendered.of_kind("Service")] == ["check-b"]


def test_five_parallel_pods_ask_for_the_gpu_scheduler(render):
    sts = statefulset(render(CHECK_CHART))

    assert sts["spec"]["replicas"] == 5
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert pod_spec(sts)["schedulerName"] == "gpu-scheduler"


def test_check_logs_every_ten_seconds(render):
    args = container_args(statefulset(render(CHECK_CHART)))

    assert flag(args, "interval") == "10"


def test_devices_node_pod_and_expected_placement_come_from_the_downward_api(render):
    (container,) = pod_spec(statefulset(render(CHECK_CHART)))["containers"]

    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}

    assert env == {
        "CUDA_VISIBLE_DEVICES": f"metadata.annotations['{DEVICES_ANNOTATION}']",
        "NODE_NAME": "spec.nodeName",
        "POD_NAME": "metadata.name",
        "EXPECTED_PLACEMENT": f"metadata.annotations['{PLACEMENT_ANNOTATION}']",
    }


@pytest.mark.parametrize("extra", [(), ("podAnnotations.team=a", "extraEnv[0].name=X", "extraEnv[0].value=1")])
def test_every_container_reads_its_devices_from_the_bind_so_its_pods_need_no_admission(render, extra):
    """A pod whose every init container and container has the entry that
    reads the bind's annotation matches no webhook or policy of ours at creation; the
    scheduler refuses one that lacks it (fails closed)."""
    spec = pod_spec(statefulset(render(CHECK_CHART, *extra)))
    containers = spec.get("initContainers", []) + spec["containers"]

    devices = container_devices({"spec": spec})
    assert devices.missing == () and all(value is FROM_BIND for _, value in devices.values)
    for container in containers:
        assert bind_env_entry() in container["env"], container["name"]
        assert {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"} in container["env"], container["name"]


def test_values_set_map_replicas_scheduler_and_interval(render):
    rendered = render(
        CHECK_CHART,
        "schedulingMap=0=gpu-a:1\n1=gpu-b:0\n",
        "replicas=2",
        "schedulerName=team-a",
        "interval=30",
    )
    sts = statefulset(rendered)

    assert sts["spec"]["template"]["metadata"]["annotations"][MAP_ANNOTATION] == ("0=gpu-a:1\n1=gpu-b:0\n")
    assert sts["spec"]["replicas"] == 2
    assert pod_spec(sts)["schedulerName"] == "team-a"
    assert flag(container_args(sts), "interval") == "30"


def test_check_pods_get_no_api_token(render):
    assert pod_spec(statefulset(render(CHECK_CHART)))["automountServiceAccountToken"] is False


def test_without_persistence_the_pods_have_no_volume_and_count_nothing(render):
    sts = statefulset(render(CHECK_CHART))

    assert "volumeClaimTemplates" not in sts["spec"]
    (container,) = pod_spec(sts)["containers"]
    assert "volumeMounts" not in container
    assert not [a for a in container["args"] if a.startswith("--state-dir")]


@pytest.mark.parametrize(("storage_class", "expected"), [("standard", "standard"), ("", None)])
def test_persistence_gives_each_pod_a_claim_of_its_class_mounted_where_the_check_counts_its_starts(
    render, storage_class, expected
):
    sts = statefulset(
        render(
            CHECK_CHART,
            "persistence.enabled=true",
            f"persistence.storageClassName={storage_class}",
            "persistence.size=32Mi",
        )
    )

    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "32Mi"
    # Empty: the key is left out, so the cluster's default class applies ("" would mean none).
    assert claim["spec"].get("storageClassName") == expected
    (container,) = pod_spec(sts)["containers"]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert flag(container["args"], "state-dir") == "/data"


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ("replica=3", "replica"),
        ("image.pullpolicy=Always", "pullpolicy"),
        ("replicas=-1", "replicas"),
        ("persistence.enable=true", "enable"),
        ("persistence.storageClassName=Fast_SSD", "storageClassName"),
    ],
)
def test_schema_rejects_a_mistyped_value(helm, assignment, complaint):
    assert complaint in refused_render(helm, CHECK_CHART, assignment)


# -- the map's nodes against the cluster's (nodeCheck) ----------------------------------
#
# Helm's lookup reads the cluster; `helm install --dry-run=server` and `helm template
# --dry-run=server` let it, and need no more of an API server than discovery, the Node list
# and the release's history. FakeApiServer serves exactly that, with the nodes a test gives
# it, so the check is seen against a "cluster" without one.


class FakeApiServer:
    """An HTTP API server of discovery (v1, apps/v1), a NodeList and empty lists elsewhere."""

    def __init__(self, nodes: dict[str, dict[str, str]]):
        self.nodes = nodes
        self.paths: list[str] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                path = self.path.split("?")[0]
                fake.paths.append(path)
                body = fake.answer(path)
                data = json.dumps(body or {"kind": "Status", "status": "Failure", "code": 404}).encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str) -> dict | None:
        def resources(group_version, *kinds):
            return {
                "kind": "APIResourceList",
                "groupVersion": group_version,
                "resources": [
                    {
                        "name": f"{k.lower()}s",
                        "singularName": k.lower(),
                        "kind": k,
                        "namespaced": k != "Node",
                        "verbs": ["get", "list"],
                    }
                    for k in kinds
                ],
            }

        apps = {"groupVersion": "apps/v1", "version": "v1"}
        if path == "/version":
            return {"major": "1", "minor": "37", "gitVersion": "v1.37.0"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups = [{"name": "apps", "versions": [apps], "preferredVersion": apps}]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if path == "/api/v1":
            return resources("v1", "Node", "Secret", "Service")
        if path == "/apis/apps/v1":
            return resources("apps/v1", "StatefulSet")
        if path == "/api/v1/nodes":
            items = [{"metadata": {"name": name, "labels": labels}} for name, labels in self.nodes.items()]
            return {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items}
        if path.endswith("/secrets"):  # the release's history: none
            return {"kind": "SecretList", "apiVersion": "v1", "metadata": {}, "items": []}
        return None

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        server = f"http://127.0.0.1:{self.server.server_address[1]}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": server}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path


@pytest.fixture
def cluster(tmp_path):
    """cluster(nodes) -> (run helm against a fake API server with these nodes, its server)."""
    servers = []

    def start(nodes: dict[str, dict[str, str]]):
        fake = FakeApiServer(nodes)
        servers.append(fake)
        env = {**os.environ, "KUBECONFIG": str(fake.kubeconfig(tmp_path)), "HELM_CACHE_HOME": str(tmp_path / "cache")}

        def helm(verb: str, *sets: str):
            argv = [HELM, verb, "check", CHECK_CHART, "--namespace", "check", "--dry-run=server"]
            # helm template takes the version from --kube-version, helm install from /version.
            argv += [*KUBE_VERSION_ARGS] if verb == "template" else ["--disable-openapi-validation"]
            for assignment in (REGISTRY_SET, *sets):
                argv += ["--set", assignment]
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)

        return helm, fake

    yield start
    for fake in servers:
        fake.server.shutdown()


def notes(result) -> str:
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split("NOTES:", 1)[1].split())


KIND_NODES = {f"node{i}": {} for i in range(1, 5)}


def test_a_map_of_the_clusters_nodes_is_said_to_be_placeable(cluster):
    helm, fake = cluster({"control-plane": {}, **KIND_NODES})

    said = notes(helm("install"))

    assert "/api/v1/nodes" in fake.paths
    assert "Every node the map names is in this cluster." in said
    assert "WARNING" not in said


def test_nodes_the_cluster_lacks_are_named_with_the_nodes_it_has(cluster):
    # gpu-a carries node1 as its alias label: line 0 is placeable.
    helm, _ = cluster({"gpu-a": {"gpu-node-name": "node1"}, "gpu-b": {}})

    said = notes(helm("install"))

    assert (
        "WARNING: the map names nodes this cluster does not have, so these pods can never be placed and "
        "would stay Pending: 1=node2, 2=node3, 3=node4, 4=node4."
    ) in said
    assert "The cluster's nodes: gpu-a, gpu-b; values of their gpu-node-name label: node1." in said
    assert "--set-file schedulingMap=<file>" in said and "gpu-scheduler map generate" in said


def test_the_map_is_read_as_the_scheduler_reads_it(cluster):
    # Comments and blank lines are no lines; spaces around the node are no part of it.
    helm, _ = cluster({"gpu-a": {"example.com/alias": "a"}, "gpu-b": {}})

    said = notes(
        helm(
            "install",
            "replicas=3",
            "nodeCheck.aliasLabel=example.com/alias",
            "schedulingMap=# two nodes\n\n0= gpu-b :0\n1=a:GPU-"
            + "0" * 8
            + "-0000-0000-0000-"
            + "0" * 12
            + "\n2=gone:1\n",
        )
    )

    assert "these pods can never be placed and would stay Pending: 2=gone." in said


def test_lines_that_ask_for_a_count_name_no_node_to_check(cluster):
    helm, _ = cluster({"gpu-a": {}})

    said = notes(helm("install", "replicas=3", "schedulingMap=0=gpu-a:0\n1=*[pool=a]:gpus=2\n*=*:gpus=1\n2=gone:1|*\n"))

    assert "these pods can never be placed and would stay Pending: 2=gone." in said


def test_fail_refuses_the_install_and_off_looks_nothing_up(cluster):
    helm, fake = cluster({"gpu-a": {}})

    refused = helm("template", "nodeCheck.mode=fail")
    assert refused.returncode != 0
    assert "nodeCheck.mode is fail and the map names nodes this cluster does not have" in refused.stderr
    assert "0=node1, 1=node2, 2=node3, 3=node4, 4=node4" in refused.stderr

    fake.paths.clear()
    said = notes(helm("install", "nodeCheck.mode=off"))
    assert "/api/v1/nodes" not in fake.paths
    assert "WARNING" not in said and "Every node" not in said


def test_without_a_cluster_nothing_is_claimed_and_nothing_refused(helm):
    # helm template without --dry-run=server, Argo CD: lookup finds nothing. A check of no
    # nodes would call every line missing; fail would refuse every GitOps render.
    for mode in ("warn", "fail"):
        argv = [helm, "template", "check", CHECK_CHART, *KUBE_VERSION_ARGS, "--set", REGISTRY_SET]
        result = run([*argv, "--set", f"nodeCheck.mode={mode}"])
        assert result.returncode == 0, result.stderr


def test_values_of_an_older_chart_are_refused_saying_how_to_upgrade(cluster):
    # helm upgrade --reuse-values: the previous chart's defaults, without nodeCheck (null
    # removes it here). Refused, also where the notes would read it.
    helm, _ = cluster(KIND_NODES)

    for verb in ("install", "template"):
        result = helm(verb, "nodeCheck=null", "persistence=null")
        assert result.returncode != 0, verb
        assert "(nodeCheck, persistence)" in result.stderr, result.stderr
        assert "--reset-then-reuse-values" in result.stderr, result.stderr

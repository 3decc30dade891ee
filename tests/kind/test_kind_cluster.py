"""KinD for real: `make kind-up`, real kubelets running real containers, `make kind-down`.

One cluster for the module (tests/kind/conftest.py), in order: the nodes the
task's map names; the release `make e2e` installed (its webhook port, its certificate
renewed for real by the chart's CronJob with no admission failing, its webhook moved to the
host network and back); the chart's GPU agents publishing each worker's fake NVML layout,
and the scheduler under deny keying those GPUs by physical GPU (issue 19); the check chart as a
gang, and with a volume per pod of the default WaitForFirstConsumer class, made by a real
provisioner on each pod's map node and read back after a restart (issue 49); a pod placed on
node3 by the real kube-scheduler whose
container's output `kubectl logs` shows; a Service reached by its DNS name
from a pod on another node (CoreDNS, kube-proxy, the pod network); `kind
load docker-image` of an image built here; a worker restarted with `docker
restart` getting its pod network back; `make kind-up` again reusing the
cluster and repairing it; `make kind-down` leaving no container, volume, network or kubeconfig
behind. What is checked is what the cluster and Docker report, never our
scripts' own logs.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import os
import ssl
import time
import uuid

import pytest
from cryptography import x509
from e2e.waiting import NotYet, wait_for
from faults.gpu_oracle import devices_of
from gpu_scheduler.placement import parse_map
from prerequisites import missing

from . import renewal
from .conftest import (
    CLUSTER,
    KUBECTL,
    REPO,
    Kind,
    cluster_containers,
    docker_network_exists,
    kind_env,
    make,
    pinned_pod,
    run,
    tail,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]

WORKERS = ["node1", "node2", "node3", "node4"]
ECHO_DIR = REPO / "tests" / "kind" / "echo"


@pytest.fixture(scope="module")
def echo_image(kind) -> str:
    """A small image built here (never pulled), tagged by a hash of its inputs, loaded with `kind load`."""
    base = run(["bash", REPO / "scripts" / "debian-base.sh"], timeout=600)
    assert base.returncode == 0, tail(base)
    base_image = base.stdout.strip()
    digest = hashlib.sha256(base_image.encode())
    for path in sorted(ECHO_DIR.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    image = f"gpu-scheduler-kind-test-echo:{digest.hexdigest()[:12]}"
    if run(["docker", "image", "inspect", image]).returncode != 0:
        built = run(["docker", "build", "--build-arg", f"BASE_IMAGE={base_image}", "-t", image, ECHO_DIR], timeout=600)
        assert built.returncode == 0, tail(built)
    loaded = run(["bash", REPO / "scripts" / "kind.sh", "load", image], timeout=600, env=kind_env())
    assert loaded.returncode == 0, tail(loaded)
    return image


def node_ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def internal_ip(node: dict) -> str:
    (address,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    return address


def container_of(kind: Kind, node_name: str) -> str:
    """The Docker container that is Kubernetes node `node_name` (matched by IP, not by naming convention)."""
    ip = internal_ip(kind.get("node", node_name))
    for container in cluster_containers():
        found = run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", container])
        if ip in found.stdout.split():
            return container
    pytest.fail(f"no container of cluster {CLUSTER} has node {node_name}'s IP {ip}", pytrace=False)


def echo_pod(name: str, image: str, node: str, command: list[str] | None = None) -> dict:
    """A pod pinned to `node` by a nodeSelector, so the real kube-scheduler places it.

    Guaranteed QoS (requests == limits): kubelet then asks containerd for a
    negative oom_score_adj, the case our nodes cannot grant as such.
    """
    container = {
        "name": "echo",
        "image": image,
        "imagePullPolicy": "Never",
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}, "requests": {"cpu": "50m", "memory": "32Mi"}},
        "ports": [{"containerPort": 8080}],
    }
    if command:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never" if command else "Always",
            "containers": [container],
        },
    }


def wait_for_phase(kind: Kind, namespace: str, pod: str, phases: set[str], timeout: float = 180) -> dict:
    def current():
        found = kind.get("pod", pod, "-n", namespace)
        return found if found["status"].get("phase") in phases else None

    return kind.wait_for(f"pod {namespace}/{pod} to reach {phases}", current, timeout=timeout)


def wait_ready_pod(kind: Kind, namespace: str, pod: str) -> dict:
    def ready():
        found = kind.get("pod", pod, "-n", namespace)
        statuses = found["status"].get("containerStatuses") or []
        return found if statuses and all(s["ready"] for s in statuses) else None

    return kind.wait_for(f"pod {namespace}/{pod} to be ready", ready)


def client_output(kind: Kind, namespace: str, image: str, node: str, script: str) -> str:
    """Runs `script` in a pod on `node` to completion and returns its `kubectl logs`."""
    name = f"client-{uuid.uuid4().hex[:6]}"
    kind.apply(echo_pod(name, image, node, ["bash", "-c", script]), namespace)
    pod = wait_for_phase(kind, namespace, name, {"Succeeded", "Failed"})
    logs = kind.ok("logs", "-n", namespace, name)
    assert pod["status"]["phase"] == "Succeeded", f"client pod on {node} failed; its log:\n{logs}"
    return logs


def test_workers_are_node1_to_node4_ready_with_alias_labels_and_simulated_gpus(kind):
    nodes = {n["metadata"]["name"]: n for n in kind.get("nodes")["items"]}

    print(f"\ncluster up in {kind.up_seconds:.0f}s; nodes: {sorted(nodes)}")
    assert sorted(nodes) == sorted([f"{CLUSTER}-control-plane", *WORKERS])
    assert all(node_ready(n) for n in nodes.values()), {name: node_ready(n) for name, n in nodes.items()}
    for name in WORKERS:
        assert nodes[name]["metadata"]["labels"]["gpu-node-name"] == name
        assert nodes[name]["status"]["capacity"]["nvidia.com/gpu"] == "4"
        assert nodes[name]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert "nvidia.com/gpu" not in nodes[f"{CLUSTER}-control-plane"]["status"]["capacity"]


def installed_release(kind: Kind) -> dict:
    """The webhook Deployment `make e2e` installed; a skip without it (a failure under CI=true,
    where make test runs make e2e first)."""
    found = kind.kubectl("-n", renewal.NAMESPACE, "get", "deployment", renewal.WEBHOOK_SERVICE, "-o", "json")
    if found.returncode != 0:
        missing("no gpu-scheduler release on this cluster: make e2e (make test runs it first) installs one")
    return json.loads(found.stdout)


# make e2e (before these tests in make test, on this cluster) installs the
# webhook on scripts/kind.sh's KIND_WEBHOOK_PORT, not the chart's 8443, and its
# suite is admitted through it: here, that every place names that port.
WEBHOOK_PORT = 9443


def test_the_webhook_installed_by_make_e2e_serves_on_the_port_it_was_given(kind):
    container = installed_release(kind)["spec"]["template"]["spec"]["containers"][0]
    service = kind.get("-n", "gpu-scheduler-system", "service", "gpu-scheduler-webhook")
    slices = kind.get(
        "-n", "gpu-scheduler-system", "endpointslices", "-l", "kubernetes.io/service-name=gpu-scheduler-webhook"
    )

    assert f"--port={WEBHOOK_PORT}" in container["args"], container["args"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["https"] == WEBHOOK_PORT
    probe = container["readinessProbe"]["httpGet"]["port"]
    assert probe in ("https", WEBHOOK_PORT), probe
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "https")]
    ready = [
        (endpoint["addresses"][0], port["port"])
        for item in slices["items"]
        for endpoint in item["endpoints"]
        if endpoint["conditions"].get("ready")
        for port in item["ports"]
    ]
    assert ready and all(port == WEBHOOK_PORT for _, port in ready), ready


# The kubelet refreshes a Secret volume within its sync period plus its Secret cache's TTL
# (a minute or so each by default); then the webhook notices the new files.
VOLUME_REFRESH = 240


def test_the_renewal_cronjob_renews_the_webhook_certificate_and_no_admission_fails_meanwhile(kind):
    """The chart's renewal CronJob, run as a Job, replaces a serving certificate that expires
    tomorrow; the kubelet brings the new one into every webhook pod, which serves it; and the
    API server's calls to the webhook (a dry-run create every 0.25 s) all pass throughout."""
    deployment = installed_release(kind)
    port = {p["name"]: p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    kubectl = [str(KUBECTL), "--kubeconfig", str(kind.kubeconfig)]
    secret = kind.get("-n", renewal.NAMESPACE, "secret", renewal.SECRET)
    configurations = [kind.get(kind_name, renewal.RELEASE) for kind_name in renewal.CONFIGURATIONS]
    ageing = renewal.expiring_bundle(renewal.secret_bundle(secret).tls_cert_pem)
    namespace = kind.namespace(f"renewal-{uuid.uuid4().hex[:6]}")
    admissions = renewal.Admissions(str(kind.kubeconfig), namespace).start()
    job = f"renewal-test-{uuid.uuid4().hex[:6]}"
    try:
        # The ageing certificate, trusted first and then stored, as `gpu-scheduler certs` does.
        for kind_name, configuration in zip(renewal.CONFIGURATIONS, configurations, strict=True):
            patch = json.dumps(renewal.trust_patch(configuration, ageing.ca_cert_pem))
            kind.ok("patch", kind_name, renewal.RELEASE, "--type=json", "-p", patch)
        kind.ok("replace", "-f", "-", stdin=json.dumps(renewal.secret_with(secret, ageing)))
        pods = webhook_pods(kind, deployment)
        every_pod_serves(kind, kubectl, pods, port["https"], ageing.ca_cert_pem, renewal.serial_of(ageing))

        kind.ok("-n", renewal.NAMESPACE, "create", "job", job, f"--from=cronjob/{renewal.CRONJOB}")
        completed = ("--for=condition=complete", f"job/{job}", "--timeout=180s")
        kind.ok("-n", renewal.NAMESPACE, "wait", *completed, timeout=200)
        log = renewal.job_log(kubectl, job)
        renewed = renewal.secret_bundle(kind.get("-n", renewal.NAMESPACE, "secret", renewal.SECRET))
        assert renewal.serial_of(renewed) != renewal.serial_of(ageing), f"the renewal Job kept it:\n{log}"
        certificate = x509.load_pem_x509_certificate(renewed.tls_cert_pem)
        assert certificate.not_valid_after_utc - renewal.now() > datetime.timedelta(days=300), certificate
        new_ca = x509.load_pem_x509_certificate(renewed.ca_cert_pem)
        old_ca = x509.load_pem_x509_certificate(ageing.ca_cert_pem)
        for trusted in renewal.ca_bundles([kind.get(k, renewal.RELEASE) for k in renewal.CONFIGURATIONS]):
            # The new CA for the new certificate; the old one while pods still serve the old.
            assert new_ca in trusted and old_ca in trusted, trusted
        started = time.monotonic()
        every_pod_serves(kind, kubectl, pods, port["https"], renewed.ca_cert_pem, renewal.serial_of(renewed))
        served_after = time.monotonic() - started
    finally:
        admissions.stop()
        kind.kubectl("-n", renewal.NAMESPACE, "delete", "job", job, "--ignore-not-found")
        kind.kubectl("delete", "namespace", namespace, "--wait=false")
    assert admissions.failures == [], f"admissions failed during the renewal: {admissions.failures[:5]}"
    assert admissions.passed >= 20, admissions.passed
    print(
        f"\nrenewal Job {job}: serial {renewal.serial_of(ageing):x} (expiring) -> {renewal.serial_of(renewed):x}; "
        f"{len(pods)} webhook pods served it {served_after:.0f}s after the Job; "
        f"{admissions.passed} admissions through the webhook meanwhile, none failed"
    )


HELM = REPO / ".cache" / "bin" / "helm"


def test_the_webhook_on_the_host_network_admits_pods_and_the_release_comes_back(kind):
    """webhook.hostNetwork=true (what a GKE private cluster or an EKS custom CNI needs), on the
    port make e2e gave it: the webhook pods run in each node's network namespace, the Service's
    endpoints are node addresses, and the API server's calls reach them (a dry-run create is
    mutated). The release is then upgraded back to the pod network, as make e2e left it."""
    installed_release(kind)
    helm = [str(HELM), "--kubeconfig", str(kind.kubeconfig), "-n", renewal.NAMESPACE]

    def upgrade(host_network: bool) -> None:
        done = run(
            [*helm, "upgrade", renewal.RELEASE, REPO / "charts" / "gpu-scheduler", "--reuse-values"]
            + ["--set", f"webhook.hostNetwork={str(host_network).lower()}", "--wait", "--timeout", "5m"],
            timeout=400,
        )
        assert done.returncode == 0, tail(done)

    namespace = kind.namespace(f"host-network-{uuid.uuid4().hex[:6]}")
    upgrade(True)
    try:
        deployment = kind.get("-n", renewal.NAMESPACE, "deployment", renewal.WEBHOOK_SERVICE)
        assert deployment["spec"]["template"]["spec"].get("hostNetwork") is True
        pods = webhook_pods(kind, deployment)
        nodes = {n["metadata"]["name"]: internal_ip(n) for n in kind.get("nodes")["items"]}
        placed = {}
        for pod in pods:
            found = kind.get("-n", renewal.NAMESPACE, "pod", pod)
            placed[pod] = (found["spec"]["nodeName"], found["status"]["podIP"])
        assert all(ip == nodes[node] for node, ip in placed.values()), (placed, nodes)
        assert len({node for node, _ in placed.values()}) == len(pods), f"two replicas on one node: {placed}"
        slices = kind.get(
            "-n", renewal.NAMESPACE, "endpointslices", "-l", f"kubernetes.io/service-name={renewal.WEBHOOK_SERVICE}"
        )
        addresses = {
            (endpoint["addresses"][0], port["port"])
            for item in slices["items"]
            for endpoint in item["endpoints"]
            if endpoint["conditions"].get("ready")
            for port in item["ports"]
        }
        assert addresses == {(ip, WEBHOOK_PORT) for _, ip in placed.values()}, addresses
        admissions = renewal.Admissions(str(kind.kubeconfig), namespace).start()
        time.sleep(5)
        admissions.stop()
        assert admissions.failures == [] and admissions.passed >= 5, (admissions.passed, admissions.failures[:3])
    finally:
        upgrade(False)
        kind.kubectl("delete", "namespace", namespace, "--wait=false")
    back = kind.get("-n", renewal.NAMESPACE, "deployment", renewal.WEBHOOK_SERVICE)
    assert not back["spec"]["template"]["spec"].get("hostNetwork"), "the release stayed on the host network"
    print(f"\nwebhook on the host network: {placed}; {admissions.passed} dry-run admissions through it")


def webhook_pods(kind: Kind, deployment: dict) -> list[str]:
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    pods = kind.get("-n", renewal.NAMESPACE, "pods", "-l", selector)["items"]
    names = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(names) == deployment["spec"]["replicas"], names
    return names


def every_pod_serves(kind: Kind, kubectl: list[str], pods: list[str], port: int, ca_pem: bytes, serial: int) -> None:
    """Waits until every webhook pod serves the certificate with this serial."""

    def serving() -> bool:
        served = {pod: renewal.served_serial(kubectl, pod, port, ca_pem) for pod in pods}
        return all(s == serial for s in served.values())

    kind.wait_for(f"every webhook pod to serve certificate {serial:x}", _quietly(serving), VOLUME_REFRESH, interval=5)


def _quietly(probe):
    """A probe for Kind.wait_for: False instead of an error while a pod still serves a certificate
    the given CA does not sign (the TLS check fails until the new one is served)."""

    def wrapped() -> bool:
        try:
            return probe()
        except (ssl.SSLError, OSError, AssertionError):
            return False

    return wrapped


# -- issue 19: the chart's GPU agent over the fake libnvidia-ml.so.1 that `make kind-up` put
# into each worker with that worker's layout (tests/fake_nvml/layouts; scripts/kind.sh
# fake_gpus), and what the installed scheduler makes of the published GPUs. Checked against
# what the cluster says (Node annotations, bindings, Events), never our logs.

GPU_SCHEDULER = REPO / ".venv" / "bin" / "gpu-scheduler"
LAYOUTS = REPO / "tests" / "fake_nvml" / "layouts"
AGENT = f"{renewal.RELEASE}-agent"
# The image scripts/kind.sh loaded (its CHECK_IMAGE too).
CHECK_IMAGE = os.environ.get("CHECK_IMAGE", "gpu-scheduler-check:dev")


def layout(node: str) -> dict:
    return json.loads((LAYOUTS / f"{node}.json").read_text())


def published(kind: Kind, node: str) -> dict | None:
    text = (kind.get("node", node)["metadata"].get("annotations") or {}).get("gpu-scheduler/gpus")
    return json.loads(text) if text else None


def agent_pods(kind: Kind) -> dict[str, str]:
    """node -> the agent pod running there."""
    daemonset = kind.get("-n", renewal.NAMESPACE, "daemonset", AGENT)
    selector = ",".join(f"{k}={v}" for k, v in daemonset["spec"]["selector"]["matchLabels"].items())
    pods = kind.get("-n", renewal.NAMESPACE, "pods", "-l", selector)["items"]
    return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}


@pytest.fixture(scope="module")
def inventories(kind: Kind) -> dict[str, dict]:
    """Each worker's published inventory, once its agent has published the worker's layout."""
    kind.wait_for("an agent running on each of node1..node4", lambda: set(agent_pods(kind)) == set(WORKERS))

    def all_published():
        found = {node: published(kind, node) for node in WORKERS}
        return found if all(found.values()) else None

    return kind.wait_for("every worker's inventory published", all_published, timeout=120)


def test_each_worker_publishes_the_gpus_of_its_layout(kind, inventories):
    for node in WORKERS:
        gpus = layout(node)["gpus"]
        inventory = inventories[node]
        assert [g["uuid"] for g in inventory["gpus"]] == [g["uuid"] for g in gpus], node
        assert [g["pciBusId"] for g in inventory["gpus"]] == [g["pci_bus_id"] for g in gpus], node
        assert [[m["uuid"] for m in g["mig"]["devices"]] for g in inventory["gpus"]] == [
            [m["uuid"] for m in g.get("mig_devices", [])] for g in gpus
        ], node
        labels = kind.get("node", node)["metadata"]["labels"]
        assert labels["gpu-scheduler/gpu-count"] == str(len(gpus)), node
    nvlinked = sorted(tuple(link["gpus"]) for link in inventories["node4"]["links"] if link["nvlinks"])
    assert nvlinked == [(0, 1), (2, 3)]
    assert inventories["node3"]["gpus"][0]["mig"]["enabled"] is True


def set_sharing(kind: Kind, policy: str) -> None:
    helm = [str(HELM), "--kubeconfig", str(kind.kubeconfig), "-n", renewal.NAMESPACE]
    done = run(
        [*helm, "upgrade", renewal.RELEASE, REPO / "charts" / "gpu-scheduler", "--reuse-values"]
        + ["--set", f"scheduler.gpuSharing={policy}", "--wait", "--timeout", "5m"],
        timeout=400,
    )
    assert done.returncode == 0, tail(done)


def failed_scheduling(kind: Kind, namespace: str, pod: str) -> list[str]:
    events = kind.get("-n", namespace, "events", "--field-selector", f"involvedObject.name={pod}")["items"]
    return [e.get("message") or e.get("note") or "" for e in events if e.get("reason") == "FailedScheduling"]


def test_under_deny_one_gpu_is_one_gpu_in_any_spelling_and_gpus_shows_who_holds_it(kind, inventories):
    node3 = layout("node3")["gpus"]
    gpu1 = node3[1]["uuid"]
    mig_a, mig_b = (m["uuid"] for m in node3[0]["mig_devices"][:2])
    missing = "GPU-ffffffff-0000-4000-8000-000000000000"
    namespace = kind.namespace(f"inventory-{uuid.uuid4().hex[:6]}")
    set_sharing(kind, "deny")
    try:
        for name, devices in (("ordinal-0", "1"), ("slice-a-0", mig_a), ("slice-b-0", mig_b)):
            kind.apply(pinned_pod(name, "node3", devices), namespace)
        kind.wait_for(
            "the pods on GPU 1 and on two MIG devices of GPU 0 bound",
            lambda: all(
                kind.get("-n", namespace, "pod", p)["spec"].get("nodeName")
                for p in ("ordinal-0", "slice-a-0", "slice-b-0")
            ),
        )
        # GPU 1 by its UUID, GPU 0 whole (its MIG devices are held).
        for name, devices in (("by-uuid-0", gpu1), ("whole-0", "0")):
            kind.apply(pinned_pod(name, "node3", devices), namespace)
        # A GPU node3 does not have, listing node3's GPUs: nothing reads the map at the pod's
        # creation; the scheduler refuses to bind it, saying so (docs/placement.md, "Admission mode").
        gpus = f"(its GPUs: 0 {node3[0]['uuid']}"
        created = kind.kubectl(
            "apply", "-n", namespace, "-f", "-", stdin=json.dumps(pinned_pod("missing-0", "node3", missing))
        )
        assert created.returncode == 0, tail(created)
        unbound = kind.wait_for(
            "FailedScheduling for the pod on a GPU node3 does not have",
            lambda: [m for m in failed_scheduling(kind, namespace, "missing-0") if f"had no GPU {missing}" in m],
        )
        assert gpus in unbound[0], unbound
        assert not kind.get("-n", namespace, "pod", "missing-0")["spec"].get("nodeName")
        held = kind.wait_for(
            "FailedScheduling for the pod on GPU 1's UUID",
            lambda: [m for m in failed_scheduling(kind, namespace, "by-uuid-0") if "already held" in m],
        )
        assert f"GPU {gpu1} by {namespace}/ordinal-0" in held[0], held
        whole = kind.wait_for(
            "FailedScheduling for the pod on the whole GPU 0",
            lambda: [m for m in failed_scheduling(kind, namespace, "whole-0") if "already held" in m],
        )
        assert f"{namespace}/slice-a-0" in whole[0] and f"{namespace}/slice-b-0" in whole[0], whole
        for pod in ("by-uuid-0", "whole-0"):
            assert not kind.get("-n", namespace, "pod", pod)["spec"].get("nodeName"), f"{pod} was bound"

        shown = run([GPU_SCHEDULER, "gpus", "--kubeconfig", kind.kubeconfig, "--node", "node3", "-o", "json"])
        assert shown.returncode == 0, tail(shown)
        (report,) = json.loads(shown.stdout)["nodes"]
        holders = {
            g["uuid"]: sorted(h["pod"] for h in g["heldBy"] if h["pod"].startswith(namespace)) for g in report["gpus"]
        }
        slices = {
            m["uuid"]: sorted(h["pod"] for h in m["heldBy"] if h["pod"].startswith(namespace))
            for g in report["gpus"]
            for m in g["mig"]
        }
        assert holders[gpu1] == [f"{namespace}/ordinal-0"]
        assert holders[node3[0]["uuid"]] == []
        assert slices[mig_a] == [f"{namespace}/slice-a-0"] and slices[mig_b] == [f"{namespace}/slice-b-0"]
        print(
            "\ngpu-scheduler gpus --node node3:\n"
            + run([GPU_SCHEDULER, "gpus", "--kubeconfig", kind.kubeconfig, "--node", "node3"]).stdout
        )
    finally:
        kind.kubectl("delete", "namespace", namespace, "--wait=false")
        set_sharing(kind, "warn")


def test_an_agents_own_token_cannot_write_another_nodes_inventory(kind, inventories):
    """From inside node1's agent pod, with its pod-bound token: publishing node1's GPUs on node2
    is refused by the chart's ValidatingAdmissionPolicy, and node2 keeps its own inventory."""
    pod = agent_pods(kind)["node1"]
    before = published(kind, "node2")
    result = kind.kubectl(
        "-n", renewal.NAMESPACE, "exec", pod, "--", "gpu-scheduler", "agent", "--once", "--node-name", "node2"
    )
    assert result.returncode == 1, tail(result)
    assert "may not change node node2" in result.stdout + result.stderr, tail(result)
    assert published(kind, "node2") == before
    assert [g["uuid"] for g in before["gpus"]] == [g["uuid"] for g in layout("node2")["gpus"]]


# GPUs the task's map (the release make e2e installed) does not use, none on node3 (MIG on).
GANG_MAP = "0=node1:2\n1=node2:0\n2=node4:0\n3=node4:1\n"


def install_check(kind: Kind, namespace: str, release: str, scheduling_map: str, *settings: str):
    """`helm install` of the check chart with the image scripts/kind.sh loaded and this map."""
    repository, _, tag = CHECK_IMAGE.rpartition(":")
    helm = [str(HELM), "--kubeconfig", str(kind.kubeconfig), "-n", namespace]
    return run(
        [*helm, "install", release, REPO / "charts" / "gpu-scheduler-check", *settings]
        + ["--set-string", f"schedulingMap={scheduling_map}", "--set", "image.registry="]
        + ["--set-string", f"image.repository={repository}", "--set-string", f"image.tag={tag}"],
        timeout=300,
    )


def test_the_check_chart_installed_as_a_gang_has_all_its_pods_bound(kind):
    """charts/gpu-scheduler-check with gang=true (docs/gangs.md): the StatefulSet carries
    gpu-scheduler/gang: "true" (Parallel, as always), the installed webhook admits it, and the
    installed scheduler binds its four pods, all of them: each Running on its map's node."""
    installed_release(kind)
    namespace = kind.namespace(f"gang-{uuid.uuid4().hex[:6]}")
    try:
        done = install_check(kind, namespace, "gang-check", GANG_MAP, "--set", "gang=true", "--set", "replicas=4")
        assert done.returncode == 0, tail(done)
        statefulset = kind.get("-n", namespace, "statefulset", "gang-check-gpu-scheduler-check")
        template = statefulset["spec"]["template"]["metadata"]["annotations"]
        assert template.get("gpu-scheduler/gang") == "true" and statefulset["spec"]["podManagementPolicy"] == "Parallel"
        expected = {
            f"gang-check-gpu-scheduler-check-{i}": line.split("=")[1].split(":")[0]
            for i, line in enumerate(GANG_MAP.split())
        }
        aliases = {
            n["metadata"]["name"]: n["metadata"]["labels"].get("gpu-node-name", n["metadata"]["name"])
            for n in kind.get("nodes")["items"]
        }

        def all_running() -> dict:
            pods = kind.get("-n", namespace, "pods")["items"]
            placed = {
                p["metadata"]["name"]: aliases.get(p["spec"].get("nodeName") or "", "")
                for p in pods
                if p["status"].get("phase") == "Running"
            }
            return placed if placed == expected else {}

        kind.wait_for("the gang's 4 pods Running, each on its map's node", all_running, timeout=300)
    finally:
        kind.kubectl("delete", "namespace", namespace, "--wait=false")


# -- issue 50: the check StatefulSet with a count instead of a map: the installed scheduler
# chooses node and GPUs from the inventories the agents publish. Checked against the pods'
# containers' logs and every other live pod's devices, never the scheduler's word.

COUNT_MAP = "*=*:gpus=2\n"


def test_the_check_chart_with_a_count_runs_on_gpus_the_scheduler_chose(kind):
    installed_release(kind)
    namespace = kind.namespace(f"count-{uuid.uuid4().hex[:6]}")
    try:
        done = install_check(kind, namespace, "count-check", COUNT_MAP, "--set", "replicas=2")
        assert done.returncode == 0, tail(done)
        assert "can never be placed" not in done.stdout, done.stdout
        names = [f"count-check-gpu-scheduler-check-{i}" for i in range(2)]

        def running() -> list[dict]:
            # kind.wait_for polls until this is truthy: [] while a pod is not Running yet.
            pods = {p["metadata"]["name"]: p for p in kind.get("-n", namespace, "pods")["items"]}
            if not all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names):
                return []
            return [pods[n] for n in names]

        pods = kind.wait_for("the count check's 2 pods Running", running, timeout=300)
        for pod in pods:
            name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
            devices = pod["metadata"]["annotations"]["gpu-scheduler/cuda-visible-devices"]
            assert len(devices.split(",")) == 2, devices
            # The container saw what the bind gave it, and it matches the placement recorded.
            line = wait_for(
                f"{name} logs its devices",
                functools.partial(logged, kind, namespace, name, f"CUDA_VISIBLE_DEVICES={devices} "),
                timeout=120,
                interval=1,
            )
            assert f"node={node}" in line and "match=true" in line, line[-400:]
            chosen = json.loads(pod["metadata"]["annotations"]["gpu-scheduler/placement"])["chosen"]
            assert chosen.startswith("chosen for line 1 (2 GPUs on any node)"), chosen
        # No other live pod of the scheduler holds a GPU these were given (count lines never share).
        mine = {(p["spec"]["nodeName"], d) for p in pods for d in devices_of(p)}
        assert len(mine) == 4, mine
        others = [
            p
            for p in kind.get("pods", "-A")["items"]
            if p["spec"].get("schedulerName") == "gpu-scheduler"
            and p["spec"].get("nodeName")
            and p["metadata"]["namespace"] != namespace
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]
        shared = {(p["spec"]["nodeName"], d) for p in others for d in devices_of(p)} & mine
        assert not shared, f"GPUs given to the count pods that other pods hold: {sorted(shared)}"
    finally:
        kind.kubectl("delete", "namespace", namespace, "--wait=false")


# -- issue 49: the volumes of a WaitForFirstConsumer class, made by a real provisioner
# (make kind-up's default class: upstream's local-path-provisioner, or the same built here) on
# the node each pod's map line names. Checked against the claims, volumes, pods and the
# containers' logs, never the scheduler's.

VOLUME_MAP = "0=node1:3\n1=node2:3\n"
# VOLUMES_BROKEN=1: the same test against a scheduler that never writes selected-node on a
# claim (broken_claims/sitecustomize.py, mounted into the installed release's scheduler for
# the test and rolled back after): no volume is made, the pods wait, and the test must fail.
VOLUMES_BROKEN = os.environ.get("VOLUMES_BROKEN") == "1"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
FIRST_START = "volume /data: start 1"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def default_wait_for_first_consumer_class(kind: Kind) -> str:
    classes = kind.get("storageclasses")["items"]
    found = [
        c["metadata"]["name"]
        for c in classes
        if c.get("volumeBindingMode") == "WaitForFirstConsumer"
        and (c["metadata"].get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
    ]
    seen = [(c["metadata"]["name"], c["provisioner"], c.get("volumeBindingMode")) for c in classes]
    assert found, f"make kind-up left no default WaitForFirstConsumer StorageClass; the cluster has {seen}"
    return found[0]


@contextlib.contextmanager
def scheduler_that_never_selects_a_node(kind: Kind):
    """The installed scheduler's pods with broken_claims/ on PYTHONPATH (from a ConfigMap), until
    the block ends; then the Deployment's previous template again."""
    namespace, deployment, name = renewal.NAMESPACE, f"{renewal.RELEASE}-scheduler", "broken-claims"
    hook = REPO / "tests" / "kind" / "broken_claims" / "sitecustomize.py"
    kind.ok("-n", namespace, "create", "configmap", name, f"--from-file={hook}")
    mount = f"/opt/{name}"
    container = "/spec/template/spec/containers/0"
    patch = [
        {"op": "add", "path": "/spec/template/spec/volumes/-", "value": {"name": name, "configMap": {"name": name}}},
        {"op": "add", "path": f"{container}/volumeMounts/-", "value": {"name": name, "mountPath": mount}},
        {"op": "add", "path": f"{container}/env/-", "value": {"name": "PYTHONPATH", "value": mount}},
    ]
    try:
        kind.ok("-n", namespace, "patch", "deployment", deployment, "--type=json", "-p", json.dumps(patch))
        kind.ok("-n", namespace, "rollout", "status", f"deployment/{deployment}", "--timeout=180s", timeout=200)
        yield
    finally:
        kind.kubectl("-n", namespace, "rollout", "undo", f"deployment/{deployment}")
        kind.kubectl("-n", namespace, "rollout", "status", f"deployment/{deployment}", "--timeout=180s", timeout=200)
        kind.kubectl("-n", namespace, "delete", "configmap", name)


def placed_with_volume(kind: Kind, namespace: str, pod_name: str, node: str, storage_class: str) -> dict:
    """The pod, once it runs on `node` with its claim bound to a volume of `storage_class` made
    for that node; NotYet saying what the cluster shows meanwhile, also while the pod does not
    exist (after its deletion, until its StatefulSet makes it again: seen in CI under load)."""
    found = kind.kubectl("-n", namespace, "get", "pod", pod_name, "-o", "json")
    if found.returncode != 0:
        if "NotFound" in found.stderr:
            raise NotYet(f"pod {pod_name}: not (yet again) created by its StatefulSet")
        raise AssertionError(f"kubectl get pod {pod_name}: {found.stderr}")
    pod = json.loads(found.stdout)
    claim = kind.get("-n", namespace, "pvc", f"data-{pod_name}")
    selected = (claim["metadata"].get("annotations") or {}).get(SELECTED_NODE)
    conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
    scheduled = conditions.get("PodScheduled", {})
    state = (
        f"pod {pod_name}: {pod['status'].get('phase')} on {pod['spec'].get('nodeName') or 'no node'}"
        f" (PodScheduled {scheduled.get('status')}: {scheduled.get('message', '')[:300]});"
        f" claim data-{pod_name}: {claim['status'].get('phase')}, {SELECTED_NODE}={selected or 'none'}"
    )
    if pod["status"].get("phase") != "Running" or claim["status"].get("phase") != "Bound":
        raise NotYet(state)
    assert pod["spec"]["nodeName"] == node, state
    assert selected == node, state
    assert claim["spec"]["storageClassName"] == storage_class, claim["spec"]
    volume = kind.get("pv", claim["spec"]["volumeName"])
    hostname = kind.get("node", node)["metadata"]["labels"][HOSTNAME_LABEL]
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}], terms
    return pod


def logged(kind: Kind, namespace: str, pod_name: str, text: str) -> str:
    log = kind.ok("-n", namespace, "logs", pod_name, "-c", "check")
    if text not in log:
        raise NotYet(f"{pod_name} has not logged {text!r}; its log: {log[-600:]!r}")
    return log


def test_check_pods_write_to_volumes_made_on_their_map_nodes_and_read_them_back_after_a_restart(kind):
    """charts/gpu-scheduler-check with persistence on the cluster's default WaitForFirstConsumer
    class: the installed scheduler writes each claim's selected-node (the map's node), the real
    provisioner makes the volume there, the pod is bound there once its claim is, and its
    container counts its start on the volume. A pod deleted comes back on the same node and
    reads the count it wrote."""
    installed_release(kind)
    storage_class = default_wait_for_first_consumer_class(kind)
    namespace = kind.namespace(f"volumes-{uuid.uuid4().hex[:6]}")
    release = "volume-check"
    helm = [str(HELM), "--kubeconfig", str(kind.kubeconfig), "-n", namespace]
    expected = {f"{release}-gpu-scheduler-check-{i}": entry.node for i, entry in parse_map(VOLUME_MAP).items()}
    broken = scheduler_that_never_selects_a_node(kind) if VOLUMES_BROKEN else contextlib.nullcontext()
    started = time.monotonic()
    try:
        with broken:
            done = install_check(
                kind,
                namespace,
                release,
                VOLUME_MAP,
                *("--set", "replicas=2", "--set", "persistence.enabled=true"),
                *("--set", f"persistence.storageClassName={storage_class}"),
            )
            assert done.returncode == 0, tail(done)
            first = {}
            for pod_name, node in expected.items():
                first[pod_name] = wait_for(
                    f"{pod_name} Running on {node}, its claim bound to a volume made there",
                    functools.partial(placed_with_volume, kind, namespace, pod_name, node, storage_class),
                    timeout=180,
                    interval=1,
                )
                wait_for(
                    f"{pod_name}'s first start counted on its volume",
                    functools.partial(logged, kind, namespace, pod_name, f"{FIRST_START} (the first on this volume)"),
                    timeout=60,
                    interval=1,
                )
            placed_seconds = time.monotonic() - started

            restarted, node = next(iter(expected.items()))
            kind.ok("-n", namespace, "delete", "pod", restarted, "--wait=true", timeout=120)

            def came_back() -> dict:
                pod = placed_with_volume(kind, namespace, restarted, node, storage_class)
                if pod["metadata"]["uid"] == first[restarted]["metadata"]["uid"]:
                    raise NotYet(f"{restarted} is still the pod that was deleted")
                return pod

            wait_for(f"{restarted} back on {node} with its volume", came_back, timeout=120, interval=1)
            read_back = f"volume /data: start 2 (1 before this one, written by {node})"
            log = wait_for(
                f"{restarted} to read what it wrote before",
                functools.partial(logged, kind, namespace, restarted, read_back),
                timeout=60,
                interval=1,
            )
            print(
                f"\n{len(expected)} pods placed with their volumes in {placed_seconds:.0f}s, {restarted} back on {node}"
                f" and reading its volume after {time.monotonic() - started:.0f}s; its log:\n{log}"
            )
    finally:
        run([*helm, "uninstall", release, "--wait"], timeout=180)
        kind.kubectl("delete", "namespace", namespace, "--wait=false")


def test_kind_load_puts_a_locally_built_image_into_every_node(kind, echo_image):
    for node in [f"{CLUSTER}-control-plane", *WORKERS]:
        container = container_of(kind, node)
        images = run(["docker", "exec", container, "ctr", "--namespace=k8s.io", "images", "ls", "-q"])
        assert f"docker.io/library/{echo_image}" in images.stdout.split(), f"{container}: {images.stdout}"


def test_a_pod_on_node3_runs_its_container_and_kubectl_logs_shows_its_output(kind, echo_image):
    namespace = kind.namespace(f"kind-{uuid.uuid4().hex[:6]}")
    kind.apply(echo_pod("echo", echo_image, "node3"), namespace)

    pod = wait_ready_pod(kind, namespace, "echo")
    wide = kind.ok("get", "pod", "echo", "-n", namespace, "-o", "wide")
    logs = kind.wait_for("the echo server's first log line", lambda: kind.ok("logs", "-n", namespace, "echo"))

    print(f"\n{wide}{logs}")
    assert pod["spec"]["nodeName"] == "node3"
    assert pod["status"]["qosClass"] == "Guaranteed"
    assert wide.splitlines()[1].split()[6] == "node3", wide
    assert "echo-server on node3 listening on 8080" in logs


def test_a_service_resolves_through_coredns_and_answers_a_pod_on_another_node(kind, echo_image):
    namespace = kind.namespace(f"kind-{uuid.uuid4().hex[:6]}")
    kind.apply(echo_pod("echo", echo_image, "node3"), namespace)
    kind.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo"},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        namespace,
    )
    wait_ready_pod(kind, namespace, "echo")
    cluster_ip = kind.get("service", "echo", "-n", namespace)["spec"]["clusterIP"]
    fqdn = f"echo.{namespace}.svc.cluster.local"

    output = client_output(
        kind,
        namespace,
        echo_image,
        "node1",
        f"getent hosts {fqdn}; exec 3<>/dev/tcp/{fqdn}/80; timeout 10 cat <&3",
    )

    print(f"\nfrom node1: {output}")
    assert output.split()[:2] == [cluster_ip, fqdn], output
    assert "hello from node3" in output


def test_a_restarted_worker_gets_its_pod_network_back(kind, echo_image):
    namespace = kind.namespace(f"kind-{uuid.uuid4().hex[:6]}")
    container = container_of(kind, "node4")
    other_cidrs = {n["spec"]["podCIDR"] for n in kind.get("nodes")["items"] if n["metadata"]["name"] != "node4"}

    restarted = run(["docker", "restart", container], timeout=120)
    assert restarted.returncode == 0, tail(restarted)
    started = time.monotonic()
    # A new network namespace: the routes to the other nodes' pods are gone
    # until the node's gpu-scheduler-cni service puts them back.
    routes = kind.wait_for(
        f"routes to {sorted(other_cidrs)} in {container}",
        lambda: (lambda r: r if other_cidrs <= set(r.split()) else None)(
            run(["docker", "exec", container, "ip", "-4", "route"]).stdout
        ),
    )
    kind.apply(echo_pod("echo", echo_image, "node4"), namespace)
    pod = wait_ready_pod(kind, namespace, "echo")
    print(f"\n{container} restarted; routes back after {time.monotonic() - started:.0f}s:\n{routes}")

    output = client_output(
        kind, namespace, echo_image, "node1", f"exec 3<>/dev/tcp/{pod['status']['podIP']}/8080; timeout 10 cat <&3"
    )
    assert "hello from node4" in output
    # kubelet re-registered; the simulated GPUs survive (its device-plugin
    # checkpoint is on the node's /var volume), as docs/install.md says.
    assert kind.get("node", "node4")["status"]["allocatable"].get("nvidia.com/gpu") == "4"


def test_kind_up_again_reuses_the_cluster_and_repairs_lost_simulated_gpus(kind):
    before = {c: run(["docker", "inspect", "-f", "{{.Id}}", c]).stdout for c in cluster_containers()}
    zero = '{"status":{"capacity":{"nvidia.com/gpu":"0"},"allocatable":{"nvidia.com/gpu":"0"}}}'
    kind.ok("patch", "node", "node2", "--subresource=status", "--type=merge", "-p", zero)

    started = time.monotonic()
    again = make("kind-up", timeout=600)
    seconds = time.monotonic() - started

    print(f"\nsecond make kind-up: {seconds:.0f}s")
    assert again.returncode == 0, tail(again)
    assert {c: run(["docker", "inspect", "-f", "{{.Id}}", c]).stdout for c in cluster_containers()} == before
    nodes = kind.get("nodes")["items"]
    gpus = {n["metadata"]["name"]: n["status"]["allocatable"].get("nvidia.com/gpu") for n in nodes}
    assert all(gpus[name] == "4" for name in WORKERS), gpus


def test_kind_down_removes_containers_volumes_network_and_kubeconfig(kind):
    containers = cluster_containers()
    volumes = set()
    for container in containers:
        mounts = json.loads(run(["docker", "inspect", "-f", "{{json .Mounts}}", container]).stdout)
        volumes |= {m["Name"] for m in mounts if m["Type"] == "volume"}
    assert containers and volumes and kind.kubeconfig.exists()

    started = time.monotonic()
    down = make("kind-down", timeout=300)
    seconds = time.monotonic() - started

    print(f"\nmake kind-down: {seconds:.0f}s")
    assert down.returncode == 0, tail(down)
    assert cluster_containers() == []
    left = run(["docker", "volume", "ls", "-q"]).stdout.split()
    assert volumes.isdisjoint(left), sorted(volumes & set(left))
    assert not kind.kubeconfig.exists()
    if not kind.network_existed_before:
        assert not docker_network_exists("kind"), "make kind-down left the docker network kind it created"

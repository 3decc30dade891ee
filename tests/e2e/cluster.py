"""Reading and writing cluster objects as the API server stores them (plain JSON dicts).

Pods are read back as raw API JSON rather than client models: the assertions
then look at exactly what `kubectl get -o json` shows.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml
from commands import run, tail
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from .charts import KUBECTL
from .waiting import NotYet, wait_for

CUDA_ENV = "CUDA_VISIBLE_DEVICES"
# What the scheduler's Binding writes on the pod with its node: the map line's devices, as
# CUDA_VISIBLE_DEVICES spells them. A container whose entry is BIND_ENTRY (what the README
# and the check chart write, and admission adds in bind mode) reads it through the downward
# API. Spelt here, not imported from gpu_scheduler, so that the tests hold the product to
# the entry users write.
DEVICES_ANNOTATION = "gpu-scheduler/cuda-visible-devices"
DEVICES_FIELD_PATH = f"metadata.annotations['{DEVICES_ANNOTATION}']"
BIND_ENTRY = {"name": CUDA_ENV, "valueFrom": {"fieldRef": {"fieldPath": DEVICES_FIELD_PATH}}}
# BIND_ENTRY as the API server stores it (it defaults fieldRef.apiVersion), and the entry
# admission puts after it.
STORED_BIND_ENTRY = {"name": CUDA_ENV, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICES_FIELD_PATH}}}
ORDER_ENTRY = {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"}
# The scheduler's --alias-label: a map may name a node by this label's value.
ALIAS_LABEL = "gpu-node-name"
CONTAINER_LISTS = ("initContainers", "containers")


@dataclass
class Kubectl:
    """kubectl (.cache/bin's) against the cluster of one kubeconfig, JSON in and out."""

    kubeconfig: Path

    def kubectl(self, *args, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess:
        return run([KUBECTL, "--kubeconfig", self.kubeconfig, *args], timeout=timeout, input=stdin)

    def ok(self, *args, timeout: float = 120, stdin: str | None = None) -> str:
        result = self.kubectl(*args, timeout=timeout, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(map(str, args))}: {tail(result)}"
        return result.stdout

    def get(self, *args) -> dict:
        return json.loads(self.ok("get", *args, "-o", "json"))

    def items(self, *args) -> list[dict]:
        return self.get(*args)["items"]


def served_certificate(
    kubectl: list[str], namespace: str, target: str, port: int, ca_pem: bytes, server_hostname: str
) -> bytes:
    """The certificate (DER) served at `target` (svc/NAME or pod/NAME) on `port`, reached through
    `kubectl port-forward` and verified against `ca_pem` for `server_hostname`."""
    forward = subprocess.Popen(
        [*kubectl, "-n", namespace, "port-forward", target, f":{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = forward.stdout.readline()
        match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) ->", line)
        assert match, f"kubectl port-forward {target} said {line!r}: {forward.stderr.read() if forward.poll() else ''}"
        context = ssl.create_default_context(cadata=ca_pem.decode())
        with socket.create_connection(("127.0.0.1", int(match.group(1))), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=server_hostname) as tls:
                return tls.getpeercert(binary_form=True)
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def get_json(api_client, path: str, query: dict | None = None) -> dict:
    """GET an API path; the body as a dict."""
    method, url, headers, _, _ = api_client.param_serialize(
        "GET",
        path,
        query_params=list((query or {}).items()),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(method, url, header_params=headers)
    response.read()
    if response.status != 200:
        raise AssertionError(f"GET {path} answered {response.status}: {response.data[:500]!r}")
    return json.loads(response.data)


def list_pods(api_client, namespace: str, label_selector: str = "") -> list[dict]:
    query = {"labelSelector": label_selector} if label_selector else {}
    pods = get_json(api_client, f"/api/v1/namespaces/{namespace}/pods", query)["items"]
    return sorted(pods, key=lambda pod: pod["metadata"]["name"])


def get_pod(api_client, namespace: str, name: str) -> dict:
    return get_json(api_client, f"/api/v1/namespaces/{namespace}/pods/{name}")


# The annotation kwok (and scripts/local-up.sh) puts on the fake nodes it runs.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def kwok_fake_nodes(api_client) -> set[str]:
    """Names of the KWOK fake nodes: bound pods show Running there, but no container runs."""
    nodes = get_json(api_client, "/api/v1/nodes")["items"]
    return {n["metadata"]["name"] for n in nodes if KWOK_NODE_ANNOTATION in (n["metadata"].get("annotations") or {})}


def pod_log(api_client, namespace: str, name: str, container: str) -> str:
    """What `kubectl logs` shows for one container: the kubelet's record of its output."""
    return client.CoreV1Api(api_client).read_namespaced_pod_log(name, namespace, container=container)


def node_aliases(api_client) -> dict[str, str]:
    """node name -> the name a map uses for it: its gpu-node-name label, else its name.

    On the local cluster node1 is called node1; on KinD the worker labelled
    gpu-node-name=node1 is, whatever its own name."""
    nodes = get_json(api_client, "/api/v1/nodes")["items"]
    return {
        n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ALIAS_LABEL, n["metadata"]["name"])
        for n in nodes
    }


def map_nodes(api_client, pods: list[dict]) -> dict[str, str]:
    """pod name -> the node it is bound to, as a map names that node ("" when unbound)."""
    aliases = node_aliases(api_client)
    return {
        p["metadata"]["name"]: aliases.get(p["spec"].get("nodeName") or "", p["spec"].get("nodeName") or "")
        for p in pods
    }


def create(api_client, namespace: str, objects: list[dict]) -> None:
    """Creates objects of any kind in `namespace` (what `kubectl create -n NAMESPACE -f` does)."""
    for obj in objects:
        utils.create_from_dict(api_client, obj, namespace=namespace)


_MAP_FIELD = re.compile(r"^metadata\.(annotations|labels)\['(.*)'\]$")
_PLAIN_FIELDS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "metadata.uid": ("metadata", "uid"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.hostIP": ("status", "hostIP"),
    "status.podIP": ("status", "podIP"),
}


def field_value(pod: dict, field_path: str) -> str:
    """What the kubelet gives an env entry whose valueFrom.fieldRef is `field_path`, read from
    the pod as stored: an annotation or label it lacks (the devices annotation before the bind,
    say) is the empty string. A path the downward API serves but this does not read is
    "<fieldRef PATH>", which never equals a device list."""
    match = _MAP_FIELD.match(field_path)
    if match:
        return str(((pod.get("metadata") or {}).get(match.group(1)) or {}).get(match.group(2)) or "")
    if field_path in _PLAIN_FIELDS:
        part, key = _PLAIN_FIELDS[field_path]
        return str((pod.get(part) or {}).get(key) or "")
    return f"<fieldRef {field_path}>"


def env_seen(pod: dict, container: dict) -> dict[str, str]:
    """A container's environment from its env entries as the kubelet resolves them against the
    stored `pod`: a literal value (an entry without one is ""), a fieldRef through the downward
    API (field_value); with a name twice the last entry wins. Values from elsewhere (a ConfigMap,
    a Secret, resources) are "<from KIND>"; envFrom and $(VAR) references are not read (nothing
    of ours writes them)."""
    seen: dict[str, str] = {}
    for entry in container.get("env") or []:
        value_from = entry.get("valueFrom")
        if value_from is None:
            seen[entry["name"]] = entry.get("value") or ""
        elif (value_from.get("fieldRef") or {}).get("fieldPath"):
            seen[entry["name"]] = field_value(pod, value_from["fieldRef"]["fieldPath"])
        else:
            seen[entry["name"]] = f"<from {', '.join(sorted(value_from))}>"
    return seen


def container_env(pod: dict, name: str = CUDA_ENV) -> dict[str, str | None]:
    """What `name` is in every init and app container, as each SEES it (env_seen: a literal, or a
    fieldRef such as BIND_ENTRY read from the stored pod, "" before the bind):
    {"init:setup": "0,1", "check": "0,1"}; None where the container has no entry."""
    values = {}
    spec = pod.get("spec") or {}
    for field in CONTAINER_LISTS:
        for container in spec.get(field) or []:
            key = ("init:" if field == "initContainers" else "") + container["name"]
            values[key] = env_seen(pod, container).get(name)
    return values


def with_bind_entries(pod_spec: dict) -> dict:
    """`pod_spec` (a pod's or a pod template's spec) with BIND_ENTRY in every init and app
    container that has no CUDA_VISIBLE_DEVICES entry: what a user following the README writes.
    Changes `pod_spec` in place and returns it."""
    for field in CONTAINER_LISTS:
        for container in pod_spec.get(field) or []:
            if not any(entry.get("name") == CUDA_ENV for entry in container.get("env") or []):
                container["env"] = [*(container.get("env") or []), copy.deepcopy(BIND_ENTRY)]
    return pod_spec


FROM_BIND = "<from the bind>"


def devices_entry(container: dict) -> str | None:
    """How a container was given CUDA_VISIBLE_DEVICES, for a pod not bound yet (a dry run's
    answer, say), as API JSON: its literal value, FROM_BIND for BIND_ENTRY (any fieldRef
    apiVersion: the API server stores "v1" where the pod left it out), what env_seen says for
    an entry from elsewhere, None without an entry. The last entry wins."""
    given = None
    for entry in container.get("env") or []:
        if entry.get("name") != CUDA_ENV:
            continue
        field_ref = (entry.get("valueFrom") or {}).get("fieldRef") or {}
        if field_ref.get("fieldPath") == DEVICES_FIELD_PATH:
            given = FROM_BIND
        else:
            given = env_seen({}, {"env": [entry]})[CUDA_ENV]
    return given


def pod_events(api_client, namespace: str, pod_name: str) -> list[dict]:
    """Core v1 Events about a pod. The API server also serves events.k8s.io/v1 Events
    (what the scheduler writes) through this API, so this sees both."""
    return get_json(
        api_client,
        f"/api/v1/namespaces/{namespace}/events",
        {"fieldSelector": f"involvedObject.kind=Pod,involvedObject.name={pod_name}"},
    )["items"]


def object_events(api_client, namespace: str, kind: str, name: str) -> list[dict]:
    return get_json(
        api_client,
        f"/api/v1/namespaces/{namespace}/events",
        {"fieldSelector": f"involvedObject.kind={kind},involvedObject.name={name}"},
    )["items"]


def describe_events(events: list[dict]) -> str:
    return "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in events) or "no events"


def describe_pods(pods: list[dict]) -> str:
    return (
        ", ".join(
            f"{p['metadata']['name']}={p['spec'].get('nodeName') or '<unbound>'}/{(p.get('status') or {}).get('phase')}"
            for p in pods
        )
        or "no pods"
    )


def wait_for_pods(
    api_client,
    namespace: str,
    count: int,
    timeout: float,
    label_selector: str = "",
    phases: tuple[str, ...] | None = ("Running",),
) -> list[dict]:
    """Waits until `count` pods exist, each bound to a node and in one of `phases` (None: any phase)."""
    wanted = "bound" + (f" and {'/'.join(phases)}" if phases else "")

    def probe() -> list[dict]:
        pods = list_pods(api_client, namespace, label_selector)
        done = [p for p in pods if p["spec"].get("nodeName") and (not phases or p["status"].get("phase") in phases)]
        if len(pods) != count or len(done) != count:
            raise NotYet(f"{len(pods)} pods, {len(done)} {wanted}: {describe_pods(pods)}")
        return pods

    selected = f" with labels {label_selector}" if label_selector else ""
    return wait_for(f"{count} pods{selected} in {namespace} {wanted}", probe, timeout)


def wait_for_event(api_client, namespace: str, pod_name: str, reason: str, contains: str, timeout: float) -> dict:
    """Waits for an Event about pod `pod_name` with `reason` whose message contains `contains`."""

    def probe() -> dict:
        events = pod_events(api_client, namespace, pod_name)
        for event in events:
            if event.get("reason") == reason and contains in (event.get("message") or ""):
                return event
        raise NotYet(describe_events(events))

    return wait_for(f"a {reason} event about pod {namespace}/{pod_name} saying {contains!r}", probe, timeout)


def kwok_node(name: str) -> dict:
    """A KWOK fake node with 4 GPUs, built like scripts/local-up.sh builds node1..nodeN:
    kwok takes the nodes annotated kwok.x-k8s.io/node=fake, makes them Ready and runs their pods."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"}
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


# Taints the node lifecycle controller puts on a node that is not (yet) Ready
# and takes off some time after it is: until then TaintToleration refuses the
# node, and a pod tried meanwhile collects backoff.
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def wait_for_node_ready(api_client, name: str, timeout: float, untainted: bool = True) -> None:
    """Until the node is Ready and (untainted) the lifecycle controller has lifted its taints.

    Ready alone is not enough for a test that starts from a usable node: under
    load kube-controller-manager removes the not-ready taint seconds after kwok
    reports Ready (seen: ~19 s), and a scheduler started in between refuses
    the node and backs off."""

    def probe() -> None:
        node = get_json(api_client, f"/api/v1/nodes/{name}")
        conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
        if conditions.get("Ready") != "True":
            raise NotYet(f"conditions {conditions or 'none'}")
        taints = [t["key"] for t in (node.get("spec") or {}).get("taints") or [] if t["key"] in LIFECYCLE_TAINTS]
        if untainted and taints:
            raise NotYet(f"Ready, still tainted {taints}")

    wait_for(f"node {name} to be Ready without the lifecycle controller's taints", probe, timeout)


def kubectl_apply(kubectl: Path | str, kubeconfig: Path | str, documents: list[dict], namespace: str = "") -> None:
    """`kubectl apply` of `documents` (into `namespace` where they name none)."""
    in_namespace = ["--namespace", namespace] if namespace else []
    argv = [kubectl, "--kubeconfig", kubeconfig, "apply", *in_namespace, "-f", "-"]
    applied = run(argv, input=yaml.safe_dump_all(documents))
    assert applied.returncode == 0, f"kubectl apply failed ({applied.returncode}): {applied.stderr}"


def status_message(body) -> str:
    """The message of the API server's Status answer, whole: where a refused admission says why
    (the webhook's error comes last in it)."""
    try:
        return json.loads(body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(body)[:2000]


def admission_problem(api_client, namespace: str, pod: dict, **request) -> str | None:
    """None when a dry-run create of `pod`, whose map gives its one container device 0, is
    admitted with its container seeing CUDA_VISIBLE_DEVICES=0 (the fieldRef on the devices
    annotation the webhook writes on a pod created on a node, or a literal); else
    what went wrong ("refused (<status>): ..." when the API server refused it). `request`: the
    client's options, _request_timeout say."""
    try:
        created = client.CoreV1Api(api_client).create_namespaced_pod(namespace, pod, dry_run="All", **request)
    except ApiException as err:
        return f"refused ({err.status}): {status_message(err.body)}"
    stored = api_client.sanitize_for_serialization(created)
    seen = env_seen(stored, stored["spec"]["containers"][0])
    return None if seen.get(CUDA_ENV) == "0" else f"admitted without {CUDA_ENV}=0: {seen}"


def ignoring_not_found(call, *args, **kwargs) -> None:
    """call(*args, **kwargs), a delete say, for which 404 (already gone) is as good as done."""
    try:
        call(*args, **kwargs)
    except ApiException as err:
        if err.status != 404:
            raise


def delete_node(api_client, name: str) -> None:
    ignoring_not_found(client.CoreV1Api(api_client).delete_node, name)


def delete_fake_node(api_client, name: str) -> None:
    """Deletes a KWOK node and every pod bound to it, at once: without the node's kwok the pods
    would never finish terminating."""
    core = client.CoreV1Api(api_client)
    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
        ignoring_not_found(
            core.delete_namespaced_pod, pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
        )
    delete_node(api_client, name)


def delete_cluster_rbac(api_client, documents: list[dict]) -> None:
    """Deletes the ClusterRoles and ClusterRoleBindings among `documents` (what a release's
    namespace does not take with it)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    deletes = {"ClusterRole": rbac.delete_cluster_role, "ClusterRoleBinding": rbac.delete_cluster_role_binding}
    for document in documents:
        if document["kind"] in deletes:
            ignoring_not_found(deletes[document["kind"]], document["metadata"]["name"])


def current_cluster_and_user(kubeconfig: Path | str) -> tuple[dict, dict]:
    """The entries ({"name", "cluster"}, {"name", "user"}) the kubeconfig's current context names."""
    document = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(c for c in document["contexts"] if c["name"] == document["current-context"])["context"]
    cluster = next(c for c in document["clusters"] if c["name"] == context["cluster"])
    user = next((u for u in document.get("users") or () if u["name"] == context.get("user")), {})
    return cluster, user


def write_kubeconfig(path: Path, cluster: dict, user: str, token: str) -> Path:
    """A kubeconfig (mode 0600) that reaches `cluster` (an entry {"name", "cluster": {"server", ...}})
    and authenticates with `token` only, as `user`."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


def token_kubeconfig(admin_kubeconfig: Path | str, token: str, path: Path, user: str) -> Path:
    """A kubeconfig (mode 0600) for the admin's cluster that authenticates with `token` only, as `user`."""
    cluster, _ = current_cluster_and_user(admin_kubeconfig)
    return write_kubeconfig(path, cluster, user, token)


def create_token(kubectl: Path | str, admin_kubeconfig: Path | str, namespace: str, account: str, *bound: str) -> str:
    """A fresh 10-minute token of the ServiceAccount (`bound`: kubectl's --bound-object-* flags)."""
    argv = [kubectl, "--kubeconfig", admin_kubeconfig, "create", "token", account, "--namespace", namespace]
    token = run([*argv, "--duration=10m", *bound], timeout=60)
    assert token.returncode == 0, token.stderr
    return token.stdout.strip()


def service_account_kubeconfig(
    kubectl: Path | str, admin_kubeconfig: Path | str, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig (mode 0600) for the admin's cluster that authenticates with a fresh
    10-minute token of the ServiceAccount, as the account's pods do."""
    token = create_token(kubectl, admin_kubeconfig, namespace, account)
    return token_kubeconfig(admin_kubeconfig, token, path, account)

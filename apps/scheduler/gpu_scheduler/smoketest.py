"""`gpu-scheduler smoke-test`: prove an installed release works, the way a user's pod meets it.

One pod of ours goes through the real path: admission must give its container the
CUDA_VISIBLE_DEVICES entry that reads the devices annotation (added by the chart's
MutatingAdmissionPolicy, or on 1.35 by its webhook, which must answer over TLS the
caBundle trusts), then the scheduler must bind it to the node its map names, and once bound its
container must see the map line's devices. The pod is deleted afterwards, pass or fail. The chart's `helm test`
hook runs this in a pod; it works from a laptop with a kubeconfig too.

Exit 0 when every step passed; 1 with a message naming the step that failed
and what to look at; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import time
from urllib.parse import quote

from kubernetes.config.config_exception import ConfigException

from .config import DEFAULT_SCHEDULER_NAME, env, env_help, positive_float
from .kube.client import ApiError, KubeClient, load_configuration
from .placement import DEVICES_ANNOTATION, FROM_BIND, InvalidMapError, container_devices, parse_map_uncached
from .scheduling.nodes import NodeInfo

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
PROBE_LABEL = "gpu-scheduler.io/smoke-test"
TROUBLESHOOTING = "docs/troubleshooting.md"


class SmokeTestFailed(Exception):
    """A step failed; str() says which, what was seen, and where to look."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        default=env("SMOKE_TEST_NAMESPACE", "default"),
        help=env_help(
            "namespace of the probe pod; the webhook must serve it (not kube-system, "
            "not the release namespace, not labelled gpu-scheduler.io/webhook=disabled)",
            "SMOKE_TEST_NAMESPACE",
        ),
    )
    parser.add_argument(
        "--release-namespace",
        default=env("RELEASE_NAMESPACE", ""),
        help=env_help("namespace of the release under test, which its webhook never serves", "RELEASE_NAMESPACE"),
    )
    parser.add_argument(
        "--node",
        default=env("SMOKE_TEST_NODE", ""),
        help=env_help(
            "node the map names; empty: the first Ready node with GPUs, else any Ready node", "SMOKE_TEST_NODE"
        ),
    )
    parser.add_argument("--devices", default="0", help="the map's devices for the probe pod (default: %(default)s)")
    parser.add_argument(
        "--scheduler-name",
        default=env("SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME),
        help=env_help("schedulerName of the probe pod", "SCHEDULER_NAME"),
    )
    parser.add_argument(
        "--image",
        required=True,
        help="image of the probe pod's container, run with --version (the chart passes its own image)",
    )
    parser.add_argument(
        "--image-pull-policy", default="IfNotPresent", choices=("Always", "IfNotPresent", "Never"), help="of the probe"
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=120.0,
        help="seconds to wait for the binding (default: %(default)s)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG", ""),
        help=env_help("kubeconfig file; in-cluster configuration when unset", "KUBECONFIG"),
    )


def probe_pod(name: str, scheduling_map: str, args: argparse.Namespace) -> dict:
    """A pod that passes the restricted Pod Security Standard and goes nowhere without our scheduler."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {PROBE_LABEL: "true"},
            "annotations": {"gpu-scheduling-map": scheduling_map},
        },
        "spec": {
            "schedulerName": args.scheduler_name,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            # A GPU node's taints must not evict the probe before it is checked.
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": args.image,
                    "imagePullPolicy": args.image_pull_policy,
                    "args": ["--version"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def choose_node(kube: KubeClient) -> str:
    """The first Ready, schedulable node with nvidia.com/gpu capacity, else the first Ready one."""
    nodes = [NodeInfo.from_api(node) for node in kube.get("/api/v1/nodes").get("items", [])]
    usable = sorted((n for n in nodes if n.ready and not n.unschedulable), key=lambda n: (n.gpus <= 0, n.name))
    if not usable:
        raise SmokeTestFailed(f"no Ready, schedulable node among {len(nodes)}: `kubectl get nodes`")
    return usable[0].name


def check_admission(pod: dict, namespace: str) -> None:
    """Admission gave every container the CUDA_VISIBLE_DEVICES entry that reads the bind's
    devices annotation."""
    given = container_devices(pod)
    wrong = [name for name, value in given.values if value is not FROM_BIND]
    if wrong:
        raise SmokeTestFailed(
            f"the pod was admitted without a CUDA_VISIBLE_DEVICES entry reading {DEVICES_ANNOTATION} "
            f"({given.describe()}): admission did not give it one. Is namespace {namespace} "
            "labelled gpu-scheduler.io/webhook=disabled, or is it the release namespace? "
            f"`kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations` ({TROUBLESHOOTING})"
        )


def check_seen(pod: dict, devices: str) -> None:
    """Once the pod is bound, every container sees `devices` (through the Binding's annotation)."""
    given = container_devices(pod)
    seen = {name: given.seen(name, value) for name, value in given.values}
    wrong = {name: value for name, value in seen.items() if value != devices}
    if wrong:
        raise SmokeTestFailed(
            f"the pod was bound, but its containers would see CUDA_VISIBLE_DEVICES {wrong}, not {devices}: "
            f"its Binding did not write {DEVICES_ANNOTATION}={devices}. Is the scheduler older than the chart? "
            f"({TROUBLESHOOTING})"
        )


def _events(kube: KubeClient, namespace: str, name: str) -> list[str]:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
    try:
        items = kube.get(path, {"fieldSelector": f"involvedObject.name={name}"}).get("items", [])
    except ApiError as err:
        return [f"(events unreadable: {err})"]
    return [f"{e.get('reason')}: {e.get('message')}" for e in items]


def wait_bound(kube: KubeClient, namespace: str, name: str, node: str, timeout: float) -> tuple[float, dict]:
    """Seconds until the pod was bound, and the pod as bound; SmokeTestFailed when it is bound
    elsewhere or not in time."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    started = time.monotonic()
    while True:
        pod = kube.get(path)
        bound_to = pod["spec"].get("nodeName")
        if bound_to:
            if bound_to != node:
                raise SmokeTestFailed(f"pod {namespace}/{name} was bound to {bound_to}, not to {node} as its map says")
            return time.monotonic() - started, pod
        if time.monotonic() - started > timeout:
            events = _events(kube, namespace, name) or ["(no events: is the scheduler running and leading?)"]
            raise SmokeTestFailed(
                f"pod {namespace}/{name} was not bound within {timeout:.0f} s; its events: "
                + "; ".join(events)
                + f" ({TROUBLESHOOTING}, 'Pods stay Pending')"
            )
        time.sleep(POLL_SECONDS)


def smoke_test(kube: KubeClient, args: argparse.Namespace) -> str:
    node = args.node or choose_node(kube)
    scheduling_map = f"0={node}:{args.devices}\n"
    parse_map_uncached(scheduling_map)  # InvalidMapError names the bad part before anything is created
    # The trailing -0 is the pod's index in the map.
    name = f"gpu-scheduler-smoke-test-{secrets.token_hex(3)}-0"
    pods = f"/api/v1/namespaces/{quote(args.namespace, safe='')}/pods"
    log.info("creating pod %s/%s with map %r (scheduler %s)", args.namespace, name, scheduling_map, args.scheduler_name)
    try:
        created = kube.call("POST", pods, body=probe_pod(name, scheduling_map, args))
    except ApiError as err:
        raise SmokeTestFailed(
            f"the API server refused the probe pod: {err.message}. A message naming pods.mutate.gpu-scheduler "
            f"means the webhook is unreachable or its certificate is not trusted ({TROUBLESHOOTING})"
        ) from None
    try:
        check_admission(created, args.namespace)
        log.info("admitted with a CUDA_VISIBLE_DEVICES entry in every container")
        seconds, bound = wait_bound(kube, args.namespace, name, node, args.timeout)
        check_seen(bound, args.devices)
    finally:
        try:
            kube.call("DELETE", f"{pods}/{quote(name, safe='')}", body={"gracePeriodSeconds": 0})
        except ApiError as err:
            if err.status != 404:
                log.warning("could not delete the probe pod %s/%s: %s", args.namespace, name, err)
    return (
        f"PASS: pod {args.namespace}/{name} was bound to {node} in {seconds:.1f} s, "
        f"every container seeing CUDA_VISIBLE_DEVICES={args.devices}"
    )


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.namespace in ("kube-system", args.release_namespace):
        return (
            f"--namespace {args.namespace}: the webhook never serves kube-system nor its release namespace, "
            "so the probe would get no CUDA_VISIBLE_DEVICES; choose another (the chart's tests.namespace)"
        )
    return None


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem:
        log.error("smoke-test: %s", problem)
        return 2
    try:
        kube = KubeClient(load_configuration(args.kubeconfig or None))
        print(smoke_test(kube, args))
    except InvalidMapError as err:
        log.error("smoke-test: --node/--devices make an invalid map: %s", "; ".join(map(str, err.errors)))
        return 2
    except SmokeTestFailed as err:
        log.error("smoke-test FAILED: %s", err)
        return 1
    except (ApiError, ConfigException) as err:
        log.error("smoke-test FAILED: %s", err)
        return 1
    return 0

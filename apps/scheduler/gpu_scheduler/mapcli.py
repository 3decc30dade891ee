"""`gpu-scheduler map validate|generate`: check a map before it reaches a cluster, or write one."""

from __future__ import annotations

import argparse
import json
import sys

from .config import DEFAULT_SCHEDULER_NAME, env, env_help, positive_int
from .placement import InvalidMapError, PlacementError, chosen_reason, parse_map_uncached, pod_index, pod_key
from .scheduling.inventory import INVENTORY_ANNOTATION
from .scheduling.map_plan import DEVICE_SPELLINGS, INDEX, UUID, NodePlan, plan_node, plan_ordinals
from .scheduling.nodes import GPU_RESOURCE, NodeInfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="map_command", required=True, metavar="{validate,generate}")
    validate = actions.add_parser(
        "validate",
        help="parse a map; print it as JSON (exit 0) or one 'line N: ...' per error on stderr (exit 1)",
        description="Parse a gpu-scheduling-map. On success print it as JSON and exit 0; "
        "otherwise print one 'line N: <message>' line per error on stderr and exit 1.",
    )
    validate.add_argument("file", nargs="?", default="-", help="file with the map's text, or - for stdin (default)")
    generate = actions.add_parser(
        "generate",
        help="write a map for the nodes of the current cluster (one index per GPU node, or per N GPUs)",
        description="Write a gpu-scheduling-map for the cluster's GPU nodes, in node-name order. A node "
        f"that publishes its GPUs ({INVENTORY_ANNOTATION}, gpu-scheduler agent) is mapped from them: its GPUs "
        "best connected first (NVLink, then one PCIe switch, then one NUMA node), each MIG device on a line of "
        "its own; another node by its nvidia.com/gpu capacity, as ordinals in order.",
    )
    generate.add_argument(
        "--gpus-per-pod",
        type=positive_int,
        default=None,
        help="GPUs per index (default: all of a node's GPUs in one index)",
    )
    generate.add_argument(
        "--devices",
        choices=DEVICE_SPELLINGS,
        default=INDEX,
        help="write GPUs by ordinal (index, default) or by UUID (uuid: only nodes that publish their GPUs)",
    )
    generate.add_argument("--kubeconfig", default=env("KUBECONFIG", ""), help=env_help("kubeconfig file", "KUBECONFIG"))
    generate.add_argument("--selector", "-l", default="", help="label selector restricting the nodes (e.g. pool=gpu)")
    generate.add_argument(
        "--from-pods",
        metavar="NAMESPACE",
        default=None,
        help="instead: pin what the bound pods of this namespace hold now, one line per pod index "
        "(GPUs the scheduler chose for count lines become pinned lines)",
    )
    generate.add_argument(
        "--pod-selector", default="", help="with --from-pods: label selector of the pods (e.g. app=train)"
    )
    generate.add_argument(
        "--scheduler-name",
        default=env("SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME),
        help=env_help("with --from-pods: schedulerName of the pods", "SCHEDULER_NAME"),
    )


def _validate(path: str) -> int:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        print(f"cannot read {path}: {err}", file=sys.stderr)
        return 2
    try:
        parsed = parse_map_uncached(text)
    except InvalidMapError as err:
        for line_error in err.errors:
            print(line_error, file=sys.stderr)
        if err.total > len(err.errors):
            print(f"... and {err.total - len(err.errors)} more errors", file=sys.stderr)
        return 1
    print(json.dumps(parsed.to_json(), indent=2))
    return 0


def render_generated_map(nodes: list[NodeInfo], gpus_per_pod: int | None = None, devices: str = INDEX) -> str:
    """Lines for each GPU node, sorted by name; what was left out is said in comments."""
    with_gpus = sorted((n for n in nodes if n.gpus > 0 or n.inventory is not None), key=lambda n: n.name)
    lines = [f"# generated from {len(with_gpus)} nodes with {GPU_RESOURCE} capacity or a published inventory"]
    without = sorted(n.name for n in nodes if n not in with_gpus)
    if without:
        lines.append(f"# skipped, no GPUs: {', '.join(without)}")
    index = 0
    for node in with_gpus:
        plan = _plan(node, gpus_per_pod, devices)
        lines.extend(f"# {node.name}: {note}" for note in plan.notes)
        for group in plan.groups:
            lines.append(f"{index}={node.name}:{','.join(group)}")
            index += 1
    return "\n".join(lines) + "\n"


def _plan(node: NodeInfo, gpus_per_pod: int | None, devices: str) -> NodePlan:
    if node.inventory is not None:
        return plan_node(node.inventory, gpus_per_pod, devices)
    why = node.inventory_problem or "it publishes no inventory (gpu-scheduler agent)"
    if devices == UUID:
        return NodePlan((), (f"skipped: GPU UUIDs unknown, {why}",))
    plan = plan_ordinals(node.gpus, gpus_per_pod)
    if gpus_per_pod:
        return NodePlan(plan.groups, (f"ordinals in order, links unknown: {why}", *plan.notes))
    return plan


def _generate(kubeconfig: str, selector: str, gpus_per_pod: int | None, devices: str) -> int:
    # Imported here: `map validate` must not need the Kubernetes client.
    from .kube.client import ClusterUnreadable, get_once

    try:
        query = {"labelSelector": selector} if selector else None
        (node_list,) = get_once(kubeconfig or None, ("/api/v1/nodes", query))
    except ClusterUnreadable as err:
        print(f"gpu-scheduler map generate: {err}", file=sys.stderr)
        return 1
    # The API's JSON as the scheduler reads it (camelCase keys, strings for times).
    infos = [NodeInfo.from_api(n) for n in node_list["items"]]
    if not any(n.gpus > 0 or n.inventory is not None for n in infos):
        print(f"no node has {GPU_RESOURCE} capacity or a published inventory; nothing to map", file=sys.stderr)
        return 1
    sys.stdout.write(render_generated_map(infos, gpus_per_pod, devices))
    return 0


class PinError(ValueError):
    """The pods cannot be written as one map (two with one index)."""


def render_pinned_map(pods: list[dict], scheduler_name: str, namespace: str) -> str:
    """A pinned line per bound, unfinished pod of the scheduler: its index, its node and the
    devices its containers see (kube.objects.held_devices). A pod without an index (placed by
    a `*` line) or without devices is named in a comment; two pods with one index raise."""
    from .kube.objects import held_devices

    lines: dict[int, tuple[str, str]] = {}
    skipped: list[str] = []
    chosen = 0
    for pod in sorted(pods, key=pod_key):
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if spec.get("schedulerName") != scheduler_name or not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            continue
        key = pod_key(pod)
        devices = held_devices(pod)
        try:
            index = pod_index(pod)
        except PlacementError:
            skipped.append(f"# skipped {key}: no index (placed by a `*` line); a pinned line needs one")
            continue
        if not devices:
            skipped.append(f"# skipped {key}: its containers see no GPU")
            continue
        if index in lines:
            raise PinError(
                f"pods {lines[index][0]} and {key} both have index {index}: choose one workload with --pod-selector"
            )
        lines[index] = (key, f"{index}={spec['nodeName']}:{','.join(devices)}")
        chosen += chosen_reason(pod) is not None
    header = [f"# pinned from {len(lines)} bound pods of namespace {namespace} ({chosen} placed by count lines)"]
    text = "\n".join([*header, *skipped, *(line for _, (_, line) in sorted(lines.items()))]) + "\n"
    if lines:
        parse_map_uncached(text)  # what it writes, it must read: InvalidMapError otherwise
    return text


def _pin(kubeconfig: str, namespace: str, selector: str, scheduler_name: str) -> int:
    from .kube.client import ClusterUnreadable, get_once

    try:
        query = {"labelSelector": selector} if selector else None
        (pod_list,) = get_once(kubeconfig or None, (f"/api/v1/namespaces/{namespace}/pods", query))
    except ClusterUnreadable as err:
        print(f"gpu-scheduler map generate: {err}", file=sys.stderr)
        return 1
    try:
        text = render_pinned_map(pod_list["items"], scheduler_name, namespace)
    except PinError as err:
        print(f"gpu-scheduler map generate: {err}", file=sys.stderr)
        return 1
    if all(line.startswith("#") for line in text.splitlines()):
        print(f"no bound pod of {scheduler_name} in namespace {namespace} has an index and GPUs", file=sys.stderr)
        sys.stderr.write(text)
        return 1
    sys.stdout.write(text)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.map_command == "validate":
        return _validate(args.file)
    if args.from_pods:
        return _pin(args.kubeconfig, args.from_pods, args.pod_selector, args.scheduler_name)
    return _generate(args.kubeconfig, args.selector, args.gpus_per_pod, args.devices)

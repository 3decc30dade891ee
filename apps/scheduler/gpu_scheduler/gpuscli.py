"""`gpu-scheduler gpus`: who holds which GPU, per node, from the cluster's state.

Read-only: one list of nodes and one of the pods on nodes, as the scheduler's
caches read them. A pod whose GPUs the scheduler chose (a map line that asks for a count)
is shown as such, with the reason its placement annotation gives. A pod holds the devices its containers were given at
creation (kube.objects.held_devices), resolved to a node's physical GPUs by
the node's published inventory exactly as the scheduler's ledger resolves
them (Inventory.resolve). A node that publishes no inventory shows its held
devices as written, since nothing can say which GPU they are.

The GPUs reserved for waiting gangs (docs/gangs.md) are shown too: a list of the
scheduler's pending pods, and the scheduler's own state and reservation rule run
over the same lists, so the command says what the scheduler decides (under
--gpu-sharing=deny, the only policy that reserves), with nothing to ask of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field

from .config import DEFAULT_SCHEDULER_NAME, env, env_help
from .scheduling.gangs import GANG_TIMEOUT_SECONDS
from .scheduling.inventory import Inventory
from .scheduling.nodes import DEFAULT_ALIAS_LABEL, NodeInfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG", ""), help=env_help("kubeconfig file", "KUBECONFIG"))
    parser.add_argument(
        "--scheduler-name",
        default=env("SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME),
        help=env_help("schedulerName whose pods hold GPUs", "SCHEDULER_NAME"),
    )
    parser.add_argument("--node", action="append", default=[], help="only this node (repeatable)")
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text", help="output format")
    parser.add_argument(
        "--gang-timeout-seconds",
        type=float,
        default=float(env("GANG_TIMEOUT_SECONDS", f"{GANG_TIMEOUT_SECONDS:g}")),
        help=env_help(
            "the scheduler's --gang-timeout-seconds: a gang waiting longer reserves nothing", "GANG_TIMEOUT_SECONDS"
        ),
    )


@dataclass(frozen=True, slots=True)
class Holder:
    pod: str  # namespace/name
    device: str  # as its map wrote it
    since: str  # when it was bound (its PodScheduled condition), RFC 3339
    chosen: str | None = None  # why the scheduler chose them (a count line); None: pinned by its map


@dataclass(slots=True)
class Slot:
    """One GPU, or one MIG device of it, and the pods holding it."""

    index: int | None
    uuid: str
    model: str = ""
    profile: str = ""  # a MIG device's, e.g. "3g.20gb"
    holders: list[Holder] = field(default_factory=list)
    mig: list[Slot] = field(default_factory=list)
    reserved_for: str | None = None  # the waiting gang it is reserved for

    def document(self) -> dict:
        out: dict = {"uuid": self.uuid, "heldBy": [_holder_document(h) for h in self.holders]}
        out["reservedFor"] = self.reserved_for
        if self.index is not None:
            out = {"index": self.index, **out, "model": self.model, "mig": [m.document() for m in self.mig]}
        else:
            out["profile"] = self.profile
        return out


@dataclass(slots=True)
class NodeGpus:
    name: str
    inventory: bool  # whether the node publishes one
    gpus: list[Slot] = field(default_factory=list)
    # devices held on the node that no GPU of its inventory is (or, without one, every held device)
    unresolved: dict[str, list[Holder]] = field(default_factory=dict)
    problem: str | None = None  # why its published inventory could not be read
    # devices reserved for a waiting gang that no GPU of its inventory is (without one: all), as written
    reserved: dict[str, str] = field(default_factory=dict)

    def document(self) -> dict:
        return {
            "name": self.name,
            "inventoryPublished": self.inventory,
            "inventoryProblem": self.problem,
            "gpus": [g.document() for g in self.gpus],
            "unresolved": [
                {"device": device, "heldBy": [_holder_document(h) for h in holders]}
                for device, holders in sorted(self.unresolved.items())
            ],
            "reserved": [{"device": device, "gang": gang} for device, gang in sorted(self.reserved.items())],
        }


def _holder_document(holder: Holder) -> dict:
    return {"pod": holder.pod, "device": holder.device, "since": holder.since, "chosen": holder.chosen}


def node_gpus(
    node: NodeInfo, holdings: list[tuple[str, tuple[str, ...], str, str | None]], reserved: dict[str, str] | None = None
) -> NodeGpus:
    """One node's GPUs and holders; `holdings` are (pod key, devices, since, why the scheduler
    chose them or None) of the pods on it, `reserved` device -> the gang it is reserved for."""
    report = NodeGpus(node.name, node.inventory is not None, problem=node.inventory_problem)
    inventory: Inventory | None = node.inventory
    slots: dict[str, Slot] = {}
    if inventory is not None:
        for gpu in sorted(inventory.gpus, key=lambda g: g.index):
            slot = Slot(gpu.index, gpu.uuid, gpu.model)
            slots[gpu.uuid.lower()] = slot
            for mig in gpu.mig_devices:
                migslot = Slot(None, mig.uuid, profile=mig.profile)
                slot.mig.append(migslot)
                slots[mig.uuid.lower()] = migslot
            report.gpus.append(slot)
    for pod, devices, since, chosen in holdings:
        for device in devices:
            ref = inventory.resolve(device) if inventory is not None else None
            holder = Holder(pod, device, since, chosen)
            if ref is None:
                report.unresolved.setdefault(device, []).append(holder)
            else:
                slots[(ref.mig_uuid or ref.gpu_uuid).lower()].holders.append(holder)
    for device, gang in (reserved or {}).items():
        ref = inventory.resolve(device) if inventory is not None else None
        if ref is None:
            report.reserved[device] = gang
        else:
            slots[(ref.mig_uuid or ref.gpu_uuid).lower()].reserved_for = gang
    return report


def _since(pod: dict) -> str:
    status = pod.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return condition.get("lastTransitionTime") or ""
    return status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp") or ""


def reservations(
    nodes: list[dict], pods: list[dict], pending: list[dict], scheduler_name: str, now: float, gang_timeout: float
) -> dict[str, dict[str, str]]:
    """node -> device (as a map wrote it) -> the gang it is reserved for: the scheduler's own
    cache, gang views and reservation rule (scheduling.gangs) run over these lists."""
    from .kube.objects import assigned_pod, node_info, pod_uid, trim_pending_pod
    from .scheduling import ClusterCache
    from .scheduling.gangs import PendingGangs, gang_views, reserved_devices
    from .scheduling.gangs import reservations as reserve

    cache = ClusterCache(DEFAULT_ALIAS_LABEL)
    for node in nodes:
        cache.upsert_node(node_info(node))
    for pod in pods:
        cache.add_pod(assigned_pod(pod, scheduler_name))
    gangs = PendingGangs()
    for pod in pending:
        if (pod.get("spec") or {}).get("schedulerName") == scheduler_name:
            gangs.upsert_pod(pod_uid(pod), trim_pending_pod(pod))
    views = gang_views(gangs, cache)
    return reserved_devices(views, cache, reserve(views, cache, now, gang_timeout))


def report(
    nodes: list[dict],
    pods: list[dict],
    scheduler_name: str,
    pending: list[dict] = (),
    now: float = 0.0,
    gang_timeout: float = GANG_TIMEOUT_SECONDS,
) -> list[NodeGpus]:
    """Every node's GPUs, their holders and the gangs they are reserved for, from API objects
    (nodes, pods on nodes, pending pods)."""
    from .kube.objects import assigned_pod
    from .placement import chosen_reason

    on_node: dict[str, list[tuple[str, tuple[str, ...], str, str | None]]] = {}
    for pod in pods:
        held = assigned_pod(pod, scheduler_name)
        if held.devices:
            on_node.setdefault(held.node, []).append((held.key, held.devices, _since(pod), chosen_reason(pod)))
    infos = sorted((NodeInfo.from_api(n, DEFAULT_ALIAS_LABEL) for n in nodes), key=lambda n: n.name)
    # Nodes with nothing of GPUs (a control plane, CPU pools) would only be noise.
    reserved = reservations(nodes, pods, list(pending), scheduler_name, now, gang_timeout) if pending else {}
    shown = [i for i in infos if i.inventory or i.inventory_problem or i.gpus_advertised or i.name in on_node]
    return [node_gpus(info, sorted(on_node.get(info.name, [])), reserved.get(info.name)) for info in shown]


def render_text(reports: list[NodeGpus]) -> str:
    rows = [("NODE", "GPU", "UUID", "MODEL / MIG", "HELD BY", "SINCE", "PLACED")]
    for node in reports:
        if node.problem:
            rows.append((node.name, "-", "-", f"inventory unreadable: {node.problem}", "", "", ""))
        elif not node.inventory:
            rows.append((node.name, "-", "-", "no inventory published (gpu-scheduler agent)", "", "", ""))
        for gpu in node.gpus:
            rows.extend(_slot_rows(node.name, str(gpu.index), gpu.uuid, gpu.model, gpu.holders, gpu.reserved_for))
            for mig in gpu.mig:
                what = f"MIG {mig.profile}"
                rows.extend(_slot_rows(node.name, f"{gpu.index}/mig", mig.uuid, what, mig.holders, mig.reserved_for))
        for device, holders in sorted(node.unresolved.items()):
            what = "not in its inventory" if node.inventory else "as written"
            rows.extend(_slot_rows(node.name, device, "-", what, holders, node.reserved.get(device)))
        for device, gang in sorted(node.reserved.items()):
            if device not in node.unresolved:
                what = "not in its inventory" if node.inventory else "as written"
                rows.extend(_slot_rows(node.name, device, "-", what, [], gang))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _slot_rows(
    node: str, gpu: str, uuid: str, what: str, holders: list[Holder], reserved_for: str | None = None
) -> list[tuple[str, ...]]:
    if not holders:
        free = f"(reserved for gang {reserved_for})" if reserved_for else "(free)"
        return [(node, gpu, uuid, what, free, "", "")]
    return [(node, gpu, uuid, what, h.pod, h.since, "chosen" if h.chosen else "map") for h in holders]


def run(args: argparse.Namespace) -> int:
    from .kube.client import ClusterUnreadable, get_once
    from .kube.objects import ASSIGNED_SELECTOR

    pending_selector = f"spec.schedulerName={args.scheduler_name},spec.nodeName=,status.phase=Pending"
    try:
        node_list, pod_list, pending_list = get_once(
            args.kubeconfig or None,
            ("/api/v1/nodes", None),
            ("/api/v1/pods", {"fieldSelector": ASSIGNED_SELECTOR}),
            ("/api/v1/pods", {"fieldSelector": pending_selector}),
        )
    except ClusterUnreadable as err:
        print(f"gpu-scheduler gpus: {err}", file=sys.stderr)
        return 1
    nodes, pods = node_list["items"], pod_list["items"]
    if args.node:
        missing = sorted(set(args.node) - {n["metadata"]["name"] for n in nodes})
        if missing:
            print(f"gpu-scheduler gpus: no node {', '.join(missing)} in the cluster", file=sys.stderr)
            return 1
        nodes = [n for n in nodes if n["metadata"]["name"] in args.node]
    reports = report(nodes, pods, args.scheduler_name, pending_list["items"], time.time(), args.gang_timeout_seconds)
    if args.output == "json":
        print(json.dumps({"nodes": [r.document() for r in reports]}, indent=2))
    else:
        print(render_text(reports))
    return 0

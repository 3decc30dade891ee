"""Volumes for WaitForFirstConsumer claims, provisioned on the map's node: what the scheduler
asks for and what the pod waits for, on plain data.

kube-scheduler, once a node passes every filter, writes `volume.kubernetes.io/selected-node:
<node>` on each unbound claim of a WaitForFirstConsumer class (PreBind), and binds the pod only
once the provisioner has made a volume there and the PV controller has bound the claim to it.
So does gpu-scheduler, with the node the map names: a pod whose claims are unbound waits (a
retryable refusal, woken when a claim changes), the scheduler writes the annotation on the
claims that have none (outside its lock: scheduler/schedule_one.py), and the pod is bound by a
later attempt, once every claim is bound and its volume admits the node. Everything it needs
to resume is in the claims: after a restart or a change of leader, a claim annotated for the
pod's node is waited for, not asked again.

What kube-scheduler does and this does not yet: choose a matching static volume for such a
claim (a class without a provisioner, `kubernetes.io/no-provisioner`, as local volumes have),
check CSIStorageCapacity, and hold the pod's resources on the node while it waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .volumes import SELECTED_NODE_ANNOTATION, Claim, PodClaims, StorageClass

NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAITING_FOR_VOLUMES = "WaitingForVolumes"  # the Event's reason while the pod waits (Normal)
# kube-scheduler's VolumeBinding waits this long (its bindTimeoutSeconds default) for the
# claims of a pod before it gives up the attempt; here the pod keeps waiting, and says so.
VOLUME_BINDING_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class SelectNode:
    """One claim to annotate with the node its volume is to be provisioned for."""

    namespace: str
    name: str
    resource_version: str  # the version read: a claim changed since is left alone
    node: str


@dataclass(frozen=True, slots=True)
class Provisioning:
    """For a pod whose other checks pass: its claims to annotate, or why they cannot be
    provisioned on the node."""

    select: tuple[SelectNode, ...] = ()
    waiting: tuple[Claim, ...] = ()  # every unbound claim the pod waits for
    refusal: str | None = None


def plan(claims: PodClaims, node: str, classes: Mapping[str, StorageClass]) -> Provisioning:
    select: list[SelectNode] = []
    for claim in claims.delayed:
        cls = classes.get(claim.storage_class)
        if cls is None or not cls.provisioner or cls.provisioner == NO_PROVISIONER:
            return Provisioning(
                refusal=(
                    f'persistentvolumeclaim "{claim.name}" of StorageClass {claim.storage_class} has no provisioner '
                    "to make its volume on the map's node, and gpu-scheduler does not yet choose an existing "
                    "PersistentVolume for a WaitForFirstConsumer claim: bind the claim to a volume of the node"
                )
            )
        if claim.selected_node and claim.selected_node != node:
            return Provisioning(
                refusal=(
                    f'persistentvolumeclaim "{claim.name}" is being provisioned for node {claim.selected_node} '
                    f"({SELECTED_NODE_ANNOTATION}), not this one"
                )
            )
        if not claim.selected_node:
            select.append(SelectNode(claim.namespace, claim.name, claim.resource_version, node))
    return Provisioning(tuple(select), claims.delayed)


def waiting_message(waiting: tuple[Claim, ...], node: str) -> str:
    named = ", ".join(f"{c.name} (StorageClass {c.storage_class})" for c in waiting)
    return (
        f"waiting for the provisioner to bind persistentvolumeclaims {named} to volumes on node {node} "
        f"({SELECTED_NODE_ANNOTATION}); the pod is bound once they are"
    )


def timed_out_message(waiting: str, seconds: float) -> str:
    """A wait past the timeout: said as a failure, and the wait goes on (a provisioner may be
    slow, or retrying; one that gave up says why in the claim's Events)."""
    return (
        f"timed out after {seconds:.0f}s {waiting.removesuffix('; the pod is bound once they are')}; still "
        "waiting: the claims' Events (kubectl describe persistentvolumeclaim) say what their provisioner did"
    )

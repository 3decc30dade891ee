"""Volumes for WaitForFirstConsumer claims on the map's node: an existing volume chosen for a
claim, or one provisioned for it; what the scheduler writes and what the pod waits for, on
plain data.

kube-scheduler's VolumeBinding, once a node passes every filter, first looks for an existing
volume (PV) for each unbound claim of a WaitForFirstConsumer class: one offered to claims
(no claimRef, or a claimRef naming this claim, phase Available), of the claim's class, access
modes, volume mode and selector, at least as large as the request, not being deleted, whose
node affinity admits the node; the smallest that fits, each volume to one claim. In PreBind it
writes the chosen volume's claimRef (and `pv.kubernetes.io/bound-by-controller`), and the PV
controller then binds the claim to it. A claim no volume matches is provisioned: the
scheduler writes `volume.kubernetes.io/selected-node: <node>` on it and the provisioner makes
a volume there. A claim that matches no volume and whose class has no provisioner
(`kubernetes.io/no-provisioner`, as local volumes have) cannot go to the node: "node(s)
didn't find available persistent volumes to bind".

So does gpu-scheduler, with the node the map names: a pod whose claims are unbound waits (a
retryable refusal, woken when a claim, or a volume of their class, changes), the scheduler
writes the claimRefs and the annotations (outside its lock: scheduler/schedule_one.py), and
the pod is bound by a later attempt, once every claim is bound and its volume admits the
node. A volume chosen is reserved for its claim in the cache (scheduling.volumes.VolumeCache)
until its write has answered, so that no other claim is given it; the write carries the
volume's resourceVersion, so that a volume changed since is left alone and read again.
Everything it needs to resume is in the claims and volumes: after a restart or a change of
leader, a volume whose claimRef names the claim, and a claim annotated for the pod's node,
are waited for, not asked again.

What kube-scheduler does and this does not yet: check CSIStorageCapacity, and hold the pod's
resources on the node while it waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .nodes import NodeInfo
from .selectors import selector_matches
from .volumes import SELECTED_NODE_ANNOTATION, Claim, PodClaims, Volume, VolumeCache

NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAITING_FOR_VOLUMES = "WaitingForVolumes"  # the Event's reason while the pod waits (Normal)
# kube-scheduler 1.37's words when no volume matches and none can be provisioned
# (volumebinding's ErrReasonBindConflict); the unit tests compare them with what it said.
NO_MATCHING_VOLUME = "node(s) didn't find available persistent volumes to bind"
BOUND_BY_CONTROLLER_ANNOTATION = "pv.kubernetes.io/bound-by-controller"
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
class BindVolume:
    """One existing volume to give a claim: its claimRef to write."""

    volume: str
    volume_resource_version: str  # the version read: a volume changed since is left alone
    namespace: str  # the claim's
    name: str
    uid: str
    claim_resource_version: str

    @property
    def claim_key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Provisioning:
    """For a pod whose other checks pass: the writes its claims need (a claimRef on a chosen
    volume, a node on a claim to provision), or why they cannot have volumes on the node."""

    writes: tuple[SelectNode | BindVolume, ...] = ()
    waiting: tuple[Claim, ...] = ()  # every unbound claim the pod waits for
    chosen: tuple[tuple[str, str], ...] = ()  # (claim key, volume name) of each claim given a volume
    refusal: str | None = None  # ours, whole
    no_volume: bool = False  # kube-scheduler's Filter refusal: NO_MATCHING_VOLUME


def matching_volume(
    claim: Claim, volumes: Iterable[Volume], node: NodeInfo, taken: Callable[[str], bool]
) -> Volume | None:
    """kube's FindMatchingVolume on a node: a volume whose claimRef already names the claim
    (if it fits and admits the node; else none), or else the smallest volume offered to claims
    that fits the claim and admits the node, of those `taken` does not exclude (ties: by name)."""
    best: Volume | None = None
    for volume in volumes:
        if volume.deleting or volume.volume_mode != claim.volume_mode or volume.capacity < claim.request:
            continue
        if volume.claim_ref is not None:
            if volume.claim_ref.names(claim):
                return volume if volume.admits(node) else None
            continue
        if (
            taken(volume.name)
            or volume.storage_class != claim.storage_class
            or not volume.available
            or (claim.selector is not None and not selector_matches(claim.selector, volume.labels))
            or not set(claim.access_modes) <= set(volume.access_modes)
            or not volume.admits(node)
        ):
            continue
        if best is None or (volume.capacity, volume.name) < (best.capacity, best.name):
            best = volume
    return best


def plan(claims: PodClaims, node: NodeInfo, cache: VolumeCache) -> Provisioning:
    """The volumes of the pod's unbound WaitForFirstConsumer claims on the node. A volume
    reserved for another claim (chosen for another pod, its write not answered yet) is not
    offered."""
    writes: list[SelectNode | BindVolume] = []
    given: list[tuple[str, str]] = []
    taken: set[str] = set()
    # As kube-scheduler: the claims by increasing request, so that the smallest gets the smallest fit.
    for claim in sorted(claims.delayed, key=lambda c: c.request):
        volume = matching_volume(
            claim,
            cache.volumes.values(),
            node,
            lambda name, key=claim.key: name in taken or cache.reserved_for_another(name, key),
        )
        if volume is not None:
            taken.add(volume.name)
            given.append((claim.key, volume.name))
            if volume.claim_ref is None:
                writes.append(
                    BindVolume(
                        volume.name,
                        volume.resource_version,
                        claim.namespace,
                        claim.name,
                        claim.uid,
                        claim.resource_version,
                    )
                )
            continue
        cls = cache.classes.get(claim.storage_class)
        if cls is None or not cls.provisioner or cls.provisioner == NO_PROVISIONER:
            return Provisioning(waiting=claims.delayed, no_volume=True)
        if claim.selected_node and claim.selected_node != node.name:
            return Provisioning(
                refusal=(
                    f'persistentvolumeclaim "{claim.name}" is being provisioned for node {claim.selected_node} '
                    f"({SELECTED_NODE_ANNOTATION}), not this one"
                )
            )
        if not claim.selected_node:
            writes.append(SelectNode(claim.namespace, claim.name, claim.resource_version, node.name))
    return Provisioning(tuple(writes), claims.delayed, tuple(given))


def waiting_message(planned: Provisioning, node: str) -> str:
    volumes = dict(planned.chosen)
    parts = []
    provisioned = [c for c in planned.waiting if c.key not in volumes]
    if provisioned:
        named = ", ".join(f"{c.name} (StorageClass {c.storage_class})" for c in provisioned)
        parts.append(
            f"the provisioner to bind persistentvolumeclaims {named} to volumes on node {node} "
            f"({SELECTED_NODE_ANNOTATION})"
        )
    static = [c for c in planned.waiting if c.key in volumes]
    if static:
        named = ", ".join(f"{c.name} to persistentvolume {volumes[c.key]}" for c in static)
        parts.append(f"the PV controller to bind persistentvolumeclaims {named}, chosen on node {node}")
    return f"waiting for {' and '.join(parts)}; the pod is bound once they are"


def timed_out_message(waiting: str, seconds: float) -> str:
    """A wait past the timeout: said as a failure, and the wait goes on (a provisioner may be
    slow, or retrying; one that gave up says why in the claim's Events)."""
    return (
        f"timed out after {seconds:.0f}s {waiting.removesuffix('; the pod is bound once they are')}; still "
        "waiting: the claims' Events (kubectl describe persistentvolumeclaim) say what their provisioner did"
    )

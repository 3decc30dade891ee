"""API objects cut down to what scheduling reads, so 10,000 cached pods stay small.

A pod from the API carries its whole spec and status (often kilobytes, plus
kubectl's last-applied annotation). The scheduler's one pod watch hands each
pod over as a WatchedPod (watched_pod), which carries one of the first two
shapes or neither. Three shapes are kept:

- a pending pod of this scheduler (trim_pending_pod): API JSON with only what
  decide() reads (identity, map annotation, labels, owner kinds, node
  selector, required node and pod (anti-)affinity, DoNotSchedule topology
  spread constraints, tolerations, each container's name and
  CUDA_VISIBLE_DEVICES, the PodScheduled condition), plus "requests": its
  resource requests, parsed;
- a pod on a node, of any scheduler (assigned_pod): a scheduling.AssignedPod,
  its node, requests, labels and required anti-affinity terms and, for this
  scheduler's pods, the GPUs it holds (read from its containers' environment,
  which cannot change, never from the placement annotation, which can);
- a node (node_info): a scheduling.NodeInfo with its allocatable parsed;
- a claim, a volume, a StorageClass (claim_info, volume_info, storage_class_info):
  what VolumeBinding, VolumeRestrictions and NodeVolumeLimits read of them (scheduling.volumes);
- a CSINode (csi_node_info): its drivers' volume counts (scheduling.volume_limits).

A pending pod also keeps "hostPorts" (scheduling.ports.host_ports), its volumes that use
claims and the names of its resourceClaims; a pod on a node keeps its host ports and the keys
of the claims its volumes use. A pod without any of these carries nothing more for them.

Quantities ("500m", "1Gi") are parsed here with the Kubernetes client's own
parser, into canonical integers: cpu in millicores, everything else in units
(bytes for memory and storage), rounded up as kube-scheduler rounds.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from kubernetes.utils import parse_quantity

from gpu_scheduler.placement import (
    BIND_ANNOTATIONS,
    CUDA_ENV,
    FROM_BIND,
    GIVEN_CONTAINER_LISTS,
    MAP_ANNOTATION,
    PlacementError,
    annotation_bytes,
    bind_env_entry,
    container_devices,
    given_value,
    pinned_placement_for,
)
from gpu_scheduler.placement.environment import Given
from gpu_scheduler.placement.gang import GANG_ANNOTATION, GANG_LABEL_ANNOTATION, GANG_TOPOLOGY_ANNOTATION, gang_of
from gpu_scheduler.placement.pod_index import JOB_INDEX_KEY, pod_index
from gpu_scheduler.scheduling import (
    CPU,
    DEFAULT_ALIAS_LABEL,
    AssignedPod,
    Claim,
    NodeInfo,
    Requests,
    Volume,
    host_ports,
    requests_of,
)
from gpu_scheduler.scheduling.selectors import pod_terms, required_terms
from gpu_scheduler.scheduling.spread import hard_constraints
from gpu_scheduler.scheduling.volume_limits import CSINode
from gpu_scheduler.scheduling.volumes import (
    BETA_CLASS_ANNOTATION,
    BIND_COMPLETED_ANNOTATION,
    FILESYSTEM,
    SELECTED_NODE_ANNOTATION,
    ClaimRef,
    StorageClass,
    claim_key,
    claim_names,
)

KEPT_ANNOTATIONS = (MAP_ANNOTATION, JOB_INDEX_KEY, GANG_ANNOTATION, GANG_LABEL_ANNOTATION, GANG_TOPOLOGY_ANNOTATION)
TERMINAL_PHASES = ("Succeeded", "Failed")
POD_SCHEDULED = "PodScheduled"
_TOLERATION_FIELDS = ("key", "operator", "value", "effect")


def _kept(mapping: dict | None, keys: tuple[str, ...]) -> dict | None:
    if not mapping:
        return None
    # Every pod of a StatefulSet carries the same map text, which can be
    # long: interning stores it once instead of once per pod, and makes the
    # parser's cache lookups hash it once.
    kept = {k: sys.intern(mapping[k]) for k in keys if isinstance(mapping.get(k), str)}
    return kept or None


# -- quantities and requests ------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def canonical_amount(resource: str, quantity: object) -> int:
    """A quantity as the integer the filters compare: millicores for cpu, units (rounded up)
    for the rest. A quantity the parser refuses counts as 0 (the API server validates them).
    Cached: the same few quantities ("100m", "1Gi") come with every pod of a workload, and the
    parser's Decimal arithmetic is the costliest part of reading a pod."""
    try:
        value = parse_quantity(quantity)
    except (ValueError, TypeError, ArithmeticError):
        return 0
    return math.ceil(value * 1000) if resource == CPU else math.ceil(value)


def _amounts(resources: Mapping | None) -> dict[str, int]:
    if not isinstance(resources, Mapping):
        return {}
    return {name: canonical_amount(name, q) if isinstance(q, str | int | float) else 0 for name, q in resources.items()}


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def _max(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > total.get(name, 0):
            total[name] = amount


def _container_requests(container: Mapping) -> dict[str, int]:
    return _amounts(((container.get("resources") or {}).get("requests")) if isinstance(container, Mapping) else None)


def pod_requests(pod: Mapping) -> Requests:
    """What the pod requests of its node, computed as kube-scheduler does: the sum of its
    containers; at least what any init container needs while it runs (with the sidecars
    started before it); sidecars (restartPolicy Always) for the pod's whole life; pod-level
    requests (spec.resources) where given; plus the RuntimeClass overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        _add(total, _container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        needs = _container_requests(container)
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            _add(total, needs)
            _add(sidecars, needs)
            running = dict(sidecars)
        else:
            running = dict(needs)
            _add(running, sidecars)
        _max(init_peak, running)
    _max(total, init_peak)
    pod_level = _amounts((spec.get("resources") or {}).get("requests"))
    total.update({name: amount for name, amount in pod_level.items() if name in ("cpu", "memory")})
    _add(total, _amounts(spec.get("overhead")))
    return requests_of(total)


# -- pods -------------------------------------------------------------------------------------------


def _required_affinity(spec: Mapping) -> dict | None:
    """spec.affinity cut to its required terms (node, pod and pod anti-affinity): the
    preferred ones only score nodes, and the map has chosen the node."""
    kept = {}
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        required = ((spec.get("affinity") or {}).get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        if required:
            kept[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    return kept or None


def _labels(metadata: Mapping) -> dict[str, str]:
    """Every label, interned: any may be named by another pod's selector (a pod affinity
    term, a topology spread constraint), and a workload's pods share most of them."""
    return {
        sys.intern(k): sys.intern(v)
        for k, v in (metadata.get("labels") or {}).items()
        if isinstance(k, str) and isinstance(v, str)
    }


def _tolerations(items: Iterable | None) -> list[dict] | None:
    kept = [
        {f: t[f] for f in _TOLERATION_FIELDS if t.get(f) is not None} for t in items or () if isinstance(t, Mapping)
    ]
    return kept or None


@functools.lru_cache(maxsize=4096)
def _given_devices_only(containers: tuple[tuple[str, Given], ...]) -> tuple[dict, ...]:
    """Containers cut to their name and CUDA_VISIBLE_DEVICES entry, as API JSON that
    placement.container_devices reads. Cached, so that pods with the same ones (a
    StatefulSet's pods differ in a few device lists) share one copy; never modified."""
    return tuple(_given_only(name, value) for name, value in containers)


def _given_only(name: str, value: Given) -> dict:
    if value is FROM_BIND:
        return {"name": name, "env": [bind_env_entry()]}
    return {"name": name, "env": [{"name": CUDA_ENV, "value": value}]} if value is not None else {"name": name}


def _given_devices(spec: Mapping) -> dict:
    """The container lists of a pod spec as _given_devices_only cuts them."""
    kept = {}
    for field in GIVEN_CONTAINER_LISTS:
        containers = tuple(
            (sys.intern(str(c.get("name") or "")), given_value(c))
            for c in spec.get(field) or ()
            if isinstance(c, Mapping)
        )
        if containers:
            kept[field] = _given_devices_only(containers)
    return kept


def _claim_volumes(spec: Mapping) -> list[dict] | None:
    """The pod's volumes that use a claim (persistentVolumeClaim, or a generic ephemeral
    volume, whose claim is named after the pod and the volume), cut to what names the claim."""
    kept = []
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, Mapping):
            continue
        name = volume.get("name")
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, Mapping):
            kept.append({"name": name, "persistentVolumeClaim": {"claimName": claim.get("claimName")}})
        elif volume.get("ephemeral") is not None:
            kept.append({"name": name, "ephemeral": {}})
    return kept or None


def trim_pending_pod(pod: dict) -> dict:
    """A pending pod of this scheduler as API JSON with only what decide() reads, plus
    "requests" (pod_requests)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    trimmed_meta = {
        "namespace": metadata.get("namespace"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }
    annotations = _kept(metadata.get("annotations"), KEPT_ANNOTATIONS)
    if annotations:
        trimmed_meta["annotations"] = annotations
    # Every label: besides the index and a bare gang pod's gang label (placement.gang), other
    # pods' anti-affinity terms and the pod's own selectors may name any of them.
    labels = _labels(metadata)
    if labels:
        trimmed_meta["labels"] = labels
    if metadata.get("creationTimestamp"):
        # Gangs are served oldest first and time out from their newest pod's creation.
        trimmed_meta["creationTimestamp"] = metadata["creationTimestamp"]
    owners = [
        # The owner's name: a gang is the pods of one owner.
        {"kind": ref.get("kind"), "name": ref.get("name"), "controller": ref.get("controller")}
        for ref in metadata.get("ownerReferences") or ()
        if ref.get("controller")
    ]
    if owners:
        trimmed_meta["ownerReferences"] = owners
    if metadata.get("deletionTimestamp"):
        trimmed_meta["deletionTimestamp"] = metadata["deletionTimestamp"]
    trimmed_spec: dict = {"schedulerName": spec.get("schedulerName"), "nodeName": spec.get("nodeName") or ""}
    if spec.get("nodeSelector"):
        trimmed_spec["nodeSelector"] = spec["nodeSelector"]
    affinity = _required_affinity(spec)
    if affinity:
        trimmed_spec["affinity"] = affinity
    spread = hard_constraints(spec)
    if spread:
        trimmed_spec["topologySpreadConstraints"] = spread
    tolerations = _tolerations(spec.get("tolerations"))
    if tolerations:
        trimmed_spec["tolerations"] = tolerations
    trimmed_spec.update(_given_devices(spec))
    volumes = _claim_volumes(spec)
    if volumes:
        trimmed_spec["volumes"] = volumes
    if spec.get("resourceClaims"):
        trimmed_spec["resourceClaims"] = [
            {"name": c.get("name")} if isinstance(c, Mapping) else {} for c in spec["resourceClaims"]
        ]
    trimmed_status: dict = {"phase": status.get("phase")}
    scheduled = [c for c in status.get("conditions") or () if c.get("type") == POD_SCHEDULED]
    if scheduled:
        # lastTransitionTime: since when it has waited (a pinned line's failover reckons from it).
        kept = ("type", "status", "reason", "message", "lastTransitionTime")
        trimmed_status["conditions"] = [{k: scheduled[0].get(k) for k in kept if k in scheduled[0]}]
    trimmed = {"metadata": trimmed_meta, "spec": trimmed_spec, "status": trimmed_status, "requests": pod_requests(pod)}
    # What its annotations weigh without the two the Binding sets: with them the pod must still
    # fit Kubernetes' limit (placement.annotations; decide() checks).
    others = {k: v for k, v in (metadata.get("annotations") or {}).items() if k not in BIND_ANNOTATIONS}
    trimmed["annotationBytes"] = annotation_bytes(others)
    ports = host_ports(spec)
    if ports:
        trimmed["hostPorts"] = ports
    return trimmed


def pod_scheduled_condition(pod: Mapping) -> dict | None:
    """The PodScheduled condition a trimmed pending pod carries, or None."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == POD_SCHEDULED:
            return condition
    return None


def held_devices(pod: Mapping) -> tuple[str, ...]:
    """The GPUs a bound pod of this scheduler holds: every device any of its containers sees
    (placement.container_devices: a literal value, or the devices annotation its Binding wrote),
    else, when no container has CUDA_VISIBLE_DEVICES (a pod bound before its containers had to
    have it), what its map says; () when neither can be read. Never the placement annotation,
    which is informational."""
    given = container_devices(pod)
    if not given.none_given:
        return given.devices()
    try:
        entry = pinned_placement_for(pod)
    except PlacementError:
        return ()
    return entry.devices if entry is not None else ()


# The pods that take a node's resources: on a node and not finished (kube-scheduler's selector).
ASSIGNED_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# The scheduler's one pod watch: every pod not finished, on a node or not, as kube-scheduler's
# pod informer watches them. One watch instead of one for the pending pods and one for the pods
# on nodes: a pod's binding then comes as one MODIFIED event, where the two watches sent a
# DELETED (it left the pending selector) and an ADDED, each decoded in full (make bench: 14.2
# pod watch events per pod across the cluster against kube-scheduler's 13.1). A pod that
# finishes leaves the selector, which the watch reports as DELETED.
UNFINISHED_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


def assigned_pod(pod: dict, scheduler_name: str) -> AssignedPod:
    """A pod on a node, of any scheduler: what it takes of the node; for this scheduler's
    pods, also the GPUs it holds."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ours = spec.get("schedulerName") == scheduler_name
    gang, index = _gang_member(pod) if ours else (None, None)
    claims, ephemeral = claim_keys(pod) if _uses_claims(spec) else ((), ())
    return AssignedPod(
        uid=metadata.get("uid") or "",
        key=f"{metadata.get('namespace')}/{metadata.get('name')}",
        node=spec.get("nodeName") or "",
        requests=pod_requests(pod),
        devices=held_devices(pod) if ours else (),
        gang=gang,
        index=index,
        host_ports=host_ports(spec),
        claims=claims,
        ephemeral_claims=ephemeral,
        labels=_labels(metadata),
        anti_affinity=pod_terms(required_terms(spec, "podAntiAffinity"), metadata.get("namespace") or ""),
        terminating=bool(metadata.get("deletionTimestamp")),
    )


def _uses_claims(spec: Mapping) -> bool:
    """Whether a volume of the pod uses a claim: most pods have only their service account's
    projected volume, and every pod on a node comes through here at each of its events."""
    for volume in spec.get("volumes") or ():
        if isinstance(volume, Mapping) and ("persistentVolumeClaim" in volume or "ephemeral" in volume):
            return True
    return False


def claim_keys(pod: Mapping) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The keys of the claims a pod's persistentVolumeClaim volumes use, and of those its generic
    ephemeral volumes use (of an API pod, or a pending pod as trim_pending_pod keeps it);
    interned, as every pod of a workload names the same few."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    names = claim_names(pod)
    claims = tuple(sys.intern(claim_key(namespace, n)) for n, ephemeral in names if not ephemeral)
    ephemeral = tuple(sys.intern(claim_key(namespace, n)) for n, ephemeral in names if ephemeral)
    return claims, ephemeral


def _gang_member(pod: dict) -> tuple[str | None, int | None]:
    """(gang, index) of a bound pod of ours in a gang, else (None, None): which of its gang's
    lines it has taken, so that a gang partly bound (a failed binding, a crash) is finished
    by binding only the rest."""
    try:
        gang = gang_of(pod)
        return (gang, pod_index(pod)) if gang is not None else (None, None)
    except PlacementError:
        return None, None


@dataclass(frozen=True, slots=True)
class WatchedPod:
    """A pod as the one pod watch hands it over: on a node (assigned, of any scheduler), or
    pending for this scheduler in its scope (pending, trimmed as trim_pending_pod), or neither
    (pending for another scheduler, or in a namespace out of this one's scope)."""

    uid: str
    key: str  # namespace/name
    ours: bool  # this scheduler's pod, in its scope: its Events and conditions are ours to forget
    pending: dict | None = None
    assigned: AssignedPod | None = None


def watched_pod(pod: dict, scheduler_name: str, namespace: str | None = None) -> WatchedPod:
    """The pod as the scheduler's one pod watch needs it (namespace: the scope of the pending
    pods it schedules, None for every namespace; pods on nodes count in every namespace)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    uid = metadata.get("uid") or ""
    key = f"{metadata.get('namespace')}/{metadata.get('name')}"
    ours = spec.get("schedulerName") == scheduler_name and namespace in (None, metadata.get("namespace"))
    if spec.get("nodeName"):
        return WatchedPod(uid, key, ours, assigned=assigned_pod(pod, scheduler_name))
    return WatchedPod(uid, key, ours, pending=trim_pending_pod(pod) if ours else None)


def pod_uid(pod: Mapping) -> str:
    return (pod.get("metadata") or {}).get("uid") or ""


def is_terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


# -- nodes -------------------------------------------------------------------------------------------


def node_info(node: dict, alias_label: str = DEFAULT_ALIAS_LABEL) -> NodeInfo:
    """The node as scheduling reads it, allocatable parsed."""
    info = NodeInfo.from_api(node, alias_label)
    return replace(info, allocatable=_amounts((node.get("status") or {}).get("allocatable")))


def node_name(node: dict) -> str:
    return (node.get("metadata") or {}).get("name") or ""


# -- claims, volumes, StorageClasses -----------------------------------------------------------------


def claim_info(pvc: dict) -> Claim:
    """A PersistentVolumeClaim as VolumeBinding reads it."""
    metadata = pvc.get("metadata") or {}
    spec = pvc.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    # kube's GetPersistentVolumeClaimClass: the beta annotation first, then the field.
    storage_class = annotations.get(BETA_CLASS_ANNOTATION, spec.get("storageClassName") or "")
    owner = next((r.get("uid") for r in metadata.get("ownerReferences") or () if r.get("controller")), None)
    return Claim(
        namespace=metadata.get("namespace") or "",
        name=metadata.get("name") or "",
        volume_name=spec.get("volumeName") or "",
        bind_completed=BIND_COMPLETED_ANNOTATION in annotations,
        storage_class=str(storage_class or ""),
        lost=(pvc.get("status") or {}).get("phase") == "Lost",
        deleting=bool(metadata.get("deletionTimestamp")),
        controller_uid=owner,
        selected_node=str(annotations.get(SELECTED_NODE_ANNOTATION) or ""),
        resource_version=metadata.get("resourceVersion") or "",
        uid=metadata.get("uid") or "",
        access_modes=_strings(spec.get("accessModes")),
        request=_storage(((spec.get("resources") or {}).get("requests") or {}).get("storage")),
        volume_mode=spec.get("volumeMode") or FILESYSTEM,
        selector=spec.get("selector") if isinstance(spec.get("selector"), Mapping) else None,
    )


def volume_info(pv: dict) -> Volume:
    """A PersistentVolume as VolumeBinding and NodeVolumeLimits read it: its name, required node
    affinity and CSI driver and handle, and what a claim is matched on."""
    metadata = pv.get("metadata") or {}
    spec = pv.get("spec") or {}
    required = ((spec.get("nodeAffinity") or {}).get("required")) or None
    terms = None if required is None else tuple(t for t in required.get("nodeSelectorTerms") or () if t)
    source = spec.get("csi")
    csi = None
    if isinstance(source, Mapping):
        csi = (str(source.get("driver") or ""), str(source.get("volumeHandle") or ""))
    ref = spec.get("claimRef")
    claim_ref = None
    if isinstance(ref, Mapping):
        claim_ref = ClaimRef(str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
    # kube's GetPersistentVolumeClass: the beta annotation first, then the field.
    storage_class = (metadata.get("annotations") or {}).get(BETA_CLASS_ANNOTATION, spec.get("storageClassName") or "")
    return Volume(
        name=metadata.get("name") or "",
        node_terms=terms,
        csi=csi,
        storage_class=str(storage_class or ""),
        capacity=_storage((spec.get("capacity") or {}).get("storage")),
        access_modes=_strings(spec.get("accessModes")),
        volume_mode=spec.get("volumeMode") or FILESYSTEM,
        claim_ref=claim_ref,
        available=(pv.get("status") or {}).get("phase") == "Available",
        deleting=bool(metadata.get("deletionTimestamp")),
        labels=metadata.get("labels") or {},
        resource_version=metadata.get("resourceVersion") or "",
    )


def _strings(values: object) -> tuple[str, ...]:
    return tuple(str(v) for v in values) if isinstance(values, list | tuple) else ()


def _storage(quantity: object) -> int:
    """A storage quantity in bytes (0 when absent)."""
    return canonical_amount("storage", quantity) if isinstance(quantity, str | int | float) else 0


def storage_class_info(sc: dict) -> StorageClass:
    """A StorageClass's binding mode (the API server defaults it to Immediate) and provisioner."""
    return StorageClass(
        name=(sc.get("metadata") or {}).get("name") or "",
        mode=sc.get("volumeBindingMode") or "Immediate",
        provisioner=sc.get("provisioner") or "",
    )


def csi_node_info(csi_node: dict) -> CSINode:
    """A CSINode as NodeVolumeLimits reads it: the drivers that give a volume count, and the count."""
    limits = []
    for driver in (csi_node.get("spec") or {}).get("drivers") or ():
        count = ((driver.get("allocatable") or {}).get("count")) if isinstance(driver, Mapping) else None
        if isinstance(count, int) and not isinstance(count, bool):
            limits.append((str(driver.get("name") or ""), count))
    return CSINode(name=(csi_node.get("metadata") or {}).get("name") or "", limits=tuple(limits))

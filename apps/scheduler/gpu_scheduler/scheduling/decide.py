"""One scheduling decision: resolve the map's node, filter it (scheduling.filters) and
check the GPU ledger under the sharing policy.

A pod with DRA claims (spec.resourceClaims) is refused until its claims are supported: binding
it would start it without the devices its claims ask for.

The devices the pod gets are its map line's: the Binding writes them in the pod's devices
annotation, which containers read through the downward API (placement.environment). A pod
is refused, since nothing can change a container's env, when a container has no entry (it
would see every GPU), or a literal value that is not its map line's; and when the Binding's
annotations would push the pod's past Kubernetes' limit (placement.annotations).

Pure: the caller passes the pod (as kube.objects.trim_pending_pod leaves it) and
the cache, acts on the Decision (assume, bind, events, retry).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from ..placement import (
    CUDA_ENV,
    DEVICES_FIELD_PATH,
    ContainerDevices,
    GpuRequest,
    MapEntry,
    PlacementError,
    annotation_bytes,
    bind_annotations,
    container_devices,
    overflow_message,
    placement_for,
    pod_key,
)
from .cache import ClusterCache
from .dynamic import Choice, choose, no_fit_message
from .filters import (
    NODE_READY,
    PODS_ON_NODES,
    FilterFailure,
    pre_filter_failure,
    run_filters,
    unavailable_message,
)
from .gangs import reserved_for_others
from .ledger import GpuLedger, SharingPolicy
from .nodes import NodeInfo, NodeResolutionError
from .provisioning import NO_MATCHING_VOLUME, WAITING_FOR_VOLUMES, BindVolume, SelectNode, plan, waiting_message
from .volume_limits import exceeds_volume_limits
from .volume_restrictions import read_write_once_pod_conflicts
from .volumes import NO_CLAIMS, VOLUME_BINDING, PodClaims, claim_key, claim_names, pre_filter


@dataclass(frozen=True, slots=True)
class BindWarning:
    """Something the user should know about a pod that is bound anyway; one Warning Event each."""

    reason: str  # the Event's reason, CamelCase like kube-scheduler's
    message: str


GPU_SHARED = "GPUShared"
# How long a pod pinned to a node that is gone or NotReady waits before its line's fallback
# (`|*[<selector>]`) is used (the scheduler's --failover-after-seconds).
FAILOVER_AFTER_SECONDS = 300.0
# What a pod whose line asks for a count waits on besides PODS_ON_NODES (GPUs freed): any
# node that comes or changes (scheduler/state.py wakes it). Not a node name: it has spaces.
ANY_NODE_CHANGE = "any node"
DYNAMIC_RESOURCES = "DynamicResources"


class Code(enum.Enum):
    """What a decision says, named as kube-scheduler's framework Status codes are."""

    SUCCESS = "Success"  # bind the pod to its node
    # Not now: time or a change to a node may let it on, so it is retried with backoff and
    # woken by a change of the nodes it waits on.
    UNSCHEDULABLE = "Unschedulable"
    # Only a change to the pod itself can help (a broken map, no index): not retried until then.
    UNRESOLVABLE = "UnschedulableAndUnresolvable"


@dataclass(frozen=True, slots=True)
class Decision:
    pod_key: str
    entry: MapEntry | None
    node: str | None  # the resolved node's real name
    code: Code
    reason: str | None = None  # why not, for a FailedScheduling event
    warnings: tuple[BindWarning, ...] = ()  # bind, but tell the user
    plugin: str | None = None  # the filter that refused the node, if one did
    event: str = "FailedScheduling"  # the Event's reason when refused (a gang's: GangWaiting, ...)
    # What else may let it on when it changes, beyond its own node: nodes (a gang's), claims and
    # StorageClasses (scheduling.volumes.claim_wait_key, class_wait_key)
    waiting_on: tuple[str, ...] = ()
    # What to write before the pod waits for its claims' volumes (scheduling.provisioning): the
    # claimRef of each volume chosen for a claim (reserved for it in the cache until written),
    # the node on each claim to provision
    provision: tuple[SelectNode | BindVolume, ...] = ()
    # Why the scheduler chose this node and these GPUs, for a line that asked it to
    # (scheduling.dynamic): said in the Scheduled Event and the placement annotation.
    chosen: str | None = None

    @property
    def bind(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def retryable(self) -> bool:
        """Time or a node change can help (False: only a change to the pod can)."""
        return self.code is Code.UNSCHEDULABLE

    @property
    def index(self) -> int | None:
        return self.entry.index if self.entry else None

    @property
    def devices(self) -> str | None:
        return self.entry.cuda_visible_devices if self.entry else None


def _sharing_message(conflicts: list[tuple[str, str]], node: str) -> str:
    held = ", ".join(f"GPU {device} by {other}" for other, device in conflicts)
    return f"on node {node}, {held}"


# A message names this many pods holding devices written another way at most;
# an Event keeps 1 KiB of it.
MAX_SPELLINGS_NAMED = 5


def _spelling_message(key: str, spellings: list[tuple[str, str, str]], node: str) -> str:
    named = [f"{key} asks for {asked}, {other} holds {held}" for other, held, asked in spellings[:MAX_SPELLINGS_NAMED]]
    if len(spellings) > MAX_SPELLINGS_NAMED:
        named.append(f"and {len(spellings) - MAX_SPELLINGS_NAMED} more")
    return (
        f"on node {node}, {'; '.join(named)}: written differently, they may be one GPU (a GPU's ordinal, its UUID "
        "and a MIG device on it are), and the scheduler has no inventory of the node's GPUs to tell; write each "
        "node's devices one way in every map"
    )


def _refused_for_good(key: str, entry: MapEntry | None, reason: str, plugin: str | None = None) -> Decision:
    """A refusal only a change to the pod itself can lift: it is not retried until then."""
    return Decision(key, entry, None, code=Code.UNRESOLVABLE, reason=reason, plugin=plugin)


def _containers_disagree(key: str, entry: MapEntry, given: ContainerDevices) -> Decision:
    # Container env is immutable: no retry can make these containers agree.
    return _refused_for_good(
        key,
        entry,
        (
            f"the pod's containers were created with different {CUDA_ENV} ({given.describe()}); "
            "gpu-scheduler writes no literal values, so it did not set these, and the scheduler cannot "
            "tell which GPUs the pod would use: give every container and init container the entry "
            f'`{{name: {CUDA_ENV}, valueFrom: {{fieldRef: {{fieldPath: "{DEVICES_FIELD_PATH}"}}}}}}` '
            "instead and create the pod again"
        ),
    )


def _map_changed(key: str, entry: MapEntry, injected: str) -> Decision:
    # Container env is immutable: binding would hand the pod other GPUs than the map says.
    return _refused_for_good(
        key,
        entry,
        (
            f"the map now gives index {entry.index} the devices {entry.cuda_visible_devices}, but the pod's "
            f"containers were created with {CUDA_ENV}={injected}; delete the pod so that it is recreated"
        ),
    )


def _resource_claims(key: str, entry: MapEntry | None, claims: list) -> Decision:
    # spec.resourceClaims cannot change: only a new pod without them can be placed.
    names = ", ".join(str(c.get("name")) if isinstance(c, Mapping) else "?" for c in claims)
    return _refused_for_good(
        key,
        entry,
        (
            f"the pod has resourceClaims ({names}): gpu-scheduler does not support DynamicResourceAllocation "
            "claims yet, and binding the pod would start it without the devices they ask for; remove them, or "
            "let kube-scheduler place the pod"
        ),
        plugin=DYNAMIC_RESOURCES,
    )


def _devices_not_given(key: str, entry: MapEntry, given: ContainerDevices) -> Decision:
    # Fails closed: such a container would see every GPU of the node. Its env cannot change,
    # so no retry helps.
    missing = ", ".join(given.missing[:8]) + (f" and {len(given.missing) - 8} more" if len(given.missing) > 8 else "")
    return _refused_for_good(
        key,
        entry,
        (
            f"container(s) {missing} of the pod have no {CUDA_ENV} entry, so they would see every GPU of the "
            f"node, not only the map's {entry.cuda_visible_devices}; give every container and init container "
            f'the entry `{{name: {CUDA_ENV}, valueFrom: {{fieldRef: {{fieldPath: "{DEVICES_FIELD_PATH}"}}}}}}` '
            "(the chart's admission adds it to pods created while it runs) and create the pod again"
        ),
    )


def _annotations_too_long(pod: Mapping, entry: MapEntry, chosen: str | None = None) -> str | None:
    """Why the Binding's annotations would push the pod past Kubernetes' limit, or None. The
    API server stores a Binding's annotations unchecked, and then refuses every update of the
    pod, the kubelet's status included: such a pod would never start (placement.annotations).
    Only shorter annotations, a change to the pod, can lift it."""
    added = bind_annotations(entry, chosen)
    return overflow_message(pod.get("annotationBytes", 0) + annotation_bytes(added), added, "its Binding would add")


def _sharing(
    key: str,
    uid: str,
    entry: MapEntry,
    node: str,
    ledger: GpuLedger,
    policy: SharingPolicy,
    reserved: list[tuple[str, str]] = (),
) -> tuple[str | None, list[BindWarning]]:
    """Under deny, why the pod cannot have its GPUs yet (None when it can); under warn, the
    GPUShared warnings; under allow, nothing. A device written another way than one a live pod
    holds on the node counts as held, since they may be one GPU (ledger.spelling_conflicts);
    under deny so does one reserved for a waiting gang the pod is not in (scheduling.gangs)."""
    if policy is SharingPolicy.ALLOW:
        return None, []
    conflicts = ledger.conflicts(uid, node, entry.devices)
    spellings = ledger.spelling_conflicts(uid, node, entry.devices)
    if policy is SharingPolicy.DENY:
        held = [f"GPUs already held ({_sharing_message(conflicts, node)})"] if conflicts else []
        if spellings:
            held.append(f"GPUs maybe held ({_spelling_message(key, spellings, node)})")
        if reserved:
            gangs = ", ".join(f"GPU {device} for gang {gang}" for device, gang in reserved)
            held.append(f"GPUs reserved (on node {node}, {gangs}, which waits for all its pods to fit)")
        return (f"{'; '.join(held)} and --gpu-sharing=deny" if held else None), []
    warnings = []
    if conflicts:
        warnings.append(BindWarning(GPU_SHARED, f"sharing GPUs with running pods: {_sharing_message(conflicts, node)}"))
    if spellings:
        message = f"maybe sharing GPUs with running pods: {_spelling_message(key, spellings, node)}"
        warnings.append(BindWarning(GPU_SHARED, message))
    return None, warnings


def decide(
    pod: Mapping,
    cache: ClusterCache,
    policy: SharingPolicy = SharingPolicy.WARN,
    reserved: Mapping[tuple[str, str], str] | None = None,
    gang: str | None = None,
    pinned: Callable[[], Mapping[tuple[str, str], str]] | None = None,
    within: Callable[[NodeInfo], bool] | None = None,
    failover: Failover | None = None,
) -> Decision:
    """`reserved`: the GPUs held for waiting gangs (gangs.reservations), which under deny only
    `gang`'s own pods may take. `pinned()`: (node, GPU key) -> the pending pod whose pinned line
    names it, which a line asking for a count never takes (pinned pods keep priority); asked
    only for count lines and fallbacks, so a pinned pod's decision pays nothing for it.
    `within`: for a line asking for a count, only the nodes it accepts (a gang's topology
    domain). `failover`: when a pinned line with a fallback may go to it."""
    key = pod_key(pod)
    uid = (pod.get("metadata") or {}).get("uid") or ""
    try:
        entry = placement_for(pod)
    except PlacementError as err:
        return Decision(key, None, None, code=Code.UNRESOLVABLE, reason=str(err))
    if isinstance(entry, GpuRequest):
        return _decide_request(pod, key, uid, entry, cache, _kept(reserved, gang, pinned), within)

    given = container_devices(pod)
    if given.missing:
        return _devices_not_given(key, entry, given)
    if given.disagree:
        return _containers_disagree(key, entry, given)
    injected = given.agreed
    if injected is not None and injected != entry.cuda_visible_devices:
        return _map_changed(key, entry, injected)

    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return _resource_claims(key, entry, spec["resourceClaims"])
    too_long = _annotations_too_long(pod, entry)
    if too_long is not None:
        return _refused_for_good(key, entry, too_long)

    try:
        node = cache.nodes.resolve(entry.node)
    except NodeResolutionError as err:
        fallen = _fall_back(pod, key, uid, entry, given, cache, _kept(reserved, gang, pinned), failover, str(err))
        return fallen or Decision(key, entry, None, code=Code.UNSCHEDULABLE, reason=_waits(str(err), entry, failover))
    claims = pre_filter(pod, cache.volumes)
    failure = pre_filter_failure(claims) or _node_failure(pod, uid, claims, node, entry.devices, cache)
    if failure is not None and failure.plugin == NODE_READY:
        gone = f"node {node.name} is not Ready ({node.not_ready_message})"
        fallen = _fall_back(pod, key, uid, entry, given, cache, _kept(reserved, gang, pinned), failover, gone)
        if fallen is not None:
            return fallen
    if failure is not None:
        return Decision(
            key,
            entry,
            node.name,
            code=Code.UNSCHEDULABLE,
            reason=_waits(unavailable_message(failure, node.name, entry.line), entry, failover, failure.plugin),
            plugin=failure.plugin,
            waiting_on=failure.wait_keys,
        )

    taken = reserved_for_others(reserved, cache, node.name, entry.devices, gang) if reserved else []
    refusal, shared = _sharing(key, uid, entry, node.name, cache.ledger, policy, taken)
    if refusal is not None:
        return Decision(key, entry, node.name, code=Code.UNSCHEDULABLE, reason=refusal)
    if claims.delayed:
        return _provisioning(key, entry, node, claims, cache)
    return Decision(key, entry, node.name, code=Code.SUCCESS, warnings=tuple(shared))


def _kept(
    reserved: Mapping[tuple[str, str], str] | None,
    gang: str | None,
    pinned: Callable[[], Mapping[tuple[str, str], str]] | None,
) -> dict[tuple[str, str], str]:
    """What a count line may not take: the GPUs pinned pods wait for and those reserved for
    gangs other than its own."""
    others = {where: owner for where, owner in (reserved or {}).items() if owner != gang}
    return {**(pinned() if pinned is not None else {}), **others}


def unschedulable_since(pod: Mapping) -> float | None:
    """When (Unix time) the pod's PodScheduled condition became False, or None: the time it
    has waited, read from the pod, so that a restarted scheduler or a new leader reckons alike."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            stamp = condition.get("lastTransitionTime")
            if condition.get("status") != "False" or not isinstance(stamp, str):
                return None
            try:
                return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return None


@dataclass(frozen=True, slots=True)
class Failover:
    """When a pinned line's fallback (`|*[<selector>]`) may be used: its node gone or NotReady,
    and the pod unschedulable for `after` seconds (since its PodScheduled=False condition,
    which the scheduler wrote at its first refusal), at Unix time `now`."""

    now: float
    after: float

    def due(self, pod: Mapping) -> bool:
        since = unschedulable_since(pod)
        return since is not None and self.now - since >= self.after


def _waits(reason: str, entry: MapEntry, failover: Failover | None, plugin: str | None = NODE_READY) -> str:
    """The refusal of a pod whose node is gone or NotReady, with when its fallback comes in."""
    if entry.fallback is None or failover is None or plugin != NODE_READY:
        return reason
    return (
        f"{reason}; line {entry.line} falls back to {entry.fallback.describe()} once the pod has waited "
        f"{failover.after:g} s (--failover-after-seconds)"
    )


def _fall_back(
    pod: Mapping,
    key: str,
    uid: str,
    entry: MapEntry,
    given: ContainerDevices,
    cache: ClusterCache,
    kept: Mapping[tuple[str, str], str],
    failover: Failover | None,
    why: str,
) -> Decision | None:
    """The decision for the line's fallback, when it has one and it is due; else None (the pod
    waits for its node). Containers with their own literal devices cannot take GPUs chosen at
    bind: such a pod waits."""
    if entry.fallback is None or failover is None or given.literals or not failover.due(pod):
        return None
    decision = _decide_request(pod, key, uid, entry.fallback, cache, kept)
    if decision.chosen is None:
        return replace(decision, reason=f"{why}, and its fallback cannot take it: {decision.reason}")
    said = f"{why} and the pod waited {failover.after:g} s, so line {entry.line}'s fallback: {decision.chosen}"
    return replace(decision, chosen=said)


def _node_failure(
    pod: Mapping, uid: str, claims: PodClaims, node: NodeInfo, devices: tuple[str, ...], cache: ClusterCache
) -> FilterFailure | None:
    """The first of kube-scheduler's filters (and ours) that refuses the node for the pod."""
    # Nothing for a pod without claims, nor for one VolumeBinding's PreFilter refused.
    checked = claims is not NO_CLAIMS and claims.refusal is None
    in_use, over_limits = _volume_checks(pod, uid, node.name, cache) if checked else ((), False)
    return run_filters(
        pod.get("spec") or {},
        pod.get("requests") or (),
        devices,
        node,
        cache.usage(node.name),
        ports=pod.get("hostPorts") or (),
        used_ports=cache.used_ports(node.name),
        claims=claims,
        claims_in_use=in_use,
        over_volume_limits=over_limits,
        pod_meta=pod.get("metadata"),
        cluster=cache,
    )


def _decide_request(
    pod: Mapping,
    key: str,
    uid: str,
    request: GpuRequest,
    cache: ClusterCache,
    kept: Mapping[tuple[str, str], str],
    within: Callable[[NodeInfo], bool] | None = None,
) -> Decision:
    """A line that asks for a count: the scheduler chooses the node and the GPUs
    (scheduling.dynamic). Every container must read the bind's devices: a literal value could
    not be the GPUs chosen later."""
    given = container_devices(pod)
    if given.missing or given.literals:
        return _request_not_read(key, request, given)
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return _resource_claims(key, None, spec["resourceClaims"])
    claims = pre_filter(pod, cache.volumes)
    refusal = pre_filter_failure(claims)
    if refusal is not None:
        why = f"0/{len(cache.nodes)} nodes are available: {', '.join(refusal.reasons)}."
        return Decision(
            key, None, None, Code.UNSCHEDULABLE, reason=why, plugin=refusal.plugin, waiting_on=refusal.wait_keys
        )

    def passes(node: NodeInfo, devices: tuple[str, ...]) -> str | None:
        failure = _node_failure(pod, uid, claims, node, devices, cache)
        return None if failure is None else failure.reasons[0]

    # A claim whose volume is being provisioned for a node (an earlier attempt chose it) keeps
    # the pod there: choosing again elsewhere would strand the volume.
    provisioned_for = {claim.selected_node for claim in claims.delayed if claim.selected_node}

    def accepts(node: NodeInfo) -> bool:
        return (within is None or within(node)) and (not provisioned_for or node.name in provisioned_for)

    def nodes() -> Iterable[NodeInfo]:
        return (n for n in cache.nodes.all() if accepts(n))

    def packed() -> Iterable[NodeInfo]:
        return (n for n in cache.free_index.in_packing_order(request.count) if accepts(n))

    # GPUs kept for others are not in the index's counts: then every node is looked at.
    indexed = {} if kept else {"packed": packed, "top": cache.free_index.best_link()}
    choice = choose(request, nodes, uid, cache.ledger, kept, passes, **indexed)
    if not isinstance(choice, Choice):
        reasons = choice
        return Decision(
            key,
            None,
            None,
            Code.UNSCHEDULABLE,
            reason=no_fit_message(request, reasons, len(cache.nodes)),
            waiting_on=(PODS_ON_NODES, ANY_NODE_CHANGE, *claims.wait_keys),
        )
    entry = choice.entry
    too_long = _annotations_too_long(pod, entry, choice.why)
    if too_long is not None:
        return _refused_for_good(key, entry, too_long)
    node = cache.nodes.get(entry.node)
    if claims.delayed and node is not None:
        return replace(_provisioning(key, entry, node, claims, cache), chosen=choice.why)
    return Decision(key, entry, entry.node, code=Code.SUCCESS, chosen=choice.why)


def _request_not_read(key: str, request: GpuRequest, given: ContainerDevices) -> Decision:
    # Fails closed, and a container's env cannot change: no retry helps.
    return Decision(
        key,
        None,
        None,
        Code.UNRESOLVABLE,
        reason=(
            f"line {request.line} of the map asks the scheduler to choose {request.describe()}, so every "
            f"container must read the GPUs the bind gives it, and these do not ({given.describe()}); give every "
            f"container and init container the entry `{{name: {CUDA_ENV}, valueFrom: {{fieldRef: {{fieldPath: "
            f'"{DEVICES_FIELD_PATH}"}}}}}}` and no value of its own, and create the pod again'
        ),
    )


def _volume_checks(pod: Mapping, uid: str, node: str, cache: ClusterCache) -> tuple[tuple[str, ...], bool]:
    """For a pod with claims: its ReadWriteOncePod claims another pod uses (VolumeRestrictions),
    and whether its CSI volumes would exceed the node's counts (NodeVolumeLimits)."""
    in_use = read_write_once_pod_conflicts(pod, cache.volumes, lambda key: cache.claim_used_by_others(key, uid))
    csi_node = cache.csi_nodes.get(node)
    if csi_node is None:
        return in_use, False
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    keys = [claim_key(namespace, name) for name, _ in claim_names(pod)]
    return in_use, exceeds_volume_limits(keys, cache.node_claims(node), csi_node, cache.volumes)


def _provisioning(key: str, entry: MapEntry, node: NodeInfo, claims: PodClaims, cache: ClusterCache) -> Decision:
    """The node can take the pod, but WaitForFirstConsumer claims of it are unbound: each gets
    an existing volume of the node, or one provisioned there, first. Only now, every other check
    passed, are they chosen, as kube-scheduler chooses them in PreBind."""
    planned = plan(claims, node, cache.volumes)
    if planned.no_volume:
        failure = FilterFailure(VOLUME_BINDING, (NO_MATCHING_VOLUME,))
        return Decision(
            key,
            entry,
            node.name,
            Code.UNSCHEDULABLE,
            reason=unavailable_message(failure, node.name, entry.line),
            plugin=VOLUME_BINDING,
            waiting_on=claims.wait_keys,
        )
    if planned.refusal is not None:
        why = f"{planned.refusal}. The map (line {entry.line}) pins the pod to node {node.name}."
        return Decision(
            key, entry, node.name, Code.UNSCHEDULABLE, reason=why, plugin=VOLUME_BINDING, waiting_on=claims.wait_keys
        )
    return Decision(
        key,
        entry,
        node.name,
        Code.UNSCHEDULABLE,
        reason=waiting_message(planned, node.name),
        plugin=VOLUME_BINDING,
        event=WAITING_FOR_VOLUMES,
        waiting_on=claims.wait_keys,
        provision=planned.writes,
    )

"""kube-scheduler's VolumeBinding for the claims that are bound or should be, on plain data.

A pod's `persistentVolumeClaim` volumes, and its generic ephemeral volumes (the claim
`<pod>-<volume>` that the ephemeral volume controller creates, owned by the pod), are looked
up in a cache of claims, volumes (PVs) and StorageClasses fed by watches. As kube-scheduler
1.37 does (pkg/scheduler/framework/plugins/volumebinding):

- PreFilter, whatever the node: a claim that does not exist, is being deleted or has lost its
  volume, an ephemeral claim not owned by the pod, and an unbound claim of an Immediate class
  (or of no class, or of a class that does not exist) make the pod wait. A claim is bound when
  it names its volume and carries `pv.kubernetes.io/bind-completed`; one that names a volume
  without it is not bound yet, whatever its class.
- Filter, on the map's node: the volume of each bound claim must exist and its required node
  affinity must match the node's labels (only its labels: kube-scheduler matches a node made of
  them, so a term on `metadata.name` never matches).

Unbound claims of a WaitForFirstConsumer class pass the PreFilter: once every filter passes,
each gets an existing volume of the pod's node or one provisioned there
(scheduling.provisioning), and the pod is bound only once they are bound.

kube-scheduler reports these as UnschedulableAndUnresolvable and requeues the pod when a
claim, volume or class changes; here they are retryable refusals (Code.UNSCHEDULABLE) that
name what they wait on (wait_keys), so that the scheduler's state wakes the pod when that
changes. Pure: kube.objects trims the API objects into these shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .affinity import term_matches
from .nodes import NodeInfo

VOLUME_BINDING = "VolumeBinding"
BIND_COMPLETED_ANNOTATION = "pv.kubernetes.io/bind-completed"
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
FILESYSTEM = "Filesystem"  # a volumeMode left out
READ_WRITE_ONCE_POD = "ReadWriteOncePod"

# kube-scheduler 1.37's words (volumebinding/binder.go, volume_binding.go); the unit tests
# compare them with what kube-scheduler said (tests/testdata/kube_scheduler_messages.json).
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


def claim_not_found(name: str) -> str:
    return f'persistentvolumeclaim "{name}" not found'


def ephemeral_not_created(name: str) -> str:
    return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'


def claim_lost(name: str, volume: str) -> str:
    return f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume "{volume}"'


def claim_deleting(name: str) -> str:
    return f'persistentvolumeclaim "{name}" is being deleted'


def not_for_pod(namespace: str, claim: str, pod: str) -> str:
    return f"PVC {namespace}/{claim} was not created for pod {namespace}/{pod} (pod is not owner)"


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


# What a refused pod waits on, beside node names and aliases (which cannot contain "/"): the
# scheduler's queue wakes the pods waiting on a key when its claim, or its class, changes.
def claim_wait_key(key: str) -> str:
    return f"persistentvolumeclaim/{key}"


def class_wait_key(name: str) -> str:
    return f"storageclass/{name}"


@dataclass(frozen=True, slots=True)
class Claim:
    """What VolumeBinding reads of a PersistentVolumeClaim."""

    namespace: str
    name: str
    volume_name: str = ""  # spec.volumeName, "" while unbound
    bind_completed: bool = False  # the PV controller finished binding it
    storage_class: str = ""  # the beta annotation, else spec.storageClassName
    lost: bool = False  # status.phase Lost: its volume is gone
    deleting: bool = False
    controller_uid: str | None = None  # the owner with controller: true (a pod, for ephemeral claims)
    selected_node: str = ""  # volume.kubernetes.io/selected-node: the node its volume is provisioned for
    resource_version: str = ""  # the version read, so that selecting its node changes only that one
    # What a static volume must offer it (scheduling.provisioning.matching_volume)
    uid: str = ""
    access_modes: tuple[str, ...] = ()
    request: int = 0  # spec.resources.requests.storage, in bytes
    volume_mode: str = FILESYSTEM
    selector: Mapping | None = field(default=None, hash=False)  # spec.selector, None when it has none

    @property
    def key(self) -> str:
        return claim_key(self.namespace, self.name)

    @property
    def bound(self) -> bool:
        return bool(self.volume_name) and self.bind_completed

    @property
    def read_write_once_pod(self) -> bool:
        """spec.accessModes has ReadWriteOncePod (scheduling.volume_restrictions)."""
        return READ_WRITE_ONCE_POD in self.access_modes


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A volume's spec.claimRef: the claim it is bound, or being bound, to."""

    namespace: str
    name: str
    uid: str = ""  # "" on a volume pre-bound by name, before the PV controller completes it

    def names(self, claim: Claim) -> bool:
        """kube's IsVolumeBoundToClaim: the claim by namespace and name, and by uid if it has one."""
        return (self.namespace, self.name) == (claim.namespace, claim.name) and self.uid in ("", claim.uid)


@dataclass(frozen=True, slots=True)
class Volume:
    """What VolumeBinding reads of a PersistentVolume: its required node affinity, and what a
    WaitForFirstConsumer claim is matched on (scheduling.provisioning); what NodeVolumeLimits
    reads (its CSI driver and volume handle)."""

    name: str
    # spec.nodeAffinity.required.nodeSelectorTerms; None when the volume has no required affinity
    node_terms: tuple[Mapping, ...] | None = None
    csi: tuple[str, str] | None = None  # (spec.csi.driver, spec.csi.volumeHandle); None when not CSI
    storage_class: str = ""  # the beta annotation, else spec.storageClassName
    capacity: int = 0  # spec.capacity.storage, in bytes
    access_modes: tuple[str, ...] = ()
    volume_mode: str = FILESYSTEM
    claim_ref: ClaimRef | None = None
    available: bool = False  # status.phase Available: the PV controller offers it to claims
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    resource_version: str = ""  # the version read: claiming it is a write on that version only

    def admits(self, node: NodeInfo) -> bool:
        """kube's CheckNodeAffinity: some term matches the node's labels (the node's name is
        not given to it, so matchFields never match)."""
        if self.node_terms is None:
            return True
        return any(term_matches(term, node.labels, "") for term in self.node_terms)


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    mode: str = "Immediate"  # volumeBindingMode
    provisioner: str = ""


@dataclass(slots=True)
class VolumeCache:
    """Claims by namespace/name, volumes by name, StorageClasses' binding modes by name, and the
    volumes reserved for a claim while the scheduler writes their claimRef.

    A reservation is kube-scheduler's assumed volume: from the decision that chooses a volume
    for a claim (under the state's lock) until the write's answer is in the cache, no other
    claim is given it. The write's answer replaces the cached volume (volume_written); a failed
    write releases it; a newer version from the watch ends it too (that version says who has it)."""

    claims: dict[str, Claim] = field(default_factory=dict)
    volumes: dict[str, Volume] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)
    _naming: dict[str, set[str]] = field(default_factory=dict)  # volume name -> keys of the claims naming it
    # volume name -> (key of the claim it is reserved for, the volume's resourceVersion then)
    _reserved: dict[str, tuple[str, str]] = field(default_factory=dict)

    # Each change returns the wait keys of the pods it may let on ([] when nothing changed).

    def upsert_claim(self, claim: Claim) -> list[str]:
        before = self.claims.get(claim.key)
        if before == claim:
            return []
        self._unname(before)
        self.claims[claim.key] = claim
        if claim.volume_name:
            self._naming.setdefault(claim.volume_name, set()).add(claim.key)
        return [claim_wait_key(claim.key)]

    def delete_claim(self, key: str) -> list[str]:
        before = self.claims.pop(key, None)
        self._unname(before)
        return [claim_wait_key(key)] if before is not None else []

    def replace_claims(self, claims: Iterable[Claim]) -> list[str]:
        listed = {c.key: c for c in claims}
        woken = [k for key in list(self.claims) if key not in listed for k in self.delete_claim(key)]
        return woken + [k for claim in listed.values() for k in self.upsert_claim(claim)]

    def upsert_volume(self, volume: Volume) -> list[str]:
        """A volume offered to claims (no claimRef), or one that was, wakes the pods waiting on
        its class: a WaitForFirstConsumer claim of it may match it now, or no longer."""
        before = self.volumes.get(volume.name)
        if before == volume:
            return []
        self.volumes[volume.name] = volume
        reserved = self._reserved.get(volume.name)
        if reserved is not None and reserved[1] != volume.resource_version:
            del self._reserved[volume.name]
        offered = volume.claim_ref is None or (before is not None and before.claim_ref is None)
        woken = [class_wait_key(volume.storage_class)] if offered and volume.storage_class else []
        return self._claims_naming(volume.name) + woken

    def delete_volume(self, name: str) -> list[str]:
        self._reserved.pop(name, None)
        return self._claims_naming(name) if self.volumes.pop(name, None) is not None else []

    def replace_volumes(self, volumes: Iterable[Volume]) -> list[str]:
        listed = {v.name: v for v in volumes}
        woken = [k for name in list(self.volumes) if name not in listed for k in self.delete_volume(name)]
        return woken + [k for volume in listed.values() for k in self.upsert_volume(volume)]

    # -- reservations: a volume chosen for a claim, while its claimRef is written ---------------------

    def reserve(self, volume: str, claim: str) -> None:
        cached = self.volumes.get(volume)
        self._reserved[volume] = (claim, cached.resource_version if cached is not None else "")

    def reserved_for(self, volume: str, claim: str) -> bool:
        reserved = self._reserved.get(volume)
        return reserved is not None and reserved[0] == claim

    def reserved_for_another(self, volume: str, claim: str) -> bool:
        reserved = self._reserved.get(volume)
        return reserved is not None and reserved[0] != claim

    def release(self, volume: str, claim: str) -> list[str]:
        """The write did not happen (or its answer says nothing): the volume may go to any
        claim again, and the pods waiting on its class are woken."""
        if not self.reserved_for(volume, claim):
            return []
        del self._reserved[volume]
        cached = self.volumes.get(volume)
        return [class_wait_key(cached.storage_class)] if cached is not None and cached.storage_class else []

    def volume_written(self, volume: Volume) -> list[str]:
        """The claimRef was written: the volume as the API server answered replaces the cached
        one (the watch brings the same version later), which ends its reservation."""
        self._reserved.pop(volume.name, None)
        return self.upsert_volume(volume)

    def upsert_class(self, cls: StorageClass) -> list[str]:
        if self.classes.get(cls.name) == cls:
            return []
        self.classes[cls.name] = cls
        return [class_wait_key(cls.name)]

    def delete_class(self, name: str) -> list[str]:
        return [class_wait_key(name)] if self.classes.pop(name, None) is not None else []

    def replace_classes(self, classes: Iterable[StorageClass]) -> list[str]:
        listed = {c.name: c for c in classes}
        woken = [k for name in list(self.classes) if name not in listed for k in self.delete_class(name)]
        return woken + [k for cls in listed.values() for k in self.upsert_class(cls)]

    def mode_of(self, name: str) -> str | None:
        cls = self.classes.get(name)
        return cls.mode if cls is not None else None

    def reservations(self) -> dict[str, str]:
        """volume name -> the claim it is reserved for (for tests and checks)."""
        return {volume: claim for volume, (claim, _) in self._reserved.items()}

    def _claims_naming(self, volume: str) -> list[str]:
        return [claim_wait_key(key) for key in sorted(self._naming.get(volume, ()))]

    def _unname(self, claim: Claim | None) -> None:
        if claim is None or not claim.volume_name:
            return
        keys = self._naming.get(claim.volume_name)
        if keys is not None:
            keys.discard(claim.key)
            if not keys:
                del self._naming[claim.volume_name]


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The outcome of VolumeBinding's PreFilter for one pod: a refusal (why, and what it waits
    on), or the bound claims' volumes for the Filter to check against the node and the unbound
    WaitForFirstConsumer claims whose volumes are yet to be provisioned for it."""

    refusal: str | None = None
    wait_keys: tuple[str, ...] = ()  # what the pod waits on (claims and classes), refused or not
    bound: tuple[tuple[Claim, Volume | None], ...] = ()  # each bound claim and its volume (None: gone)
    delayed: tuple[Claim, ...] = ()  # unbound claims of a WaitForFirstConsumer class


NO_CLAIMS = PodClaims()


def claim_names(pod: Mapping) -> tuple[tuple[str, bool], ...]:
    """The claims the pod's volumes use, in its volumes' order: (claim name, ephemeral)."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name") or ""
    claims = []
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, Mapping):
            continue
        if isinstance(volume.get("persistentVolumeClaim"), Mapping):
            claims.append((str(volume["persistentVolumeClaim"].get("claimName") or ""), False))
        elif volume.get("ephemeral") is not None:
            claims.append((f"{name}-{volume.get('name') or ''}", True))
    return tuple(claims)


def pre_filter(pod: Mapping, cache: VolumeCache) -> PodClaims:
    """VolumeBinding's PreFilter. NO_CLAIMS, at once, for a pod without claims."""
    names = claim_names(pod)
    if not names:
        return NO_CLAIMS
    metadata = pod.get("metadata") or {}
    namespace = metadata.get("namespace") or ""
    waits = tuple(dict.fromkeys(claim_wait_key(claim_key(namespace, n)) for n, _ in names))
    # podHasPVCs: every claim exists, is neither lost nor being deleted, and an ephemeral one
    # is the pod's own; the first that is not is the reason.
    claims: list[Claim] = []
    for name, ephemeral in names:
        claim = cache.claims.get(claim_key(namespace, name))
        if claim is None:
            return PodClaims(ephemeral_not_created(name) if ephemeral else claim_not_found(name), waits)
        if claim.lost:
            return PodClaims(claim_lost(name, claim.volume_name), waits)
        if claim.deleting:
            return PodClaims(claim_deleting(name), waits)
        if ephemeral and claim.controller_uid != metadata.get("uid"):
            return PodClaims(not_for_pod(namespace, name, metadata.get("name") or ""), waits)
        claims.append(claim)
    bound: list[tuple[Claim, Volume | None]] = []
    delayed: list[Claim] = []
    immediate = False
    for claim in claims:
        if claim.bound:
            bound.append((claim, cache.volumes.get(claim.volume_name)))
        elif cache.mode_of(claim.storage_class) == WAIT_FOR_FIRST_CONSUMER and not claim.volume_name:
            delayed.append(claim)
        else:
            # No class, a class that does not exist (kube-scheduler reads it as Immediate), an
            # Immediate class, or a claim that names its volume before the binding completed.
            immediate = True
    classes = tuple(dict.fromkeys(class_wait_key(c.storage_class) for c in claims if not c.bound and c.storage_class))
    waits = (*waits, *classes)
    if immediate:
        return PodClaims(UNBOUND_IMMEDIATE, waits)
    return PodClaims(None, waits, tuple(bound), tuple(delayed))


def filter_node(claims: PodClaims, node: NodeInfo) -> list[str]:
    """VolumeBinding's Filter for bound claims: kube-scheduler's reasons, [] when the node fits.
    As kube-scheduler's checkBoundClaims, the first claim whose volume is gone or does not
    admit the node decides."""
    for _, volume in claims.bound:
        if volume is None:
            return [PV_NOT_EXIST]
        if not volume.admits(node):
            return [NODE_CONFLICT]
    return []

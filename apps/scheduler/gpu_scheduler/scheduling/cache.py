"""What the scheduler believes about the cluster: nodes, the pods on them (their requests,
host ports, GPUs and claims), the claims, volumes and StorageClasses pods may use, and the
CSI volume limits of nodes (CSINodes).

One owner for every way a node's resources or a GPU can be held or freed, in
kube-scheduler's cache words:

  assume          a pod was chosen for a node; it holds its requests and GPUs
                  there before the binding is even sent, so two pods decided
                  back to back cannot both take the last CPU or a GPU
  finish_binding  the binding was stored (its answer came back): the pod stays
                  assumed until a watch or a list shows it on a node
  binding_unknown the binding's answer was lost (no answer, a 5xx): it may be
                  stored, or still be on its way into etcd until kube-apiserver's
                  own request timeout has passed; the pod stays assumed
  confirm         the pod watch (add_pod) or a list shows the pod on
                  a node: it is no longer assumed, and holds what it really holds
  forget          an answer proves the binding was not stored (a 4xx, a 404),
                  or nothing was sent: the hold goes
  expire          a re-list started after the binding settled (its answer, or
                  the end of the apiserver's request timeout) that does not show
                  the pod has seen the pod deleted (or never bound): the hold goes

Nothing else frees an assumed hold: in particular not an event of the pod with
no node. (A watch of the pending pods alone, as the scheduler once had, sends a
pod that was just bound as a DELETED event carrying the pod as it was before,
nodeName still empty: kube-apiserver's watch cache sends the previous object
when an object leaves a field selector, and "bound" cannot be told from
"deleted unbound". The one pod watch sends the binding as a MODIFIED event with
the node: tests/testdata/watch_shapes.json, recorded from a real kube-apiserver.)

Pods are keyed by UID: a pod deleted and recreated under the same name is
another pod. Pure and single-threaded; the scheduler calls it under its lock (scheduler/state.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .free_index import FreeIndex
from .ledger import GpuLedger
from .nodes import DEFAULT_ALIAS_LABEL, NodeIndex, NodeInfo
from .ports import EMPTY_PORTS, HostPort, UsedPorts
from .resources import EMPTY_USAGE, NodeUsage, Requests
from .selectors import PodTerm
from .volume_limits import CSINode
from .volumes import VolumeCache, claim_wait_key


@dataclass(frozen=True, slots=True)
class AssignedPod:
    """What the cache keeps of a pod on a node (or assumed to be)."""

    uid: str
    key: str  # namespace/name, for messages
    node: str
    requests: Requests = ()
    devices: tuple[str, ...] = ()  # the GPUs it holds, as its map wrote them; () if none
    gang: str | None = None  # its gang (placement.gang), for pods of ours in one
    index: int | None = None  # its index in that gang's map
    host_ports: tuple[HostPort, ...] = ()  # the host ports it takes (scheduling.ports)
    claims: tuple[str, ...] = ()  # keys (namespace/name) of the claims of its persistentVolumeClaim volumes
    ephemeral_claims: tuple[str, ...] = ()  # keys of the claims of its generic ephemeral volumes
    # What InterPodAffinity and PodTopologySpread read of it: its labels, its required
    # anti-affinity terms (scheduling.selectors), whether it is being deleted.
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    anti_affinity: tuple[PodTerm, ...] = ()
    terminating: bool = False

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]


# kube-apiserver's --request-timeout default (1m): a binding whose answer was lost may still
# be written until then. A hold in doubt is kept at least this long after the answer was lost.
APISERVER_REQUEST_TIMEOUT_SECONDS = 60.0


@dataclass(slots=True)
class _Assumed:
    # monotonic: from then on a list shows the pod if its binding was stored; None while the
    # binding is in flight
    settles_at: float | None = None
    doubtful: bool = False  # the binding's answer was lost: only a list can end the doubt


class ClusterCache:
    def __init__(self, alias_label: str = DEFAULT_ALIAS_LABEL) -> None:
        self.nodes = NodeIndex(alias_label)
        self.ledger = GpuLedger()
        # The nodes with GPUs in the order count lines prefer them, kept as both change.
        self.free_index = FreeIndex(self.nodes, self.ledger)
        self.nodes.on_change = self.free_index.refresh
        self.ledger.on_node_change = self.free_index.refresh
        self._pods: dict[str, AssignedPod] = {}  # uid -> pod, assumed or confirmed
        self._assumed: dict[str, _Assumed] = {}  # uid -> binding state, for pods not yet confirmed
        self._usage: dict[str, NodeUsage] = {}  # node name -> what its pods request
        self._ports: dict[str, UsedPorts] = {}  # node name -> the host ports its pods take
        # Claims, volumes and classes: no pod holds anything there, so they live beside the pods.
        self.volumes = VolumeCache()
        self.csi_nodes: dict[str, CSINode] = {}  # node name -> its CSI drivers' volume counts, where it has some
        # Only pods with claims are indexed here: claim key -> the pods using it through a
        # persistentVolumeClaim volume (VolumeRestrictions looks in the whole cluster), node ->
        # claim key -> how many of its pods use it, ephemeral claims too (NodeVolumeLimits).
        self._claim_users: dict[str, set[str]] = {}
        self._node_claims: dict[str, dict[str, int]] = {}
        self._released: set[str] = set()  # claims the last pod using them left, for released_claims
        self._gangs: dict[str, set[str]] = {}  # gang -> uids of its pods held here (bound or assumed)
        # uid -> pod, of the pods with required anti-affinity terms: every pod's decision reads
        # them (InterPodAffinity's symmetry), so they are kept apart from the rest.
        self._anti_affinity: dict[str, AssignedPod] = {}

    # -- reading ----------------------------------------------------------------------------

    def usage(self, node: str) -> NodeUsage:
        return self._usage.get(node, EMPTY_USAGE)

    def used_ports(self, node: str) -> UsedPorts:
        return self._ports.get(node, EMPTY_PORTS)

    def pods(self) -> Iterable[AssignedPod]:
        """Every pod on a node (or assumed to be)."""
        return self._pods.values()

    def anti_affinity_pods(self) -> Iterable[AssignedPod]:
        """The pods on nodes with required anti-affinity terms."""
        return self._anti_affinity.values()

    def claim_used_by_others(self, key: str, uid: str) -> bool:
        """Whether a pod on a node other than `uid` uses the claim (persistentVolumeClaim volumes)."""
        users = self._claim_users.get(key)
        return bool(users) and (len(users) > 1 or uid not in users)

    def node_claims(self, node: str) -> Iterable[str]:
        """The claims (keys) the pods on the node use."""
        return self._node_claims.get(node, {}).keys()

    def released_claims(self) -> list[str]:
        """The wait keys of the claims no pod uses any more since the last call: a pod refused
        because another pod used its ReadWriteOncePod claim may go now."""
        released = [claim_wait_key(key) for key in sorted(self._released) if key not in self._claim_users]
        self._released.clear()
        return released

    def pod(self, uid: str) -> AssignedPod | None:
        return self._pods.get(uid)

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    def assumed_uids(self) -> frozenset[str]:
        return frozenset(self._assumed)

    def uids(self) -> set[str]:
        """Every pod the cache holds something for, assumed or confirmed."""
        return set(self._pods)

    def binding_in_flight(self, uid: str) -> bool:
        """Assumed, and its binding call has not ended yet."""
        assumed = self._assumed.get(uid)
        return assumed is not None and assumed.settles_at is None

    def is_doubtful(self, uid: str) -> bool:
        """Assumed, and its binding's answer was lost."""
        assumed = self._assumed.get(uid)
        return assumed is not None and assumed.doubtful

    def next_doubt_settles(self, after: float = float("-inf")) -> float | None:
        """The earliest time after `after` at which a hold in doubt settles: a list started
        then can end that doubt. None when no hold is in doubt (past that time)."""
        times = [a.settles_at for a in self._assumed.values() if a.doubtful and a.settles_at is not None]
        later = [t for t in times if t > after]
        return min(later) if later else None

    def gang_pods(self, gang: str) -> list[AssignedPod]:
        """The pods of a gang on nodes (bound, or assumed while their binding runs)."""
        return [self._pods[uid] for uid in self._gangs.get(gang, ())]

    def __len__(self) -> int:
        return len(self._pods)

    # -- nodes ------------------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo | Mapping) -> NodeInfo:
        """Stores the node; its published inventory re-keys the GPUs held on it (scheduling.ledger)."""
        info = self.nodes.upsert(node)
        self.ledger.set_inventory(info.name, info.inventory)
        return info

    def delete_node(self, name: str) -> NodeInfo | None:
        self.ledger.set_inventory(name, None)
        return self.nodes.delete(name)

    # -- the scheduler's own decisions --------------------------------------------------------

    def assume(self, pod: AssignedPod) -> None:
        """The pod is about to be bound to pod.node: hold its resources and GPUs there."""
        self._put(pod)
        self._assumed[pod.uid] = _Assumed()

    def finish_binding(self, uid: str, now: float) -> None:
        """The binding was stored: wait for the watch (or a list started from now) to confirm."""
        assumed = self._assumed.get(uid)
        if assumed is not None:
            assumed.settles_at = now
            assumed.doubtful = False

    def binding_unknown(self, uid: str, now: float) -> float | None:
        """The binding's answer was lost at `now`: it may be stored, or be stored later while
        kube-apiserver still works on it. The hold stays until the watch shows the pod on a
        node or a list started after the request timeout does not. Returns when it settles."""
        assumed = self._assumed.get(uid)
        if assumed is None:
            return None
        assumed.settles_at = now + APISERVER_REQUEST_TIMEOUT_SECONDS
        assumed.doubtful = True
        return assumed.settles_at

    def forget(self, uid: str) -> str | None:
        """Drops an assumed pod (the bind failed, the attempt broke, the pod is unbound after
        all); a confirmed pod is left alone. Returns the node it freed, or None."""
        if uid not in self._assumed:
            return None
        del self._assumed[uid]
        return self._drop(uid)

    # -- what the pod watch says of pods on nodes ----------------------------------------------

    def add_pod(self, pod: AssignedPod) -> str | None:
        """The pod is on pod.node (an ADDED or MODIFIED event): confirms an assumed pod.
        Returns the node where it held something else before (it was assumed elsewhere, or
        its requests changed), so that pods waiting there are retried; else None."""
        self._assumed.pop(pod.uid, None)
        before = self._pods.get(pod.uid)
        if before == pod:
            return None
        self._put(pod)
        return before.node if before is not None else None

    def remove_pod(self, uid: str) -> str | None:
        """The pod is gone (deleted, or finished): frees what it held; returns its node."""
        self._assumed.pop(uid, None)
        return self._drop(uid)

    def replace_pods(self, pods: Iterable[AssignedPod], listed_at: float) -> set[str]:
        """A re-list: the complete set of pods on nodes, as of a list started at listed_at
        (monotonic). Confirmed pods not in it are gone. An assumed pod not in it is dropped
        when its binding settled before the list started (the list would show it, had it
        been stored); one still binding, or not settled yet, is kept. Returns freed nodes."""
        listed = {pod.uid: pod for pod in pods}
        freed: set[str] = set()
        for uid in [u for u in self._pods if u not in listed]:
            assumed = self._assumed.get(uid)
            if assumed is not None and (assumed.settles_at is None or assumed.settles_at >= listed_at):
                continue
            node = self.remove_pod(uid)
            if node is not None:
                freed.add(node)
        for pod in listed.values():
            node = self.add_pod(pod)
            if node is not None:
                freed.add(node)
        return freed

    # -- internals ---------------------------------------------------------------------------------

    def _put(self, pod: AssignedPod) -> None:
        self._drop(pod.uid)
        self._pods[pod.uid] = pod
        self._usage.setdefault(pod.node, NodeUsage()).add(pod.requests)
        if pod.host_ports:
            self._ports.setdefault(pod.node, UsedPorts()).add(pod.host_ports)
        self.ledger.hold(pod.uid, pod.key, pod.node, pod.devices)
        if pod.gang is not None:
            self._gangs.setdefault(pod.gang, set()).add(pod.uid)
        if pod.anti_affinity:
            self._anti_affinity[pod.uid] = pod
        if pod.claims or pod.ephemeral_claims:
            self._index_claims(pod)

    def _drop(self, uid: str) -> str | None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return None
        usage = self._usage.get(pod.node)
        if usage is not None:
            usage.remove(pod.requests)
            if usage.empty():
                del self._usage[pod.node]
        ports = self._ports.get(pod.node) if pod.host_ports else None
        if ports is not None:
            ports.remove(pod.host_ports)
            if ports.empty():
                del self._ports[pod.node]
        self.ledger.release(uid)
        self._anti_affinity.pop(uid, None)
        if pod.gang is not None:
            members = self._gangs.get(pod.gang)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._gangs[pod.gang]
        if pod.claims or pod.ephemeral_claims:
            self._unindex_claims(pod)
        return pod.node

    def _index_claims(self, pod: AssignedPod) -> None:
        for key in pod.claims:
            self._claim_users.setdefault(key, set()).add(pod.uid)
        on_node = self._node_claims.setdefault(pod.node, {})
        for key in (*pod.claims, *pod.ephemeral_claims):
            on_node[key] = on_node.get(key, 0) + 1

    def _unindex_claims(self, pod: AssignedPod) -> None:
        for key in pod.claims:
            users = self._claim_users.get(key)
            if users is not None:
                users.discard(pod.uid)
                if not users:
                    del self._claim_users[key]
                    self._released.add(key)
        on_node = self._node_claims.get(pod.node)
        if on_node is None:
            return
        for key in (*pod.claims, *pod.ephemeral_claims):
            left = on_node.get(key, 0) - 1
            if left > 0:
                on_node[key] = left
            else:
                on_node.pop(key, None)
        if not on_node:
            del self._node_claims[pod.node]

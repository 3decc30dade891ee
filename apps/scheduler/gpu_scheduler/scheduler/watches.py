"""The list+watch caches that feed the scheduler, and what each event changes.

One informer of every pod not finished, of every scheduler and namespace: this
scheduler's unbound pods go to the queue, pods on nodes (of any scheduler) to
the nodes' usage, host ports, claims and the GPU ledger. One informer of every
node: the node index. One each of PersistentVolumeClaims, PersistentVolumes and
StorageClasses, trimmed to what the volume filters read (kube.objects): a claim
or a volume that changes wakes the pods waiting on it. One of CSINodes, trimmed
to their drivers' volume counts (NodeVolumeLimits): storage.k8s.io/v1 CSINode is
served by every supported Kubernetes (GA since 1.17), so waiting for it to list
holds no start back where the chart grants list and watch on it.

Their handlers run on the informers' threads and change the state only through
its named events; they also say whether the caches have listed once and are
kept current (for the workers and /readyz), and ask the pod informer for the
lists that end holds in doubt.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu_scheduler.kube.client import KubeClient
from gpu_scheduler.kube.informer import RELIST_REASONS, Informer
from gpu_scheduler.kube.objects import (
    UNFINISHED_SELECTOR,
    WatchedPod,
    claim_info,
    csi_node_info,
    node_info,
    storage_class_info,
    volume_info,
    watched_pod,
)
from gpu_scheduler.scheduling import Claim, NodeInfo, Volume
from gpu_scheduler.scheduling.volume_limits import CSINode
from gpu_scheduler.scheduling.volumes import StorageClass

from .announce import Announcer
from .state import SchedulerState


class Watches:
    def __init__(
        self,
        client: KubeClient,
        state: SchedulerState,
        announcer: Announcer,
        scheduler_name: str,
        namespace: str | None,
        alias_label: str,
    ) -> None:
        self._state = state
        self._announcer = announcer
        self.informers = [
            # Every namespace, whatever --namespace says: pods of other namespaces and
            # schedulers use the same nodes (--namespace limits the pods it schedules).
            Informer(
                client,
                "/api/v1/pods",
                _Handler(self._pods_replace, self._pod_upsert, self._pod_delete),
                functools.partial(watched_pod, scheduler_name=scheduler_name, namespace=namespace),
                name="pods",
                field_selector=UNFINISHED_SELECTOR,
            ),
            Informer(
                client,
                "/api/v1/nodes",
                _Handler(self._nodes_replace, self._node_upsert, self._node_delete),
                functools.partial(node_info, alias_label=alias_label),
                name="nodes",
            ),
            Informer(
                client,
                "/api/v1/persistentvolumeclaims",
                _Handler(self._claims_replace, state.claim_changed, self._claim_delete),
                claim_info,
                name="persistentvolumeclaims",
            ),
            Informer(
                client,
                "/api/v1/persistentvolumes",
                _Handler(self._volumes_replace, state.volume_changed, self._volume_delete),
                volume_info,
                name="persistentvolumes",
            ),
            Informer(
                client,
                "/apis/storage.k8s.io/v1/storageclasses",
                _Handler(self._classes_replace, state.storage_class_changed, self._class_delete),
                storage_class_info,
                name="storageclasses",
            ),
            Informer(
                client,
                "/apis/storage.k8s.io/v1/csinodes",
                _Handler(self._csi_nodes_replace, state.csi_node_changed, self._csi_node_delete),
                csi_node_info,
                name="csinodes",
            ),
        ]
        self._pods = self.informers[0]

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.informers)

    def not_current(self) -> list[str]:
        """What keeps the caches from being current (for /readyz); [] when they are."""
        now = time.monotonic()
        return [problem for i in self.informers if (problem := i.current(now))]

    def dead(self) -> list[str]:
        return [f"informer {i.name}" for i in self.informers if not i.alive()]

    # -- read by metrics ---------------------------------------------------------------------

    def relists(self) -> dict[tuple[str, str], int]:
        return {(i.name, reason): i.relists[reason] for i in self.informers for reason in RELIST_REASONS}

    def watch_silences(self) -> dict[str, float]:
        """Seconds since each cache's last list, event or bookmark (those that have listed)."""
        now = time.monotonic()
        silences = {i.name: i.seconds_since_last_event(now) for i in self.informers}
        return {name: seconds for name, seconds in silences.items() if seconds is not None}

    # -- holds in doubt ----------------------------------------------------------------------

    def relist_for_doubts(self, after: float = float("-inf")) -> None:
        """Asks the pods informer for a list at the time the next hold in doubt settles
        (a binding whose answer was lost): a list started then shows whether it was stored.
        The informer merges these requests and spaces them out (informer.request_resync)."""
        at = self._state.next_relist(after)
        if at is not None:
            self._pods.request_resync(at)

    # -- handlers (called on informer threads) -----------------------------------------------

    def _pods_replace(self, pods: list[WatchedPod], listed_at: float) -> None:
        _, dropped = self._state.pods_listed(pods, listed_at)
        # A pod that left while the watch was away is placed or gone: its Event series goes.
        for key in dropped:
            self._announcer.forget_series(key)
        # Holds in doubt that settle after this list started need a later one.
        self.relist_for_doubts(after=listed_at)

    def _pod_upsert(self, pod: WatchedPod) -> None:
        self._state.pod_changed(pod)
        if pod.ours and pod.assigned is not None:
            self._announcer.forget(pod.uid, pod.key)  # placed, by us or by anyone

    def _pod_delete(self, pod: WatchedPod) -> None:
        self._state.pod_deleted(pod)
        if pod.ours:
            self._announcer.forget(pod.uid, pod.key)

    def _nodes_replace(self, nodes: list[NodeInfo], _listed_at: float) -> None:
        for node in nodes:
            self._announcer.node_seen(node)
        self._state.nodes_listed(nodes)

    def _node_upsert(self, node: NodeInfo) -> None:
        self._announcer.node_seen(node)
        self._state.node_changed(node)

    def _node_delete(self, node: NodeInfo) -> None:
        self._announcer.node_deleted(node.name)
        self._state.node_deleted(node.name)

    def _claims_replace(self, claims: list[Claim], _listed_at: float) -> None:
        self._state.claims_listed(claims)

    def _claim_delete(self, claim: Claim) -> None:
        self._state.claim_deleted(claim.key)

    def _volumes_replace(self, volumes: list[Volume], _listed_at: float) -> None:
        self._state.volumes_listed(volumes)

    def _volume_delete(self, volume: Volume) -> None:
        self._state.volume_deleted(volume.name)

    def _classes_replace(self, classes: list[StorageClass], _listed_at: float) -> None:
        self._state.storage_classes_listed(classes)

    def _class_delete(self, cls: StorageClass) -> None:
        self._state.storage_class_deleted(cls.name)

    def _csi_nodes_replace(self, csi_nodes: list[CSINode], _listed_at: float) -> None:
        self._state.csi_nodes_listed(csi_nodes)

    def _csi_node_delete(self, csi_node: CSINode) -> None:
        self._state.csi_node_deleted(csi_node.name)


@dataclass(frozen=True)
class _Handler:
    replace: Callable
    upsert: Callable
    delete: Callable

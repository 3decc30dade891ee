"""kube-scheduler's VolumeRestrictions for ReadWriteOncePod claims, on plain data.

A claim whose accessModes include ReadWriteOncePod may be used by one pod at a time in the
whole cluster: as kube-scheduler 1.37 does (pkg/scheduler/framework/plugins/volumerestrictions),
a pod using such a claim (through a persistentVolumeClaim volume; generic ephemeral volumes are
not counted, as there) while another pod on a node (bound, or assumed) uses it is refused by the
Filter, whatever the node: "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod
access mode already in-use by another pod", Unschedulable (recorded with the other pod on another
node). The pod waits on those claims, and the scheduler
wakes it when the last other pod using one goes (scheduling.cache.ClusterCache.released_claims)
or the claim changes.

Not done: the in-tree disk conflicts of the same plugin (GCE PD, AWS EBS, iSCSI, RBD inline
volumes, "node(s) had no available disk"); their in-tree plugins are gone from the kubelet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .volumes import VolumeCache, claim_key, claim_names

VOLUME_RESTRICTIONS = "VolumeRestrictions"
# kube-scheduler 1.37's words (ErrReasonReadWriteOncePodConflict), as recorded: older releases
# said "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode".
READ_WRITE_ONCE_POD_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)


def read_write_once_pod_conflicts(
    pod: Mapping, volumes: VolumeCache, used_by_others: Callable[[str], bool]
) -> tuple[str, ...]:
    """The keys (namespace/name) of the pod's ReadWriteOncePod claims that another pod on a
    node uses (`used_by_others(key)`), () when none. A claim that does not exist is left to
    VolumeBinding's PreFilter, which has refused the pod by then."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    conflicts = []
    for name, ephemeral in claim_names(pod):
        if ephemeral:
            continue
        key = claim_key(namespace, name)
        claim = volumes.claims.get(key)
        if claim is not None and claim.read_write_once_pod and used_by_others(key):
            conflicts.append(key)
    return tuple(dict.fromkeys(conflicts))

"""kube-scheduler's NodeVolumeLimits for CSI volumes, on plain data.

A CSI driver says on the node's CSINode how many of its volumes the node can use at once
(spec.drivers[].allocatable.count). As kube-scheduler 1.37's CSILimits Filter does
(pkg/scheduler/framework/plugins/nodevolumelimits/csi.go), the pod's claims (persistentVolumeClaim
and generic ephemeral volumes) are counted per driver: a claim bound to a CSI volume is that
volume (driver and handle); a claim without a volume, or whose volume is not in the cache, is a
new volume of its StorageClass's provisioner; a volume that is not CSI, or a claim with neither,
is not counted. A volume some pod on the node already uses is not new. When, for some driver
with a count, the volumes the node's pods use plus the pod's new ones exceed it: "node(s)
exceed max volume count", Unschedulable. A pod waits on its node (a pod leaving it, its CSINode
changing) and on its claims.

Not done: in-tree volumes migrated to CSI (an inline or PV source of a migrated in-tree plugin,
which kube-scheduler translates when the CSINode says the plugin is migrated).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .volumes import Claim, VolumeCache

NODE_VOLUME_LIMITS = "NodeVolumeLimits"
# kube-scheduler 1.37's words (nodevolumelimits, ErrReasonMaxVolumeCountExceeded), as recorded
MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"


@dataclass(frozen=True, slots=True)
class CSINode:
    """What NodeVolumeLimits reads of a CSINode: each driver's count, for the drivers that give one."""

    name: str  # the node's
    limits: tuple[tuple[str, int], ...] = ()  # (driver, allocatable.count)


def _unique_volume(claim: Claim, volumes: VolumeCache) -> tuple[str, str] | None:
    """(unique volume name, driver) of a claim as kube-scheduler counts it, None when not counted."""
    if claim.volume_name:
        volume = volumes.volumes.get(claim.volume_name)
        if volume is not None:
            if volume.csi is None:
                return None
            driver, handle = volume.csi
            return (f"{driver}/{handle}", driver) if driver and handle else None
    # Unbound, or its volume is not known (yet): a volume of its class's provisioner, named after
    # the claim (kube-scheduler prefixes a random string so that it never matches a real handle).
    cls = volumes.classes.get(claim.storage_class) if claim.storage_class else None
    if cls is None or not cls.provisioner:
        return None
    return f"\0claim/{cls.provisioner}/{claim.key}", cls.provisioner


def _counted(keys: Iterable[str], volumes: VolumeCache) -> dict[str, str]:
    counted = {}
    for key in keys:
        claim = volumes.claims.get(key)
        unique = _unique_volume(claim, volumes) if claim is not None else None
        if unique is not None:
            counted[unique[0]] = unique[1]
    return counted


def exceeds_volume_limits(
    pod_claims: Iterable[str],
    node_claims: Iterable[str],
    csi_node: CSINode | None,
    volumes: VolumeCache,
) -> bool:
    """Whether the pod's claims (keys) would take some driver of the node past its count, with
    the claims the node's pods use (`node_claims`). False at once when the node has no counts."""
    if csi_node is None or not csi_node.limits:
        return False
    new = _counted(pod_claims, volumes)
    if not new:
        return False
    used: dict[str, int] = {}
    for unique, driver in _counted(node_claims, volumes).items():
        new.pop(unique, None)  # one volume used by several pods counts once
        used[driver] = used.get(driver, 0) + 1
    adding: dict[str, int] = {}
    for driver in new.values():
        adding[driver] = adding.get(driver, 0) + 1
    limits: Mapping[str, int] = dict(csi_node.limits)
    return any(driver in limits and used.get(driver, 0) + n > limits[driver] for driver, n in adding.items())

"""kube-scheduler as the reference: .cache/bin/kube-scheduler with a KubeSchedulerConfiguration.

Two profiles are compared:
- "default": kube-scheduler's own default plugins (every filter, every score,
  preemption), what a cluster runs;
- "pinned": only what a pod pinned to one node by required node affinity
  needs, and what gpu-scheduler itself checks before binding: the queue sort,
  the filters NodeUnschedulable, NodeName, TaintToleration, NodeAffinity and
  NodeResourcesFit (with their PreFilters), no scoring, no preemption, and the
  default binder. That is kube-scheduler doing the same work as ours, so the
  difference between the two profiles is what its scoring and other plugins
  cost.
"""

from __future__ import annotations

from .contenders import LEASE_DURATION_SECONDS, RENEW_DEADLINE_SECONDS, RETRY_PERIOD_SECONDS

DEFAULT_PROFILE = "default"
PINNED_PROFILE = "pinned"
PROFILES = (DEFAULT_PROFILE, PINNED_PROFILE)

# The filters gpu-scheduler runs too (docs/architecture.md, "Deciding like kube-scheduler"), by
# kube-scheduler's plugin names; NodeName is what a pod with spec.nodeName would need.
PINNED_FILTERS = ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodeResourcesFit")
# Of those, the ones with a PreFilter: NodeAffinity's narrows the nodes to the one the
# affinity names (matchFields metadata.name), NodeResourcesFit's computes the pod's requests.
PINNED_PREFILTERS = ("NodeAffinity", "NodeResourcesFit")


def _plugins(names: tuple[str, ...]) -> dict:
    return {"enabled": [{"name": name} for name in names]}


def pinned_plugins() -> dict:
    """Every default plugin off ("*" at multiPoint, where v1 enables them), then only these."""
    return {
        "multiPoint": {"disabled": [{"name": "*"}]},
        "queueSort": _plugins(("PrioritySort",)),
        "preFilter": _plugins(PINNED_PREFILTERS),
        "filter": _plugins(PINNED_FILTERS),
        "bind": _plugins(("DefaultBinder",)),
    }


def scheduler_configuration(
    kubeconfig: str,
    scheduler_name: str,
    lease: tuple[str, str],
    qps: int | None = None,
    burst: int | None = None,
    profile: str = DEFAULT_PROFILE,
) -> dict:
    """One profile answering to scheduler_name, leader election on the Lease (namespace, name)
    with the timing gpu-scheduler is given too (contenders.py), as each runs in production.

    qps/burst None leaves clientConnection at kube-scheduler's own defaults,
    so the "defaults" run really is what an unconfigured kube-scheduler does.
    """
    if profile not in PROFILES:
        raise ValueError(f"kube-scheduler profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    connection: dict = {"kubeconfig": kubeconfig}
    if qps is not None:
        connection["qps"] = qps
    if burst is not None:
        connection["burst"] = burst
    scheduler_profile: dict = {"schedulerName": scheduler_name}
    if profile == PINNED_PROFILE:
        scheduler_profile["plugins"] = pinned_plugins()
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": connection,
        "leaderElection": {
            "leaderElect": True,
            "resourceLock": "leases",
            "resourceNamespace": lease[0],
            "resourceName": lease[1],
            "leaseDuration": f"{LEASE_DURATION_SECONDS}s",
            "renewDeadline": f"{RENEW_DEADLINE_SECONDS}s",
            "retryPeriod": f"{RETRY_PERIOD_SECONDS}s",
        },
        "profiles": [scheduler_profile],
    }

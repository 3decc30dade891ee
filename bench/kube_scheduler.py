"""kube-scheduler as the reference: .cache/bin/kube-scheduler with a KubeSchedulerConfiguration."""

from __future__ import annotations


def scheduler_configuration(
    kubeconfig: str, scheduler_name: str, qps: int | None = None, burst: int | None = None
) -> dict:
    """One default profile answering to scheduler_name, no leader election.

    qps/burst None leaves clientConnection at kube-scheduler's own defaults,
    so the "defaults" run really is what an unconfigured kube-scheduler does.
    """
    connection: dict = {"kubeconfig": kubeconfig}
    if qps is not None:
        connection["qps"] = qps
    if burst is not None:
        connection["burst"] = burst
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": connection,
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
    }

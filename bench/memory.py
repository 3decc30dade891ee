"""Phase 4: peak memory with many pods and nodes in the caches.

The node cache holds mem_nodes bench nodes (plus the cluster's own), and a
fresh gpu-scheduler binds mem_pods pods, which then sit in its bound-pod cache
and its GPU ledger. Peak RSS is the kernel's VmHWM (/proc/<pid>/status) read
before the process stops: the most it ever had resident, bursts included.
For the webhook (granian) it is read for the master and each worker, with the sum of
their PSS after the burst (each shared page counted once, near what the container's
memory cgroup is charged); it has answered the admission phase's vegeta load by then
(the burst's pods carry the bind entry and never call it).
"""

from __future__ import annotations

from . import contenders
from .context import Bench
from .measure import make_runner, runner_pods
from .pods import run_burst
from .processes import status_kib, tree_peak_rss_mib


def run(bench: Bench) -> dict:
    settings = bench.settings
    bench.phase(f"memory: {settings.mem_nodes} nodes (creating the missing ones)")
    bench.cluster.ensure_nodes(settings.mem_nodes)
    settled = bench.settle()
    runner = make_runner(bench, contenders.OURS_BIND)
    runner.start()
    bench.phase(f"memory: {settings.mem_pods} pods bound by a fresh gpu-scheduler")
    try:
        pods = runner_pods(bench, runner, settings.mem_pods, settings.mem_nodes)
        burst = run_burst(
            bench.api, bench.namespace, "memory", pods, settings.threads, settings.burst_timeout(settings.mem_pods)
        )
        scheduler_peak = runner.peak_rss_mib()
        scheduler_now = (status_kib(runner.process.pid, "VmRSS") or 0) / 1024
    finally:
        runner.stop()
    webhook = tree_peak_rss_mib(bench.webhook.process.pid)
    bench.phase(
        f"  gpu-scheduler peak RSS {scheduler_peak:.0f} MiB; webhook max {webhook['max_mib']:.0f} MiB "
        f"per process, {webhook['sum_mib']:.0f} MiB over {webhook['processes']} processes"
    )
    bench.phase("memory: deleting the pods")
    bench.cluster.delete_pods()
    return {
        "pods": settings.mem_pods,
        "nodes": settings.mem_nodes,
        "bound": burst.bound,
        "pods_per_second": burst.pods_per_second,
        "latency_s": burst.latency,
        "complete": burst.complete,
        "scheduler_peak_rss_mib": scheduler_peak,
        "scheduler_rss_after_mib": scheduler_now,
        "webhook": webhook,
        **settled,
    }

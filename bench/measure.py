"""One measured burst: start a runner, create the pods, wait for the binds, stop it, clean up."""

from __future__ import annotations

import urllib.request

from . import contenders, runners
from .context import CEILING_SCHEDULER, KUBE_SCHEDULER, OUR_SCHEDULER, Bench
from .pods import run_burst
from .prometheus import sample
from .runners import Runner
from .workload import bench_pods


def make_runner(bench: Bench, key: str) -> Runner:
    if key == contenders.OURS:
        return runners.ours(bench.kubeconfig, bench.namespace, bench.logs, OUR_SCHEDULER)
    if key == contenders.CEILING:
        return runners.ceiling(bench.kubeconfig, bench.namespace, bench.logs, CEILING_SCHEDULER)
    return runners.kube(key, bench.kubeconfig, bench.logs, KUBE_SCHEDULER)


def attempt_seconds(runner: Runner) -> float | None:
    """gpu-scheduler's own mean time per successful attempt (decide + bind), from its /metrics.

    A diagnostic beside the measured figures (which never come from the
    scheduler itself): it tells scheduling work apart from waiting.
    """
    if not runner.metrics_url:
        return None
    with urllib.request.urlopen(runner.metrics_url, timeout=5) as response:
        text = response.read().decode()
    name = "gpu_scheduler_scheduling_attempt_duration_seconds"
    total = sample(text, f"{name}_sum", result="scheduled")
    count = sample(text, f"{name}_count", result="scheduled")
    return total / count if total is not None and count else None


def measure_burst(bench: Bench, key: str, pods: int, nodes: int, label: str) -> dict:
    """The burst's figures (pods.BurstResult.to_json) plus the runner's startup time and peak RSS."""
    settings = bench.settings
    runner = make_runner(bench, key)
    ready_seconds = runner.start()
    try:
        result = run_burst(bench.api, bench.namespace, label,
                           bench_pods(pods, nodes, settings.group, runner.scheduler_name, bench.namespace),
                           settings.threads, settings.burst_timeout(pods))
        figures = result.to_json()
        figures.update(key=key, label=runner.label, nodes=nodes, ready_seconds=ready_seconds,
                       peak_rss_mib=runner.peak_rss_mib(), attempt_seconds=attempt_seconds(runner))
    finally:
        runner.stop()
    figures["cleanup_seconds"] = bench.cluster.delete_pods()
    return figures

"""`make bench-scale`: scheduler_perf's scale, 5,000 KWOK nodes and 10,000 pods, side by side.

gpu-scheduler (in bind mode, its pods created with no admission call:
contenders.OURS_BIND) and kube-scheduler at our client settings
(both profiles) each bind one 10,000-pod burst over 5,000 nodes, and so do gpu-scheduler and
kube-scheduler matched placing pods that each want one GPU on any node (contenders.DYNAMIC_RUNNERS:
issue 50's count lines against nvidia.com/gpu requests), in turn (the order changed each
round, contenders.round_order), as in the throughput phase
(measure.measure_burst: the same pods but for spec.schedulerName, the same
clock, CPU from /proc, peak RSS from VmHWM). What a scheduler's caches
cost shows at this scale: every node in the node cache, every pod in the
pods-on-nodes cache. Not part of `make bench` nor `make test`: three rounds
take about 40 minutes on 2 cores (docs/benchmarks.md).
"""

from __future__ import annotations

from . import contenders
from .context import Bench
from .measure import measure_burst, warm_up
from .summary import summarize_throughput

RUNNERS = (
    contenders.OURS_BIND,
    contenders.KUBE_MATCHED,
    contenders.KUBE_PINNED,
    # Issue 50's count lines at 5,000 nodes, where choosing a node among all costs most. In this order the
    # warm-up (the runner that ends round 1, contenders.round_order) is kube-scheduler's, not gpu-scheduler's
    # count line, the slowest of the five at this scale.
    contenders.KUBE_GPUS,
    contenders.OURS_DYNAMIC,
)


def run(bench: Bench) -> dict:
    settings = bench.settings
    bench.phase(f"scale: {settings.scale_nodes:,} nodes (creating the missing ones)")
    bench.cluster.ensure_nodes(settings.scale_nodes)
    runs = []
    order = [k for k in RUNNERS if k in settings.runners]
    # Not measured: after the nodes were made, the first measured run must not come first (measure.warm_up);
    # by the runner that ends round 1, as in the throughput phase.
    last = contenders.round_order(order, 1)[-1]
    warmup = warm_up(bench, last, measure_burst, settings.scale_pods, settings.scale_nodes)
    for round_no in range(1, settings.runs + 1):
        for key in contenders.round_order(order, round_no):
            bench.phase(
                f"scale round {round_no}/{settings.runs}: {contenders.LABELS[key]}, "
                f"{settings.scale_pods:,} pods on {settings.scale_nodes:,} nodes"
            )
            figures = measure_burst(bench, key, settings.scale_pods, settings.scale_nodes, f"{key} scale")
            figures["round"] = round_no
            bench.phase(
                f"  {figures['pods_per_second']:.1f} pods/s, p99 {figures['latency_s']['p99']:.2f}s, "
                f"peak RSS {figures['peak_rss_mib'] or 0:.0f} MiB"
            )
            runs.append(figures)
    return {
        "pods": settings.scale_pods,
        "nodes": settings.scale_nodes,
        "group": settings.group,
        "warmup": warmup,
        "runs": runs,
        **summarize_throughput(runs),
    }

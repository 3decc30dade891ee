"""Phase 1: the same burst of pods bound by each runner in turn, several rounds, interleaved."""

from __future__ import annotations

from . import contenders
from .context import Bench
from .measure import measure_burst
from .summary import summarize_throughput

# Interleaved, so that each round's runs are made side by side on a shared, noisy machine.
ORDER = (contenders.OURS, contenders.KUBE_DEFAULTS, contenders.KUBE_MATCHED, contenders.CEILING)


def run(bench: Bench) -> dict:
    settings = bench.settings
    runs = []
    for round_no in range(1, settings.runs + 1):
        for key in ORDER:
            bench.phase(f"throughput round {round_no}/{settings.runs}: {contenders.LABELS[key]}, "
                        f"{settings.pods} pods on {settings.nodes} nodes")
            figures = measure_burst(bench, key, settings.pods, settings.nodes, key)
            figures["round"] = round_no
            bench.phase(f"  {figures['pods_per_second']:.1f} pods/s, p50 {figures['latency_s']['p50']:.3f}s, "
                        f"p99 {figures['latency_s']['p99']:.3f}s")
            runs.append(figures)
    return {"pods": settings.pods, "nodes": settings.nodes, "group": settings.group, "runs": runs,
            **summarize_throughput(runs)}

"""Phase 1: the same pods bound by each runner in turn, several rounds, interleaved.

Each round runs every runner in burst mode, then every runner in drain mode
(see measure.py), so each figure's runs are made side by side.
"""

from __future__ import annotations

from . import contenders
from .context import Bench
from .measure import measure_burst, measure_drain
from .summary import summarize_throughput

# Interleaved, so that each round's runs are made side by side on a shared, noisy machine.
ORDER = (
    contenders.OURS,
    contenders.KUBE_DEFAULTS,
    contenders.KUBE_MATCHED,
    contenders.CEILING,
    contenders.PYTHON_BINDER,
)


def run(bench: Bench) -> dict:
    settings = bench.settings
    runs: dict[str, list[dict]] = {"burst": [], "drain": []}
    for round_no in range(1, settings.runs + 1):
        for mode, measure in (("burst", measure_burst), ("drain", measure_drain)):
            for key in ORDER:
                bench.phase(
                    f"throughput round {round_no}/{settings.runs}, {mode}: {contenders.LABELS[key]}, "
                    f"{settings.pods} pods on {settings.nodes} nodes"
                )
                figures = measure(bench, key, settings.pods, settings.nodes, f"{key} {mode}")
                figures["round"] = round_no
                latency = (
                    f", p50 {figures['latency_s']['p50']:.3f}s, p99 {figures['latency_s']['p99']:.3f}s"
                    if mode == "burst"
                    else ""
                )
                bench.phase(f"  {figures['pods_per_second']:.1f} pods/s{latency}")
                runs[mode].append(figures)
    return {
        "pods": settings.pods,
        "nodes": settings.nodes,
        "group": settings.group,
        **{mode: {"runs": mode_runs, **summarize_throughput(mode_runs)} for mode, mode_runs in runs.items()},
    }

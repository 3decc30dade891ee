"""Phase 1: the same pods bound by each runner in turn, several rounds, interleaved.

Each round runs every runner in burst mode, then every runner in drain mode
(see measure.py), so each figure's runs are made side by side; the runners'
order changes each round (contenders.round_order, a Williams design): each
leads a round in turn and follows each other one equally often, so that none
always runs first, right after the settle wait, or after the same runner.
Before round 1, one run that counts nowhere (measure.warm_up), after which
the control plane's baseline is learnt and every run waits for it.
"""

from __future__ import annotations

from . import contenders
from .context import Bench
from .measure import measure_burst, measure_drain, warm_up
from .summary import incomplete_reason, summarize_throughput

MODES = {"burst": measure_burst, "drain": measure_drain}


def run(bench: Bench) -> dict:
    settings = bench.settings
    # Interleaved, so that each round's runs are made side by side on a shared, noisy machine.
    order = [key for key in contenders.ALL_RUNNERS if key in settings.runners]
    runs: dict[str, list[dict]] = {mode: [] for mode in settings.modes}
    # Not measured: the first measured run must not be the first after the setup (measure.warm_up). By
    # the runner that ends round 1, so that round 1's first one follows another runner, as every run does.
    last = contenders.round_order(order, 1)[-1]
    warmup = warm_up(bench, last, MODES[settings.modes[0]], settings.pods, settings.nodes)
    for round_no in range(1, settings.runs + 1):
        for mode in settings.modes:
            for key in contenders.round_order(order, round_no):
                bench.phase(
                    f"throughput round {round_no}/{settings.runs}, {mode}: {contenders.LABELS[key]}, "
                    f"{settings.pods} pods on {settings.nodes} nodes"
                )
                figures = MODES[mode](bench, key, settings.pods, settings.nodes, f"{key} {mode}")
                figures["round"] = round_no
                latency = (
                    f", p50 {figures['latency_s']['p50']:.3f}s, p99 {figures['latency_s']['p99']:.3f}s"
                    if mode == "burst"
                    else ""
                )
                cpu = figures["cpu_s"]
                bound = figures["bound"] or 1
                problem = incomplete_reason(figures)
                bench.phase(
                    f"  {figures['pods_per_second']:.1f} pods/s{latency}; CPU ms per pod: runner "
                    f"{cpu['runner'] * 1000 / bound:.2f}, webhook {cpu['webhook'] * 1000 / bound:.2f}, "
                    f"control plane {cpu['control_plane'] * 1000 / bound:.2f}"
                    + (f"; INCOMPLETE ({problem}): left out of the medians, its targets MISS" if problem else "")
                )
                runs[mode].append(figures)
    return {
        "pods": settings.pods,
        "nodes": settings.nodes,
        "group": settings.group,
        "warmup": warmup,
        **{mode: {"runs": mode_runs, **summarize_throughput(mode_runs)} for mode, mode_runs in runs.items()},
    }

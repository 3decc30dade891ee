"""From the runs to the figures: medians per runner, paired ratios, the metrics the targets read. Pure."""

from __future__ import annotations

import math

from .contenders import RATIOS
from .stats import median, paired_ratios


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def summarize_runner(runs: list[dict]) -> dict:
    """Median of each figure over one runner's runs (and the spread of pods/s)."""
    rates = [r["pods_per_second"] for r in runs]

    def med(*path: str) -> float:
        values = []
        for run in runs:
            value = run
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            values.append(_nan(value))
        return median(values)

    def cpu_per_1000_pods(group: str) -> float:
        return median(
            [_nan((r.get("cpu_s") or {}).get(group)) / r["bound"] * 1000 if r.get("bound") else math.nan for r in runs]
        )

    return {
        "label": runs[0]["label"],
        "runs": len(runs),
        "pods_per_second": median(rates),
        "pods_per_second_min": min(rates),
        "pods_per_second_max": max(rates),
        "latency_p50_s": med("latency_s", "p50"),
        "latency_p99_s": med("latency_s", "p99"),
        "create_p50_s": med("create_latency_s", "p50"),
        "create_p99_s": med("create_latency_s", "p99"),
        "seen_to_bound_p50_s": med("seen_to_bound_s", "p50"),
        "seen_to_bound_p99_s": med("seen_to_bound_s", "p99"),
        "peak_rss_mib": med("peak_rss_mib"),
        "attempt_ms": med("attempt_seconds") * 1000,
        "launch_to_first_bind_s": med("launch_to_first_bind_s"),
        "cpu_s_per_1000_pods": {g: cpu_per_1000_pods(g) for g in ("runner", "webhook", "control_plane")},
        "create_errors": sum(r["create_errors"] for r in runs),
        "create_retries": sum(r["create_retries"] for r in runs),
        "complete": all(r["complete"] for r in runs),
    }


def summarize_throughput(runs: list[dict]) -> dict:
    """Per-runner medians, and each ratio as the median of its per-round ratios."""
    by_key: dict[str, list[dict]] = {}
    for run in runs:
        by_key.setdefault(run["key"], []).append(run)
    for key_runs in by_key.values():
        key_runs.sort(key=lambda r: r["round"])
    ratios = {}
    for name, (numerator, denominators) in RATIOS.items():
        present = [d for d in denominators if d in by_key]
        if numerator in by_key and present:
            fastest = [
                max(rates) for rates in zip(*([r["pods_per_second"] for r in by_key[d]] for d in present), strict=True)
            ]
            per_round = paired_ratios([r["pods_per_second"] for r in by_key[numerator]], fastest)
            ratios[name] = {"per_round": per_round, "median": median(per_round)}
    return {"summary": {key: summarize_runner(key_runs) for key, key_runs in by_key.items()}, "ratios": ratios}


def headline_metrics(results: dict) -> dict[str, dict]:
    """The figures the targets check, each with the scale it was measured at: name -> {value, scale}."""
    metrics: dict[str, dict] = {}
    throughput = results.get("throughput") or {}
    for mode in ("burst", "drain"):
        figures = throughput.get(mode) or {}
        if not figures.get("summary"):
            continue
        scale = f"{throughput['pods']} pods, {throughput['nodes']} nodes"
        prefix = "" if mode == "burst" else "drain."
        for name, ratio in figures["ratios"].items():
            metrics[f"{prefix}ratio.{name}"] = {"value": ratio["median"], "scale": scale}
        ours = figures["summary"].get("ours")
        if ours:
            metrics[f"{prefix}ours.pods_per_second"] = {"value": ours["pods_per_second"], "scale": scale}
            if mode == "burst":
                metrics["ours.latency_p99_s"] = {"value": ours["latency_p99_s"], "scale": scale}
    for row in (results.get("admission") or {}).get("rates", []):
        scale = f"{row['rate']}/s for {row['duration_s']:g}s"
        metrics[f"admission.{row['rate']}.p99_ms"] = {"value": row["p99_ms"], "scale": scale}
        metrics[f"admission.{row['rate']}.errors"] = {"value": row["errors"], "scale": scale}
    memory = results.get("memory") or {}
    if memory.get("scheduler_peak_rss_mib") is not None:
        scale = f"{memory['pods']} pods, {memory['nodes']} nodes"
        metrics["memory.scheduler_peak_rss_mib"] = {"value": memory["scheduler_peak_rss_mib"], "scale": scale}
        metrics["memory.webhook_peak_rss_sum_mib"] = {"value": memory["webhook"]["sum_mib"], "scale": scale}
    return metrics

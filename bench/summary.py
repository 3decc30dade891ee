"""From the runs to the figures: medians per runner, paired ratios, the metrics the targets read. Pure.

An incomplete run (a timeout, a pod never created or never bound) is never
averaged in: its figures would describe a different amount of work. It is
left out of the medians and of its round's ratios, and listed by round with
what went wrong, so that a report with fewer rounds than asked says why. And
it is never passed over: every figure a target reads from a runner with an
incomplete round carries the reason, and that target is a MISS (targets.py),
whatever the complete rounds say.
"""

from __future__ import annotations

import math

from .apiserver_work import admission_per_pod
from .contenders import CPU_RATIOS, OURS_BIND, OURS_DYNAMIC, RATIOS
from .stats import median, paired_ratios

# A webhook's run at one rate is saturated when it answers (HTTP 200) fewer than this share of the
# requests per second asked (vegeta's throughput: answers over the attack plus the wait for the
# last ones, so a queue that grew during the run shows), or when its median answer takes longer
# than SATURATED_P50_MS: about 50 times its unloaded median (2 ms here), i.e. the median request
# waited behind a backlog (at 1,000/s, some 100 requests: Little's law).
SATURATED_ANSWER_SHARE = 0.95
SATURATED_P50_MS = 100.0
CPU_GROUPS = ("runner", "webhook", "control_plane")
# The groups whose CPU per pod is compared with kube-scheduler's (its pods pay no webhook).
CPU_RATIO_GROUPS = ("runner", "control_plane", "total")
# The runners whose own figures (pods/s, CPU per pod, latency, Scheduled Events) the targets read:
# gpu-scheduler (bind mode), pinned and placing count lines.
HEADLINE_RUNNERS = (OURS_BIND, OURS_DYNAMIC)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def incomplete_reason(run: dict) -> str | None:
    """Why a run does not count, or None when it does: every pod created, and every one bound."""
    pods = run.get("pods")
    created = run.get("created", pods)
    reasons = []
    if not run.get("complete", False):
        reasons.append("timed out")
    if pods is not None and created is not None and created < pods:
        reasons.append(f"{pods - created} of {pods} pods not created")
    if created is not None and run.get("bound") is not None and run["bound"] < created:
        reasons.append(f"{created - run['bound']} of {created} pods not bound")
    for group, pids in (run.get("processes_gone") or {}).items():
        reasons.append(f"{group} process(es) {', '.join(map(str, pids))} exited during the run")
    return "; ".join(reasons) or None


def cpu_ms_per_pod(run: dict) -> dict[str, float]:
    """CPU milliseconds per pod bound (= CPU seconds per 1,000 pods) of each process group, and their sum:
    the work of the run, its idle rate subtracted (cpuwork.py)."""
    cpu = run.get("cpu_s") or {}
    bound = run.get("bound") or 0
    per_pod = {g: (_nan(cpu.get(g)) * 1000 / bound if bound else math.nan) for g in CPU_GROUPS}
    per_pod["total"] = sum(per_pod.values())
    return per_pod


def scheduled_events(run: dict) -> dict[str, float]:
    """A run's Scheduled Events sent inside its window (events.py), per pod bound, and the share
    of its bound pods that got one; NaN when they were not counted (runs before 2026-12-07)."""
    bound = run.get("bound") or 0
    if "scheduled_events" not in run or not bound:
        return {"per_pod": math.nan, "share": math.nan}
    return {"per_pod": run["scheduled_events"] / bound, "share": run["pods_with_scheduled_event"] / bound}


def admission_counts(complete: list[dict]) -> dict[str, float]:
    """Webhook calls and admission policy evaluations per pod (apiserver_work.admission_per_pod),
    medians over the rounds whose apiserver counters were read."""
    counted = [admission_per_pod(r["apiserver_per_pod"]) for r in complete if r.get("apiserver_per_pod")]
    return {what: median([c[what] for c in counted]) for what in ("webhook_calls", "policy_checks")}


def apiserver_per_pod(complete: list[dict]) -> dict[str, float]:
    """Each counted apiserver request, watch event or etcd operation per pod: the median over the
    rounds that counted it (a round with no figures, e.g. the apiserver restarted, is left out;
    a round that counted others but not this one counts 0)."""
    counted = [r["apiserver_per_pod"] for r in complete if r.get("apiserver_per_pod")]
    names = sorted({what for counts in counted for what in counts})
    return {what: median([counts.get(what, 0.0) for counts in counted]) for what in names}


def summarize_runner(runs: list[dict]) -> dict:
    """Medians over one runner's complete runs (and the spread of pods/s and of total CPU)."""
    complete = [r for r in runs if incomplete_reason(r) is None]
    rates = [r["pods_per_second"] for r in complete]

    def med(*path: str) -> float:
        values = []
        for run in complete:
            value = run
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            values.append(_nan(value))
        return median(values)

    cpu = [cpu_ms_per_pod(r) for r in complete]
    totals = [c["total"] for c in cpu if not math.isnan(c["total"])]
    return {
        "label": runs[0]["label"],
        "runs": len(complete),
        "incomplete": [
            {
                "round": r.get("round"),
                "reason": incomplete_reason(r),
                **({"diagnosis": r["diagnosis"]} if r.get("diagnosis") else {}),
            }
            for r in runs
            if r not in complete
        ],
        "pods_per_second": median(rates),
        "pods_per_second_min": min(rates, default=math.nan),
        "pods_per_second_max": max(rates, default=math.nan),
        "latency_p50_s": med("latency_s", "p50"),
        "latency_p99_s": med("latency_s", "p99"),
        "create_p50_s": med("create_latency_s", "p50"),
        "create_p99_s": med("create_latency_s", "p99"),
        "seen_to_bound_p50_s": med("seen_to_bound_s", "p50"),
        "seen_to_bound_p99_s": med("seen_to_bound_s", "p99"),
        "peak_rss_mib": med("peak_rss_mib"),
        "attempt_ms": med("attempt_seconds") * 1000,
        "launch_to_first_bind_s": med("launch_to_first_bind_s"),
        "cpu_ms_per_pod": {g: median([c[g] for c in cpu]) for g in (*CPU_GROUPS, "total")},
        "apiserver_per_pod": apiserver_per_pod(complete),
        "admission_per_pod": admission_counts(complete),
        "scheduled_events_per_pod": median([scheduled_events(r)["per_pod"] for r in complete]),
        "scheduled_event_share": median([scheduled_events(r)["share"] for r in complete]),
        # What cpuwork.WorkMeter took off (idle rate, in cores) and how long the cluster took to settle.
        "idle_cores": {g: med("idle_cores", g) for g in CPU_GROUPS},
        "settle_s": med("settle_s"),
        "unsettled": sum(1 for r in complete if r.get("settled") is False),
        "settle_timeout_s": max((r["settle_timeout_s"] for r in complete if "settle_timeout_s" in r), default=None),
        # Runs that started before the control plane was back at its baseline (the settle wait's timeout).
        "above_baseline_at_start": sum(1 for r in complete if r.get("at_baseline_at_start") is False),
        "cpu_ms_per_pod_total_min": min(totals, default=math.nan),
        "cpu_ms_per_pod_total_max": max(totals, default=math.nan),
        "create_errors": sum(r.get("create_errors", 0) for r in runs),
        "create_retries": sum(r.get("create_retries", 0) for r in runs),
        "complete": not any(incomplete_reason(r) for r in runs),
    }


def _by_round(runs: list[dict]) -> dict[int, dict]:
    """A runner's runs by round; an incomplete run counts as absent."""
    return {r["round"]: r for r in runs if incomplete_reason(r) is None}


def _paired(by_key: dict[str, list[dict]], numerator: str, denominators: tuple[str, ...], figure) -> dict | None:
    """figure(numerator's run) / figure(denominator's run), round by round; with several
    denominators, the one with the largest figure in that round. Rounds where a side has no
    complete run give NaN (listed, never averaged in)."""
    present = [d for d in denominators if d in by_key]
    if numerator not in by_key or not present:
        return None
    rounds = sorted({r["round"] for key in (numerator, *present) for r in by_key[key]})
    ours = _by_round(by_key[numerator])
    theirs = [_by_round(by_key[d]) for d in present]
    numerators, denominators_ = [], []
    for round_no in rounds:
        candidates = [figure(t[round_no]) for t in theirs if round_no in t]
        numerators.append(figure(ours[round_no]) if round_no in ours else math.nan)
        denominators_.append(max(candidates) if candidates else math.nan)
    per_round = paired_ratios(numerators, denominators_)
    return {"rounds": rounds, "per_round": per_round, "median": median(per_round)}


def summarize_throughput(runs: list[dict]) -> dict:
    """Per-runner medians, and each ratio as the median of its per-round ratios: pods/s, and
    CPU per pod of ours over kube-scheduler's and the Go binder's (total, and each group)."""
    by_key: dict[str, list[dict]] = {}
    for run in runs:
        by_key.setdefault(run["key"], []).append(run)
    for key_runs in by_key.values():
        key_runs.sort(key=lambda r: r["round"])
    ratios = {}
    for name, (numerator, denominators) in RATIOS.items():
        paired = _paired(by_key, numerator, denominators, lambda r: r["pods_per_second"])
        if paired is not None:
            ratios[name] = paired
    cpu_ratios: dict[str, dict] = {}
    for name, (numerator, denominator) in CPU_RATIOS.items():
        for group in CPU_RATIO_GROUPS:
            paired = _paired(by_key, numerator, (denominator,), lambda r, g=group: cpu_ms_per_pod(r)[g])
            if paired is not None:
                cpu_ratios.setdefault(name, {})[group] = paired
    return {
        "summary": {key: summarize_runner(key_runs) for key, key_runs in by_key.items()},
        "ratios": ratios,
        "cpu_ratios": cpu_ratios,
    }


def incomplete_rounds(summary: dict, keys: tuple[str, ...]) -> str | None:
    """Why a figure read from these runners' runs cannot pass: each one's incomplete rounds, or None."""
    parts = []
    for key in keys:
        runner = summary.get(key) or {}
        items = runner.get("incomplete") or []
        if items:
            rounds = ", ".join(str(item["round"]) for item in items)
            reasons = "; ".join(dict.fromkeys(item["reason"] for item in items))
            plural = "s" if len(items) > 1 else ""
            parts.append(f"{runner['label']}: round{plural} {rounds} incomplete ({reasons})")
    return "; ".join(parts) or None


def unsettled_windows(summary: dict, keys: tuple[str, ...]) -> str | None:
    """Why a CPU figure of these runners' runs cannot pass where every window must settle (the
    scale run: issue 47): each one's complete runs whose CPU window did not settle, or None."""
    parts = [
        f"{runner['label']}: {runner['unsettled']} CPU window{'s' if runner['unsettled'] > 1 else ''} not settled"
        for key in keys
        if (runner := summary.get(key) or {}).get("unsettled")
    ]
    return "; ".join(parts) or None


def _metric(value: float | None, scale: str, reason: str | None = None) -> dict:
    """A headline figure; with a reason, the figure cannot pass its target (see targets.evaluate)."""
    return {"value": value, "scale": scale, **({"reason": reason} if reason else {})}


def _runner_metrics(metrics: dict, figures: dict, prefix: str, scale: str) -> None:
    """Ratios, CPU ratios and our own figures of one set of rounds (a mode, or the scale run)."""
    summary = figures["summary"]
    for name, ratio in (figures.get("ratios") or {}).items():
        numerator, denominators = RATIOS[name]
        reason = incomplete_rounds(summary, (numerator, *denominators))
        metrics[f"{prefix}ratio.{name}"] = _metric(ratio["median"], scale, reason)
    for name, groups in (figures.get("cpu_ratios") or {}).items():
        reasons = [incomplete_rounds(summary, CPU_RATIOS[name])]
        if prefix == "scale.":
            reasons.append(unsettled_windows(summary, CPU_RATIOS[name]))
        reason = "; ".join(r for r in reasons if r) or None
        for group, ratio in groups.items():
            metrics[f"{prefix}cpu_ratio.{group}.{name}"] = _metric(ratio["median"], scale, reason)


def headline_metrics(results: dict) -> dict[str, dict]:
    """The figures the targets check, each with the scale it was measured at, and why it cannot
    pass when it cannot: name -> {value, scale[, reason]}."""
    metrics: dict[str, dict] = {}
    throughput = results.get("throughput") or {}
    for mode in ("burst", "drain"):
        figures = throughput.get(mode) or {}
        if not figures.get("summary"):
            continue
        scale = f"{throughput['pods']} pods, {throughput['nodes']} nodes"
        prefix = "" if mode == "burst" else "drain."
        _runner_metrics(metrics, figures, prefix, scale)
        for key in HEADLINE_RUNNERS:
            ours = figures["summary"].get(key)
            if not ours:
                continue
            reason = incomplete_rounds(figures["summary"], (key,))
            metrics[f"{prefix}{key}.pods_per_second"] = _metric(ours["pods_per_second"], scale, reason)
            for group, value in ours["cpu_ms_per_pod"].items():
                metrics[f"{prefix}{key}.cpu_ms_per_pod.{group}"] = _metric(value, scale, reason)
            if mode == "burst":
                metrics[f"{key}.latency_p99_s"] = _metric(ours["latency_p99_s"], scale, reason)
                metrics[f"{key}.scheduled_event_share"] = _metric(ours.get("scheduled_event_share"), scale, reason)
    admission = results.get("admission") or {}
    for workload in admission.get("workloads", []):
        for row in workload["rates"]:
            scale = f"{row['rate']}/s for {row['duration_s']:g}s, {workload['maps']}"
            name = f"admission.{workload['key']}.{row['rate']}"
            saturated = admission_saturation(row)
            if row.get("not_run"):
                reason = f"not run: {row['not_run']}"
            else:
                reason = f"webhook saturated at {row['rate']}/s: {saturated}" if saturated else None
            metrics[f"{name}.p50_ms"] = _metric(row["p50_ms"], scale, reason)
            metrics[f"{name}.p99_ms"] = _metric(row["p99_ms"], scale, reason)
            metrics[f"{name}.errors"] = _metric(row["errors"], scale, reason)
            metrics[f"{name}.cpu_ms_per_request"] = _metric(row.get("cpu_ms_per_request"), scale, reason)
    memory = results.get("memory") or {}
    if memory.get("scheduler_peak_rss_mib") is not None:
        scale = f"{memory['pods']} pods, {memory['nodes']} nodes"
        reason = memory_incomplete(memory)
        metrics["memory.scheduler_peak_rss_mib"] = _metric(memory["scheduler_peak_rss_mib"], scale, reason)
        metrics["memory.webhook_peak_rss_sum_mib"] = _metric(memory["webhook"]["sum_mib"], scale, reason)
    scale_run = results.get("scale") or {}
    scale_summary = scale_run.get("summary") or {}
    if any(scale_summary.get(key) for key in HEADLINE_RUNNERS):
        scale = f"{scale_run['pods']} pods, {scale_run['nodes']} nodes"
        for key in HEADLINE_RUNNERS:
            if ours := scale_summary.get(key):
                reason = incomplete_rounds(scale_summary, (key,))
                metrics[f"scale.{key}.peak_rss_mib"] = _metric(ours["peak_rss_mib"], scale, reason)
                metrics[f"scale.{key}.pods_per_second"] = _metric(ours["pods_per_second"], scale, reason)
        _runner_metrics(metrics, scale_run, "scale.", scale)
    return metrics


def admission_saturation(row: dict) -> str | None:
    """Why one rate's run of the webhook was saturated (see SATURATED_ANSWER_SHARE), or None."""
    parts = []
    if row["throughput"] < SATURATED_ANSWER_SHARE * row["rate"]:
        parts.append(f"answered {row['throughput']:.0f}/s of {row['rate']}/s asked")
    if row["p50_ms"] > SATURATED_P50_MS:
        parts.append(f"median {row['p50_ms']:.0f} ms")
    return "; ".join(parts) or None


def memory_incomplete(memory: dict) -> str | None:
    """A peak RSS says something only of a burst that bound every pod it was meant to."""
    if memory.get("complete") and memory.get("bound") == memory.get("pods"):
        return None
    return f"the memory burst did not complete: {memory.get('bound')} of {memory.get('pods')} pods bound"

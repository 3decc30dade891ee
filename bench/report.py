"""The report: results.json, a Markdown page of tables, and a PNG plot. Rendering is pure; write() does I/O."""

from __future__ import annotations

import json
import math
import shutil
from datetime import UTC, datetime
from pathlib import Path

from . import apiserver_work, targets
from .contenders import (
    BIND_WORKERS,
    CEILING_WORKERS,
    CPU_RATIOS,
    GPU_SCHEDULER_RUNNERS,
    KUBE_GPUS,
    LABELS,
    LEASE_DURATION_SECONDS,
    OUR_BURST,
    OUR_QPS,
    OURS_BIND,
    OURS_DYNAMIC,
    RATIO_LABELS,
    RATIOS,
    RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS,
    SHORT_LABELS,
)
from .cpuwork import SETTLE_TIMEOUT_SECONDS
from .kube_scheduler import PINNED_FILTERS
from .machine import PROBE_STATEMENT
from .paths import DEFAULT_OUT, RECORD_DIR
from .summary import (
    CPU_RATIO_GROUPS,
    SATURATED_ANSWER_SHARE,
    SATURATED_P50_MS,
    admission_saturation,
    headline_metrics,
    summarize_throughput,
)
from .throughput import MODES
from .workload import COUNT_MAP, NODE_GPUS

NOTE_SHARED = (
    "The machine is shared: other engineers' builds and tests may have run at the same time, "
    "and the apiserver, etcd, kwok, the scheduler under test and the load generators all share "
    "its cores. Each figure is the median of the complete rounds (min–max in brackets); ratios "
    "are taken per round between runs made side by side. CPU per pod (from /proc) is the figure "
    "that noise moves least."
)


def webhook_server(machine: dict) -> str:
    # Runs recorded before the webhook moved to granian (2026-11-28) do not say: gunicorn.
    return machine.get("webhook_server", "gunicorn")


def how(machine: dict, webhook_timeout_s: float | None) -> list[str]:
    """How each contender ran, with the versions read from the binaries (machine.describe) and the
    webhook timeout read from the chart."""
    return [
        "Runners run one at a time, in the rows of a Williams design: each leads a round in turn and comes "
        "right after each other one equally often. Every one watches every namespace "
        "(kube-scheduler cannot be narrowed to one); every scheduler elects itself leader on its own Lease in "
        f"the bench namespace (lease {LEASE_DURATION_SECONDS} s, renew deadline {RENEW_DEADLINE_SECONDS} s, "
        f"retry {RETRY_PERIOD_SECONDS} s for all) and counts as ready once it holds it; the bare binders elect none.",
        f"{machine.get('gpu_scheduler')} (commit {machine.get('commit')}) runs as in production: "
        f"{BIND_WORKERS} bind workers (its default, passed explicitly), client qps {OUR_QPS} / burst {OUR_BURST}, "
        "`--gpu-sharing=allow` (the bench's maps share GPUs once pods outnumber nodes x 8; sharing is not what "
        "is measured), info logging.",
        f"Its webhook runs as deployed (`gpu-scheduler webhook`: {webhook_server(machine)}, "
        "TLS, 2 workers, reading nodes as `webhook.readNodes` has it) and is registered with "
        "the chart's own configurations as a 1.35 API server gets them (mutate on pod CREATE, failurePolicy Fail, "
        f"timeout {num(webhook_timeout_s, 0)} s, matchConditions on the schedulerName and the bind entry) for a "
        "schedulerName of its own; the admission phase loads it, and no runner's pods go through it.",
        f'"{LABELS[OURS_BIND]}" is gpu-scheduler under a schedulerName which no webhook '
        "or policy of the bench matches (checked with a dry-run create before each of its runs): its pods carry, in "
        "every container, CUDA_VISIBLE_DEVICES read through a downward-API fieldRef from the annotation the "
        "scheduler writes in the Binding, and CUDA_DEVICE_ORDER=PCI_BUS_ID, so they are created with no admission "
        "call at all.",
        f"kube-scheduler ({machine.get('kube_scheduler')}), three ways: at its default client settings with its "
        f"default profile; at ours (qps {OUR_QPS}, burst {OUR_BURST}) with its default profile; and at ours "
        f"with a pinned-pod profile that runs only the filters gpu-scheduler runs too ({', '.join(PINNED_FILTERS)}), "
        "no scoring, no preemption: the same work as ours. Nothing else runs during a run.",
        f"The ceiling is the faster, per round, of two bare binders that post each pod's binding with no "
        f"decision (Go: {CEILING_WORKERS} connections; Python: {BIND_WORKERS} threads): what this apiserver "
        "binds when pods are admitted without a webhook call, as every runner's are; what gpu-scheduler's burst "
        "leaves below it is the price of its own work.",
        "Every pod carries both the map annotation and the equivalent required node affinity; only "
        "spec.schedulerName differs between runners. Pods are created by 32 threads over keep-alive "
        "connections with bodies serialised in advance.",
        f"The count-line runners (issue 50) place pods pinned to nothing, each wanting one GPU, over the same "
        f"nodes (each advertising {NODE_GPUS} nvidia.com/gpu and publishing no inventory, so both schedulers "
        f'know the same of them): "{LABELS[OURS_DYNAMIC]}" gets pods whose map is `{COUNT_MAP.strip()}` and chooses '
        f'node and GPU (bind mode: no admission call, checked as above); "{LABELS[KUBE_GPUS]}" gets as many pods '
        "that request nvidia.com/gpu: 1 and no map it reads. Their ratios are taken between the two, per round.",
        "kwok's pod stages run as they are (bound pods are marked Running), so its work is part of the "
        "control plane's CPU. Before the first measured round one run counts nowhere (a warm-up, so that no "
        "measured run is the first after the setup); then the control plane's rate at rest (its baseline, the "
        "lowest of five 2 s windows) is measured, and before each run the bench waits (up to 20 s) until the "
        "control plane is back within 0.05 cores of it.",
    ]


def num(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}{unit}"


def ms(seconds: float | None) -> str:
    return num(None if seconds is None else seconds * 1000, 0, " ms")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def run_name(results: dict) -> str:
    """How the README names a run: its date, mode and machine."""
    settings = results.get("settings") or {}
    m = results.get("machine") or {}
    mode = (
        "make bench-scale"
        if settings.get("scale")
        else ("make bench QUICK=1" if settings.get("quick") else "make bench")
    )
    modes = settings.get("modes")
    if not settings.get("scale") and modes and set(modes) != set(MODES):
        mode += f" BENCH_MODES={','.join(modes)}"  # a part of the throughput modes ran
    probe = f", Python speed probe {m['python_probe_us']:g} us" if m.get("python_probe_us") else ""
    return (
        f"`{mode}` of {str(results.get('started', '?'))[:16].replace('T', ' ')} UTC, "
        f"{m.get('cores')} cores ({m.get('cpu_model')}), {m.get('memory_gib')} GiB{probe}"
    )


def machine_lines(results: dict) -> list[str]:
    m = results.get("machine") or {}
    settings = results.get("settings") or {}
    lines = [
        f"Run: {run_name(results)}; {num(results.get('duration_s'), 0)} s in all.",
        "",
        f"Machine: {m.get('cores')} cores ({m.get('cpu_model')}), {m.get('memory_gib')} GiB, Linux {m.get('kernel')}, "
        f"load average at start {m.get('load_average_at_start')}, at the end {m.get('load_average_at_end')}"
        + (
            f", Python speed probe {m['python_probe_us']:g} us per `{PROBE_STATEMENT}` (lower is faster). "
            if m.get("python_probe_us")
            else ". "
        )
        + f"Python {m.get('python')}; {m.get('gpu_scheduler')} at commit {m.get('commit')}; kube-apiserver "
        f"{m.get('kube_apiserver')}; kube-scheduler {m.get('kube_scheduler')}; {m.get('kwok')}; {m.get('etcd')}; "
        f"vegeta {m.get('vegeta')}.",
    ]
    if settings.get("quick"):
        lines += [
            "",
            "**QUICK mode**: smaller sizes and one round, a check that everything works. Its sizes are not "
            "the targets' sizes (each target says the scale it is set for and the scale it was measured at), "
            "so its PASS/MISS is an indication, not the figure to quote.",
        ]
    return [*lines, "", NOTE_SHARED, "", *[f"- {line}" for line in how(m, results.get("webhook_timeout_s"))]]


def targets_lines(checked: list[dict]) -> list[str]:
    rows = [
        [
            t["description"],
            f"{t['op']} {t['threshold']:g} {t['unit']}",
            num(t["value"], 3 if t["unit"] in ("x", "s", "ms") else 1, f" {t['unit']}"),
            t["measured_at"] or "—",
            t["at"],
            f"**{t['status']}**" + (f" ({targets.shortfall(t)})" if t["status"] == targets.MISS else ""),
        ]
        for t in checked
    ]
    return table(["target", "wanted", "measured", "measured at", "set for", "status"], rows)


def verdict_text(results: dict) -> str:
    """PASS/MISS per target, one line each (printed at the end of `make bench`)."""
    lines = [f"targets ({run_name(results)}):"]
    for t in results.get("targets", []):
        value = num(t["value"], 3, f" {t['unit']}")
        miss = f" ({targets.shortfall(t)})" if t["status"] == targets.MISS else ""
        lines.append(f"  {t['status']:<12} {t['metric']}: {value} (wanted {t['op']} {t['threshold']:g}){miss}")
    return "\n".join(lines)


def ratio_lines(figures: dict) -> list[str]:
    rows = []
    for name in RATIOS:
        ratio = figures["ratios"].get(name)
        if ratio:
            rows.append(
                [
                    RATIO_LABELS[name],
                    ", ".join(num(r, 2) for r in ratio["per_round"]),
                    f"**{num(ratio['median'], 2)}x**",
                ]
            )
    return table(["pods/s ratio (per round, then median)", "per round", "median"], rows)


def cpu_ratio_lines(figures: dict) -> list[str]:
    names = {
        "runner": "the scheduler alone",
        "control_plane": "control plane",
        "total": "scheduler + webhook + control plane",
    }
    rows = []
    for name, (numerator, denominator) in CPU_RATIOS.items():
        for group in CPU_RATIO_GROUPS:
            ratio = (figures.get("cpu_ratios") or {}).get(name, {}).get(group)
            if ratio:
                rows.append(
                    [
                        f"{names[group]}: {LABELS[numerator]} / {LABELS[denominator]}",
                        ", ".join(num(r, 2) for r in ratio["per_round"]),
                        f"**{num(ratio['median'], 2)}x**",
                    ]
                )
    return table(["CPU per pod ratio (per round, then median)", "per round", "median"], rows) if rows else []


def _rate(s: dict) -> str:
    spread = f" ({num(s['pods_per_second_min'])}–{num(s['pods_per_second_max'])})" if s["runs"] > 1 else ""
    return num(s["pods_per_second"]) + spread


CPU_HEADER = "CPU ms per pod: scheduler / webhook / control plane"


def cpu_cell(s: dict) -> str:
    cpu = s.get("cpu_ms_per_pod") or {}
    return " / ".join(num(cpu.get(g), 2) for g in ("runner", "webhook", "control_plane"))


def _cpu_total(s: dict) -> str:
    total = num((s.get("cpu_ms_per_pod") or {}).get("total"), 2)
    if s["runs"] > 1:
        total += f" ({num(s['cpu_ms_per_pod_total_min'], 2)}–{num(s['cpu_ms_per_pod_total_max'], 2)})"
    return total


def _idle(s: dict) -> str:
    idle = s.get("idle_cores") or {}
    return " / ".join(num(idle.get(g), 2) for g in ("runner", "webhook", "control_plane"))


def _settle(s: dict) -> str:
    unsettled = s.get("unsettled") or 0
    plural = "s" if unsettled > 1 else ""
    timeout = s.get("settle_timeout_s") or SETTLE_TIMEOUT_SECONDS  # runs of record before it was kept: 20 s
    note = f" ({unsettled} run{plural} not settled in {timeout:g} s)" if unsettled else ""
    early = s.get("above_baseline_at_start") or 0
    if early:
        note += f" ({early} run{'s' if early > 1 else ''} started above the control plane's baseline)"
    return num(s.get("settle_s"), 1, " s") + note


def events_cell(s: dict) -> str:
    """Scheduled Events per pod sent inside the window, and the share of pods that got one."""
    per_pod, share = s.get("scheduled_events_per_pod"), s.get("scheduled_event_share")
    if per_pod is None or (isinstance(per_pod, float) and math.isnan(per_pod)):
        return "—"
    return f"{num(per_pod, 2)} ({num(None if share is None else share * 100, 0)}% of pods)"


def admission_cell(s: dict) -> str:
    """Webhook calls / admission policy evaluations per pod, from the apiserver's counters."""
    counted = s.get("admission_per_pod") or {}
    return " / ".join(num(counted.get(what), 2) for what in ("webhook_calls", "policy_checks"))


EVENTS_HEADER = "Scheduled Events per pod, sent inside the window"
ADMISSION_HEADER = "admission per pod: webhook calls / policy evaluations"


def _runs(s: dict) -> str:
    return str(s["runs"]) + (f" (+{len(s['incomplete'])} incomplete)" if s.get("incomplete") else "")


def _pod_diagnosis(pod: dict) -> str:
    parts = [
        pod["error"]
        if "error" in pod
        else f"phase {pod.get('phase')}, node {pod.get('node') or 'none'}, conditions "
        f"{[c.get('type') + '=' + str(c.get('status')) for c in pod.get('conditions') or []] or 'none'}"
    ]
    if "seen_by_bench_watch" in pod:
        parts.append("seen by the bench's watch" if pod["seen_by_bench_watch"] else "never seen by the bench's watch")
    bindings = pod.get("bindings")
    if isinstance(bindings, list):
        posted = ", ".join(f"{b.get('code')} to {b.get('by', '').split('/')[0]}" for b in bindings)
        parts.append(f"bindings posted: {posted or 'none'}")
    elif bindings:
        parts.append(str(bindings))
    return f"{pod['name']}: " + ", ".join(parts)


def diagnosis_text(diagnosis: dict | None) -> str:
    """What an incomplete run's unbound pods looked like (measure.unbound_diagnosis), in a line."""
    if not diagnosis:
        return ""
    pods = "; ".join(_pod_diagnosis(p) for p in diagnosis.get("unbound_pods") or [])
    queue = diagnosis.get("runner_queue")
    return f" (unbound: {pods}" + (f"; the scheduler's queue {queue}" if queue else "") + ")"


def incomplete_lines(*modes: tuple[str, dict]) -> list[str]:
    """Every incomplete run, by round and why; none is in any median or ratio."""
    lines = [
        f"- {mode}, round {item['round']}, {s['label']}: {item['reason']}{diagnosis_text(item.get('diagnosis'))}"
        for mode, figures in modes
        for s in (figures.get("summary") or {}).values()
        for item in s.get("incomplete", [])
    ]
    if not lines:
        return []
    return [
        "",
        "Incomplete runs (left out of every median and ratio; every target that reads their runner is a MISS):",
        "",
        *lines,
    ]


def burst_table(summary: dict) -> list[str]:
    rows = [
        [
            label,
            _runs(s),
            _rate(s),
            ms(s["latency_p50_s"]),
            ms(s["latency_p99_s"]),
            ms(s["create_p99_s"]),
            str(s["create_retries"]),
            cpu_cell(s),
            _cpu_total(s),
            events_cell(s),
            admission_cell(s),
            num(s["peak_rss_mib"], 0, " MiB"),
            _idle(s),
            _settle(s),
        ]
        for key, label in LABELS.items()
        if (s := summary.get(key))
    ]
    return table(
        [
            "runner",
            "rounds",
            "pods/s",
            "p50",
            "p99",
            "create p99",
            "creates retried",
            CPU_HEADER,
            "CPU ms per pod, all",
            EVENTS_HEADER,
            ADMISSION_HEADER,
            "peak RSS",
            "idle cores subtracted: scheduler / webhook / control plane",
            "settled after the last bind",
        ],
        rows,
    )


def apiserver_work_lines(summary: dict) -> list[str]:
    """What each pod of a burst asked of the apiserver, per runner, from its own counters."""
    counted = {key: s["apiserver_per_pod"] for key in LABELS if (s := summary.get(key)) and s.get("apiserver_per_pod")}
    rows = apiserver_work.shown_rows(counted)
    if not rows:
        return []
    return [
        "",
        "What each pod asked of kube-apiserver (its own counters, /metrics, over the CPU window; medians "
        "of the rounds): requests by verb and resource, watch events sent, etcd operations. The bench's "
        "creates and bind watch are in every column alike; a watch is counted when it ends. Rows under "
        f"{apiserver_work.SHOWN_PER_POD} per pod for every runner are left out.",
        "",
        *table(
            ["per pod", *(LABELS[key] for key in counted)],
            [[what, *(num(counts.get(what, 0.0), 2) for counts in counted.values())] for what in rows],
        ),
    ]


def throughput_lines(tp: dict) -> list[str]:
    burst, drain = tp.get("burst") or {}, tp.get("drain") or {}
    lines = [
        f"{tp['pods']} bare pods on {tp['nodes']} KWOK nodes per run, maps shared by groups of "
        f"{tp['group']} pods (the count-line runners: one map, `{COUNT_MAP.strip()}`, or a request of "
        "nvidia.com/gpu: 1, and no node named); medians over the complete rounds."
    ]
    if burst.get("summary"):
        lines += [
            "",
            "**Burst** (the clock runs from the first create request to the last bind). Latency is from "
            'a pod\'s create request to the watch seeing its spec.nodeName; "create p99" is the create '
            "request alone; a create answered "
            "429/5xx (such as a webhook timeout) is sent again and counted. CPU is the work each process "
            "group did for the burst (from /proc): from just before the first pod is created until the "
            "groups have settled after the last bind (back to their idle rates), minus each group's idle "
            "rate, measured over the 2 s before, times that window (the rates subtracted are in the "
            "table); in milliseconds per pod bound, i.e. CPU seconds per 1,000 pods (control plane: etcd, "
            "kube-apiserver, kube-controller-manager, kwok; the webhook, which no runner's pod calls, idles). "
            "Scheduled Events per pod are those about the run's pods whose time "
            "falls inside that window (listed from the API as it closes; in brackets, the share of the pods "
            "bound that got one); webhook calls and admission policy evaluations per pod are kube-apiserver's "
            "own counters over the same window.",
            "",
            *burst_table(burst["summary"]),
            "",
            *ratio_lines(burst),
            "",
            *cpu_ratio_lines(burst),
            *apiserver_work_lines(burst["summary"]),
        ]
    if drain.get("summary"):
        lines += [
            "",
            "**Drain** (the pods are created first with no runner up; then the runner starts on the "
            "backlog; rate = binds per second from its first bind to its last). Admission and creation are "
            "out of the clock: this is each runner's own binding capacity here. CPU is counted from the "
            "runner's launch (its start-up included) until the groups have settled, minus the webhook's and "
            "the control plane's idle rates (the runner is not running before its launch).",
            "",
        ]
        rows = [
            [
                label,
                _runs(s),
                _rate(s),
                num(s["launch_to_first_bind_s"], 2, " s"),
                num(s["attempt_ms"], 1, " ms") if key in GPU_SCHEDULER_RUNNERS else "—",
                cpu_cell(s),
                events_cell(s),
                num(s["peak_rss_mib"], 0, " MiB"),
            ]
            for key, label in LABELS.items()
            if (s := drain["summary"].get(key))
        ]
        lines += table(
            [
                "runner",
                "rounds",
                "pods/s",
                "start → first bind",
                "mean attempt (its /metrics)",
                CPU_HEADER,
                EVENTS_HEADER,
                "peak RSS",
            ],
            rows,
        )
        lines += ["", *ratio_lines(drain)]
    lines += incomplete_lines(("burst", burst), ("drain", drain))
    return lines


def profile_cost_lines(tp: dict) -> list[str]:
    """What kube-scheduler's default profile costs over the pinned-pod one, at the same client settings."""
    summary = (tp.get("burst") or {}).get("summary") or {}
    default, pinned = summary.get("kube_matched"), summary.get("kube_pinned")
    if not default or not pinned:
        return []
    d, p = default["cpu_ms_per_pod"], pinned["cpu_ms_per_pod"]
    return [
        "",
        f"kube-scheduler's two profiles at our client settings: the default one spent "
        f"{num(d['runner'], 2)} CPU ms per pod in kube-scheduler and {num(d['control_plane'], 2)} in the control "
        f"plane; the pinned-pod one {num(p['runner'], 2)} and {num(p['control_plane'], 2)}; pods/s "
        f"{num(default['pods_per_second'])} and {num(pinned['pods_per_second'])}.",
    ]


def statefulset_lines(sts: dict, tp: dict | None) -> list[str]:
    ours = ((tp or {}).get("burst") or {}).get("summary", {}).get(OURS_BIND)
    bare = (f"bare pods, {tp['group']}-line maps", ours) if ours else None
    rows = [
        ["pods/s bound", num(ours["pods_per_second"]) if ours else "—", num(sts["pods_per_second"])],
        [
            "pods/s created (by whom)",
            "— (the bench's creator)",
            f"{num(sts['created_per_second'])} (kube-controller-manager)",
        ],
        ["seen→bound p50", ms(ours["seen_to_bound_p50_s"]) if ours else "—", ms(sts["seen_to_bound_p50_s"])],
        ["seen→bound p99", ms(ours["seen_to_bound_p99_s"]) if ours else "—", ms(sts["seen_to_bound_p99_s"])],
        [
            "scheduler's mean attempt (its /metrics)",
            num(ours["attempt_ms"], 2, " ms") if ours else "—",
            num(sts["attempt_ms"], 2, " ms"),
        ],
    ]
    header = ["gpu-scheduler", bare[0] if bare else "bare pods", f"StatefulSet, {sts['replicas']}-line map"]
    return [
        f"A real apps/v1 StatefulSet (podManagementPolicy Parallel) of {sts['replicas']} replicas; "
        "kube-controller-manager creates its pods at its own client rate, so compare seen→bound latency "
        "and the attempt time for the effect of the map's size.",
        "",
        *table(header, rows),
    ]


def _saturated(row: dict) -> str:
    if row.get("not_run"):
        return f"not run: {row['not_run']}"
    why = admission_saturation(row)
    return f"**yes**: {why}" if why else "no"


def admission_lines(adm: dict, server: str) -> list[str]:
    lines = [
        f"POST {adm['endpoint']} (an AdmissionReview for a pod with a {adm['map_lines']}-line map) against "
        f"`gpu-scheduler webhook` ({server}, TLS, {adm['workers']} workers) with vegeta at constant rates, on "
        f"the same machine; vegeta gives up on a request after {num(adm.get('client_timeout_s'), 0)} s, the "
        "chart's webhook timeoutSeconds, as the apiserver would. The highest rate is held longest. The "
        "webhook's CPU is read from /proc around each run. A rate is **saturated** when the webhook answered "
        f"fewer than {SATURATED_ANSWER_SHARE:.0%} of the requests per second asked (answers over the run plus "
        f"the wait for the last ones) or its median answer took over {SATURATED_P50_MS:g} ms (a backlog); "
        "every target at a saturated rate is a MISS, whatever its error count.",
    ]
    for workload in adm.get("workloads", []):
        rows = [
            [
                f"{r['rate']}/s for {r['duration_s']:g} s",
                num(r["achieved_rate"], 0),
                num(r["throughput"], 0),
                f"{r['requests']:,}",
                num(r["p50_ms"], 2, " ms"),
                num(r["p99_ms"], 2, " ms"),
                num(r["max_ms"], 1, " ms"),
                "—" if r["errors"] is None else str(r["errors"]),
                num(r.get("cpu_ms_per_request"), 3, " ms"),
                _saturated(r),
            ]
            for r in workload["rates"]
        ]
        header = ["rate", "sent/s", "answered/s", "requests", "p50", "p99", "max", "errors"]
        lines += [
            "",
            f"**{workload['maps'].capitalize()}**",
            "",
            *table([*header, "webhook CPU per request", "saturated"], rows),
        ]
    return lines + stack_floor_lines(adm)


# The webhook ran on gunicorn's gthread worker until 2026-11-27, on its gevent worker
# until 2026-11-28, on granian since; each run lists its own first.
FLOOR_SERVERS = {
    "gthread": "gunicorn, gthread worker (32 threads)",
    "gevent": "gunicorn, gevent worker",
    "granian": "granian (WSGI)",
}
FLOOR_APPS = {
    "gunicorn": "a bare WSGI app answering a fixed review",
    "flask": "the same answer from a Flask route",
}


def floor_label(row: dict) -> str:
    # Rows of runs before the servers were compared side by side have no "server": gthread's.
    server = row.get("server", "gthread")
    return f"{FLOOR_SERVERS.get(server, server)}, TLS, {FLOOR_APPS.get(row['app'], row['app'])}"


def stack_floor_lines(adm: dict) -> list[str]:
    """The stack's floor beside the webhook at the same rate (repeated map): what is whose."""
    floor = adm.get("stack_floor") or []
    if not floor:
        return []
    rate = floor[0]["rate"]
    ours = next(
        (r for w in adm.get("workloads", []) if w["key"] == "repeated" for r in w["rates"] if r["rate"] == rate),
        None,
    )
    rows = [
        [
            floor_label(f),
            num(f["p99_ms"], 2, " ms"),
            str(f["errors"]),
            num(f["cpu_ms_per_request"], 3, " ms"),
        ]
        for f in floor
    ]
    if ours:
        rows.append(
            [
                "gpu-scheduler webhook (admission, logging, metrics), one map repeated",
                num(ours["p99_ms"], 2, " ms"),
                str(ours["errors"]),
                num(ours.get("cpu_ms_per_request"), 3, " ms"),
            ]
        )
    return [
        "",
        f"**The stack's floor** at {rate}/s (`bench/stack_floor.py`): the webhook's server (the first), and the "
        "WSGI servers it could run on, with no admission behind them: the difference between the webhook's row "
        "and the first server's is what our code costs per request, the rows below it what another server would "
        "save.",
        "",
        *table(["server", "p99", "errors", "CPU per request"], rows),
    ]


def memory_lines(mem: dict, server: str) -> list[str]:
    wh = mem["webhook"]
    rows = [
        [
            f"gpu-scheduler ({mem['bound']:,} pods bound by it, {mem['nodes']:,} bench nodes cached)",
            num(mem["scheduler_peak_rss_mib"], 0, " MiB"),
            num(mem["scheduler_rss_after_mib"], 0, " MiB"),
        ],
        [
            f"webhook, largest of {wh['processes']} processes ({server} master + workers)",
            num(wh["max_mib"], 0, " MiB"),
            "—",
        ],
        [
            f"webhook, sum of {wh['processes']} processes (counts shared pages more than once)",
            num(wh["sum_mib"], 0, " MiB"),
            "—",
        ],
        [
            f"webhook, PSS summed over its {wh['processes']} processes after the burst (each page once: "
            "near what its container is charged)",
            "—",
            num(wh.get("pss_sum_mib"), 0, " MiB"),
        ],
    ]
    return [
        f"Peak RSS (VmHWM). The {mem['pods']:,} pods were bound by a freshly started gpu-scheduler at "
        f"{num(mem['pods_per_second'])} pods/s (p99 {ms(mem['latency_s']['p99'])}); the webhook has answered "
        "the admission phase's load by then.",
        "",
        *table(["process", "peak RSS", "RSS (PSS where said) after the burst"], rows),
    ]


def scale_lines(sc: dict) -> list[str]:
    lines = [
        f"One burst of {sc['pods']:,} pods over {sc['nodes']:,} KWOK nodes per runner and round, as in the "
        "throughput phase (the count-line runners' pods name no node); peak RSS is each scheduler's VmHWM with "
        "every node and every pod in its caches.",
        "",
        *burst_table(sc["summary"]),
        "",
        *ratio_lines(sc),
        "",
        *cpu_ratio_lines(sc),
    ]
    return lines + incomplete_lines(("scale", sc))


def profile_lines(tp: dict) -> list[str]:
    """gpu-scheduler's top functions in its last profiled run of each mode (BENCH_PROFILE=1), for each
    gpu-scheduler runner."""
    lines = []
    for mode, key in ((mode, key) for mode in ("burst", "drain") for key in GPU_SCHEDULER_RUNNERS):
        profiled = [
            r
            for r in (tp.get(mode) or {}).get("runs", [])
            if r.get("profile", {}).get("samples") and r.get("key") == key
        ]
        if not profiled:
            continue
        run = profiled[-1]
        prof = run["profile"]
        rows = [
            [
                f"{num(own['share'] * 100, 1)}% {own['function']}" if own else "",
                f"{num(inc['share'] * 100, 1)}% {inc['function']}" if inc else "",
            ]
            for own, inc in zip(prof["self"], prof["inclusive"], strict=False)
        ]
        lines += [
            "",
            f"{mode}, {LABELS[key]}, round {run['round']} ({prof['samples']:,} samples at 100/s, "
            + (
                "of the thread holding the GIL: the Python CPU):"
                if prof.get("gil")
                else "over all threads, py-spy leaves idle threads out):"
            ),
            "",
            *table(["self (the function itself)", "inclusive (with callees)"], rows),
        ]
    return lines


def render_markdown(results: dict, checked: list[dict]) -> str:
    title = "gpu-scheduler scale run" if (results.get("settings") or {}).get("scale") else "gpu-scheduler benchmark"
    lines = [f"# {title}", "", *machine_lines(results), "", "## Targets", "", *targets_lines(checked)]
    if results.get("throughput"):
        lines += ["", "## 1. Scheduling throughput, latency and CPU", "", *throughput_lines(results["throughput"])]
        lines += profile_cost_lines(results["throughput"])
        profiled = profile_lines(results["throughput"])
        if profiled:
            lines += ["", "### Where gpu-scheduler's time goes (py-spy)", *profiled]
    if results.get("statefulset"):
        lines += [
            "",
            "## 2. A big map: StatefulSet",
            "",
            *statefulset_lines(results["statefulset"], results.get("throughput")),
        ]
    if results.get("admission"):
        lines += [
            "",
            "## 3. Admission latency and CPU",
            "",
            *admission_lines(results["admission"], webhook_server(results.get("machine") or {})),
        ]
    if results.get("memory"):
        lines += [
            "",
            "## 4. Memory",
            "",
            *memory_lines(results["memory"], webhook_server(results.get("machine") or {})),
        ]
    if results.get("scale"):
        lines += ["", "## Scale: scheduler_perf's size", "", *scale_lines(results["scale"])]
        # The scale run's bursts, profiled like the throughput phase's (BENCH_PROFILE).
        profiled = profile_lines({"burst": results["scale"]})
        if profiled:
            lines += ["", "### Where gpu-scheduler's time goes at this scale (py-spy)", *profiled]
    if results.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {phase}: {error}" for phase, error in results["errors"].items()]
    return "\n".join(lines) + "\n"


def _throughput_axis(ax, tp: dict, modes: list[str], title: str) -> None:
    keys = [k for k in LABELS if any(k in tp[m]["summary"] for m in modes)]
    width = 0.8 / max(1, len(modes))
    for offset, mode in enumerate(modes):
        summary = tp[mode]["summary"]
        medians = [summary[k]["pods_per_second"] if k in summary else 0 for k in keys]
        low = [summary[k]["pods_per_second_min"] if k in summary else 0 for k in keys]
        high = [summary[k]["pods_per_second_max"] if k in summary else 0 for k in keys]
        errors = [
            [0 if math.isnan(m - lo) else m - lo for m, lo in zip(medians, low, strict=True)],
            [0 if math.isnan(hi - m) else hi - m for m, hi in zip(medians, high, strict=True)],
        ]
        ax.bar(
            [i + (offset - (len(modes) - 1) / 2) * width for i in range(len(keys))],
            medians,
            width,
            yerr=errors,
            capsize=3,
            label=mode,
        )
    ax.set_xticks(range(len(keys)), [SHORT_LABELS[k] for k in keys])
    ax.set_ylabel("pods bound per second (median, min–max)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend()


def _cpu_axis(ax, summary: dict) -> None:
    keys = [k for k in LABELS if k in summary]
    bottom = [0.0] * len(keys)
    for group, name in (("runner", "scheduler"), ("webhook", "webhook"), ("control_plane", "control plane")):
        values = [summary[k]["cpu_ms_per_pod"][group] for k in keys]
        values = [0 if math.isnan(v) else v for v in values]
        ax.bar(range(len(keys)), values, 0.6, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(range(len(keys)), [SHORT_LABELS[k] for k in keys])
    ax.set_ylabel("CPU ms per pod (median)")
    ax.set_title("CPU per pod of a burst")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend()


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tp, adm, sc = results.get("throughput"), results.get("admission"), results.get("scale")
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(18, 5))
    if tp:
        modes = [m for m in ("burst", "drain") if (tp.get(m) or {}).get("summary")]
        if modes:
            _throughput_axis(left, tp, modes, f"Throughput: {tp['pods']} pods, {tp['nodes']} nodes")
        if (tp.get("burst") or {}).get("summary"):
            _cpu_axis(middle, tp["burst"]["summary"])
    elif sc:
        _throughput_axis(left, {"scale": sc}, ["scale"], f"Throughput: {sc['pods']:,} pods, {sc['nodes']:,} nodes")
        _cpu_axis(middle, sc["summary"])
    if adm and adm.get("workloads"):
        width = 0.8 / (2 * len(adm["workloads"]))
        rates = [r["rate"] for r in adm["workloads"][0]["rates"]]
        position = 0
        for workload in adm["workloads"]:
            for field, name in (("p50_ms", "p50"), ("p99_ms", "p99")):
                right.bar(
                    [i + (position - (2 * len(adm["workloads"]) - 1) / 2) * width for i in range(len(rates))],
                    [r[field] for r in workload["rates"]],
                    width,
                    label=f"{name}, {workload['key']} maps",
                )
                position += 1
        right.set_xticks(range(len(rates)), [f"{r}/s" for r in rates])
        right.set_yscale("log")
        right.set_ylabel("latency (ms, log scale)")
        right.set_title("Webhook /mutate latency at constant rates")
        right.legend(fontsize=7)
    fig.suptitle(f"gpu-scheduler bench — {run_name(results).replace('`', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def json_safe(value):
    """NaN (a figure that could not be measured) becomes null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _nan_again(value):
    """results.json's nulls back to NaN where a figure is expected (for rerender)."""
    if value is None:
        return math.nan
    if isinstance(value, dict):
        return {k: _nan_again(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_again(v) for v in value]
    return value


def write(results: dict, out: Path) -> dict:
    kind = "scale" if (results.get("settings") or {}).get("scale") else "bench"
    results["targets"] = targets.evaluate(targets.load(run=kind), headline_metrics(results))
    markdown = render_markdown(results, results["targets"])
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "bench.png"}
    paths["json"].write_text(json.dumps(json_safe(results), indent=2, default=str) + "\n")
    paths["markdown"].write_text(markdown)
    plot(results, paths["plot"])
    return {**paths, "markdown_text": markdown}


def record_stamp(results: dict) -> str:
    """A run of record's file name without suffix: its UTC start to the minute, and its kind."""
    started = datetime.fromisoformat(results["started"]).astimezone(UTC)
    kind = "scale" if (results.get("settings") or {}).get("scale") else "bench"
    return f"{started:%Y-%m-%d-%H%M}-{kind}"


def record(results: dict, plot_path: Path, directory: Path = RECORD_DIR) -> dict[str, Path]:
    """Keeps a run of record in the repository: its results (as results.json has them) and its plot,
    named by its UTC start (`docs/bench/2026-11-24-1410-bench.json` and `.png`). The README's
    benchmark table is made from such a file (bench/readme.py). A kept record is never overwritten."""
    stamp = record_stamp(results)
    kept = {"json": directory / f"{stamp}.json", "plot": directory / f"{stamp}.png"}
    for path in kept.values():
        if path.exists():
            raise FileExistsError(f"{path} is already kept; a run of record is never overwritten")
    directory.mkdir(parents=True, exist_ok=True)
    kept["json"].write_text(json.dumps(json_safe(results), indent=2, default=str) + "\n")
    shutil.copyfile(plot_path, kept["plot"])
    return kept


def rerender(out: Path) -> dict:
    """Writes the report again from out/results.json: its runs are summarised anew, so a change
    to the targets, the ratios or the tables needs no new measurement."""
    results = json.loads((out / "results.json").read_text())
    for figures in [*((results.get("throughput") or {}).get(m) for m in ("burst", "drain")), results.get("scale")]:
        if figures:
            figures["runs"] = [_nan_again(r) for r in figures["runs"]]
            figures.update(summarize_throughput(figures["runs"]))
    return write(results, out)


if __name__ == "__main__":
    import sys

    written = rerender(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
    print(written["markdown_text"])
    print(verdict_text(json.loads(written["json"].read_text())))

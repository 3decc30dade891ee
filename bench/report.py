"""The report: results.json, a Markdown page of tables, and a PNG plot. Rendering is pure; write() does I/O."""

from __future__ import annotations

import json
import math
from pathlib import Path

from . import targets
from .contenders import LABELS, RATIO_LABELS, RATIOS, SHORT_LABELS
from .paths import DEFAULT_OUT
from .summary import headline_metrics, summarize_throughput

NOTE_SHARED = (
    "The machine is shared: other engineers' builds and tests may have run at the same time, "
    "and the apiserver, etcd, kwok, the scheduler under test and the load generators all share "
    "its cores. Each figure is the median of the rounds; ratios are taken per round between "
    "runs made side by side."
)
HOW = [
    "gpu-scheduler runs as in production: leader election on (a Lease in the bench namespace), 16 bind workers, "
    "client qps 500 / burst 1000, `--gpu-sharing=allow` (the bench's maps share GPUs once pods outnumber "
    "nodes x 8; sharing is not what is measured), info logging.",
    "Its webhook runs as deployed (`gpu-scheduler webhook`: gunicorn, TLS, 2 workers) and is registered with "
    "the chart's own configurations (mutate + validate on pod CREATE, failurePolicy Fail, timeout 5 s, "
    "matchConditions on the schedulerName), so its pods pay admission as in production; the other runners' "
    "pods do not go through it.",
    "kube-scheduler v1.34 runs the default profile, leader election off; nothing else runs during a run.",
    "Every pod carries both the map annotation and the equivalent required node affinity; only "
    "spec.schedulerName differs between runners. Pods are created by 32 threads over keep-alive "
    "connections with bodies serialised in advance.",
    "kwok's pod stages run as they are (bound pods are marked Running), so its work is part of the "
    "control plane's CPU. Before each run the bench waits (up to 20 s) for the control plane to go quiet.",
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


def machine_lines(results: dict) -> list[str]:
    m = results.get("machine") or {}
    quick = " in QUICK mode (smaller sizes, one round)" if (results.get("settings") or {}).get("quick") else ""
    return [
        f"Measured {results.get('started', '?')}{quick}, {num(results.get('duration_s'), 0)} s in all.",
        "",
        f"Machine: {m.get('cores')} cores ({m.get('cpu_model')}), {m.get('memory_gib')} GiB, Linux {m.get('kernel')}, "
        f"load average at start {m.get('load_average_at_start')}. Python {m.get('python')}; {m.get('gpu_scheduler')}; "
        f"kube-apiserver and kube-scheduler {m.get('kube_apiserver')}; {m.get('kwok')}; {m.get('etcd')}; "
        f"vegeta {m.get('vegeta')}.",
        "",
        NOTE_SHARED,
        "",
        *[f"- {line}" for line in HOW],
    ]


def targets_lines(checked: list[dict]) -> list[str]:
    rows = [
        [
            t["description"],
            f"{t['op']} {t['threshold']:g} {t['unit']}",
            num(t["value"], 3 if t["unit"] in ("x", "s") else 1, f" {t['unit']}"),
            t["measured_at"] or "—",
            t["at"],
            f"**{t['status']}**",
        ]
        for t in checked
    ]
    return table(["target", "wanted", "measured", "measured at", "set for", "status"], rows)


def ratio_lines(figures: dict) -> list[str]:
    return table(
        ["ratio (per round, then median)", "per round", "median"],
        [
            [
                RATIO_LABELS[name],
                ", ".join(num(r, 2) for r in figures["ratios"][name]["per_round"]),
                f"**{num(figures['ratios'][name]['median'], 2)}x**",
            ]
            for name in RATIOS
            if name in figures["ratios"]
        ],
    )


def _rate(s: dict) -> str:
    spread = f" ({num(s['pods_per_second_min'])}–{num(s['pods_per_second_max'])})" if s["runs"] > 1 else ""
    return num(s["pods_per_second"]) + spread


CPU_HEADER = "CPU s per 1,000 pods: runner / webhook / control plane"


def _cpu(s: dict) -> str:
    cpu = s.get("cpu_s_per_1000_pods") or {}
    return " / ".join(num(cpu.get(g), 1) for g in ("runner", "webhook", "control_plane"))


def _all_bound(s: dict) -> str:
    return "yes" if s["complete"] and not s["create_errors"] else f"NO ({s['create_errors']} create errors)"


def throughput_lines(tp: dict) -> list[str]:
    burst, drain = tp.get("burst") or {}, tp.get("drain") or {}
    rounds = max((s["runs"] for s in (burst.get("summary") or drain.get("summary") or {}).values()), default=0)
    lines = [
        f"{tp['pods']} bare pods on {tp['nodes']} KWOK nodes per run, maps shared by groups of "
        f"{tp['group']} pods; median of {rounds} round(s)."
    ]
    if burst.get("summary"):
        lines += [
            "",
            "**Burst** (the clock runs from the first create request to the last bind). Latency is from "
            'a pod\'s create request to the watch seeing its spec.nodeName; "create p99" is the create '
            "request alone, which for gpu-scheduler includes its admission webhook; a create answered "
            "429/5xx (such as a webhook timeout) is sent again and counted. CPU is what each process "
            "group used during the run, per 1,000 pods bound (control plane: etcd, kube-apiserver, "
            "kube-controller-manager, kwok).",
            "",
        ]
        rows = [
            [
                label,
                _rate(s),
                ms(s["latency_p50_s"]),
                ms(s["latency_p99_s"]),
                ms(s["create_p99_s"]),
                str(s["create_retries"]),
                _cpu(s),
                num(s["peak_rss_mib"], 0, " MiB"),
                _all_bound(s),
            ]
            for key, label in LABELS.items()
            if (s := burst["summary"].get(key))
        ]
        lines += table(
            ["runner", "pods/s", "p50", "p99", "create p99", "creates retried", CPU_HEADER, "peak RSS", "all bound"],
            rows,
        )
        lines += ["", *ratio_lines(burst)]
    if drain.get("summary"):
        lines += [
            "",
            "**Drain** (the pods are created first with no runner up; then the runner starts on the "
            "backlog; rate = binds per second from its first bind to its last). Admission and creation are "
            "out of the clock: this is each runner's own binding capacity here. CPU is counted from the "
            "runner's launch (its start-up included).",
            "",
        ]
        rows = [
            [
                label,
                _rate(s),
                num(s["launch_to_first_bind_s"], 2, " s"),
                num(s["attempt_ms"], 1, " ms") if key == "ours" else "—",
                _cpu(s),
                num(s["peak_rss_mib"], 0, " MiB"),
                _all_bound(s),
            ]
            for key, label in LABELS.items()
            if (s := drain["summary"].get(key))
        ]
        lines += table(
            [
                "runner",
                "pods/s",
                "start → first bind",
                "mean attempt (its /metrics)",
                CPU_HEADER,
                "peak RSS",
                "all bound",
            ],
            rows,
        )
        lines += ["", *ratio_lines(drain)]
    return lines


def statefulset_lines(sts: dict, tp: dict | None) -> list[str]:
    ours = ((tp or {}).get("burst") or {}).get("summary", {}).get("ours")
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


def admission_lines(adm: dict) -> list[str]:
    rows = [
        [
            f"{r['rate']}/s",
            num(r["achieved_rate"], 0),
            f"{r['requests']:,}",
            num(r["p50_ms"], 2, " ms"),
            num(r["p99_ms"], 2, " ms"),
            num(r["max_ms"], 1, " ms"),
            str(r["errors"]),
        ]
        for r in adm["rates"]
    ]
    return [
        f"POST {adm['endpoint']} (an AdmissionReview for a pod with a {adm['map_lines']}-line map) against "
        f"`gpu-scheduler webhook` (gunicorn, TLS, {adm['workers']} workers) with vegeta at constant rates.",
        "",
        *table(["rate", "achieved", "requests", "p50", "p99", "max", "errors"], rows),
    ]


def memory_lines(mem: dict) -> list[str]:
    wh = mem["webhook"]
    rows = [
        [
            f"gpu-scheduler ({mem['bound']:,} pods bound by it, {mem['nodes']:,} bench nodes cached)",
            num(mem["scheduler_peak_rss_mib"], 0, " MiB"),
            num(mem["scheduler_rss_after_mib"], 0, " MiB"),
        ],
        [
            f"webhook, largest of {wh['processes']} processes (gunicorn master + workers)",
            num(wh["max_mib"], 0, " MiB"),
            "—",
        ],
        [
            f"webhook, sum of {wh['processes']} processes (counts shared pages more than once)",
            num(wh["sum_mib"], 0, " MiB"),
            "—",
        ],
    ]
    return [
        f"Peak RSS (VmHWM). The {mem['pods']:,} pods were bound by a freshly started gpu-scheduler at "
        f"{num(mem['pods_per_second'])} pods/s (p99 {ms(mem['latency_s']['p99'])}); the webhook has served "
        "every pod of the benchmark by then.",
        "",
        *table(["process", "peak RSS", "RSS after the burst"], rows),
    ]


def profile_lines(tp: dict) -> list[str]:
    """gpu-scheduler's top functions in its last profiled run of each mode (BENCH_PROFILE=1)."""
    lines = []
    for mode in ("burst", "drain"):
        profiled = [r for r in (tp.get(mode) or {}).get("runs", []) if r.get("profile", {}).get("samples")]
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
            f"{mode}, round {run['round']} ({prof['samples']:,} samples at 100/s over all threads, "
            "py-spy leaves idle threads out):",
            "",
            *table(["self (the function itself)", "inclusive (with callees)"], rows),
        ]
    return lines


def render_markdown(results: dict, checked: list[dict]) -> str:
    lines = ["# gpu-scheduler benchmark", "", *machine_lines(results), "", "## Targets", "", *targets_lines(checked)]
    if results.get("throughput"):
        lines += ["", "## 1. Scheduling throughput and latency", "", *throughput_lines(results["throughput"])]
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
        lines += ["", "## 3. Admission latency", "", *admission_lines(results["admission"])]
    if results.get("memory"):
        lines += ["", "## 4. Memory", "", *memory_lines(results["memory"])]
    if results.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {phase}: {error}" for phase, error in results["errors"].items()]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tp, adm = results.get("throughput"), results.get("admission")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    if tp:
        modes = [m for m in ("burst", "drain") if (tp.get(m) or {}).get("summary")]
        keys = [k for k in LABELS if any(k in tp[m]["summary"] for m in modes)]
        width = 0.8 / max(1, len(modes))
        for offset, mode in enumerate(modes):
            summary = tp[mode]["summary"]
            medians = [summary[k]["pods_per_second"] if k in summary else 0 for k in keys]
            errors = [
                [
                    m - summary[k]["pods_per_second_min"] if k in summary else 0
                    for k, m in zip(keys, medians, strict=True)
                ],
                [
                    summary[k]["pods_per_second_max"] - m if k in summary else 0
                    for k, m in zip(keys, medians, strict=True)
                ],
            ]
            left.bar(
                [i + (offset - (len(modes) - 1) / 2) * width for i in range(len(keys))],
                medians,
                width,
                yerr=errors,
                capsize=3,
                label=mode,
            )
        left.set_xticks(range(len(keys)), [SHORT_LABELS[k] for k in keys])
        left.set_ylabel("pods bound per second (median, min–max)")
        left.set_title(f"Throughput: {tp['pods']} pods, {tp['nodes']} nodes")
        left.tick_params(axis="x", labelsize=8)
        left.legend()
    if adm:
        rates = [r["rate"] for r in adm["rates"]]
        width = 0.25
        for offset, (field, name) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"), ("max_ms", "max"))):
            right.bar(
                [i + (offset - 1) * width for i in range(len(rates))],
                [r[field] for r in adm["rates"]],
                width,
                label=name,
            )
        right.set_xticks(range(len(rates)), [f"{r}/s" for r in rates])
        right.set_yscale("log")
        right.set_ylabel("latency (ms, log scale)")
        right.set_title("Webhook /mutate latency at constant rates")
        right.legend()
    m = results.get("machine") or {}
    fig.suptitle(
        f"gpu-scheduler bench — {m.get('cores')} cores {m.get('cpu_model')}, {results.get('started')}", fontsize=10
    )
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


def write(results: dict, out: Path) -> dict:
    results["targets"] = targets.evaluate(targets.load(), headline_metrics(results))
    markdown = render_markdown(results, results["targets"])
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "bench.png"}
    paths["json"].write_text(json.dumps(json_safe(results), indent=2, default=str) + "\n")
    paths["markdown"].write_text(markdown)
    plot(results, paths["plot"])
    return {**paths, "markdown_text": markdown}


def rerender(out: Path) -> dict:
    """Writes the report again from out/results.json: its runs are summarised anew, so a change
    to the targets, the ratios or the tables needs no new measurement."""
    results = json.loads((out / "results.json").read_text())
    for mode in ("burst", "drain"):
        figures = (results.get("throughput") or {}).get(mode)
        if figures:
            figures.update(summarize_throughput(figures["runs"]))
    return write(results, out)


if __name__ == "__main__":
    import sys

    written = rerender(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
    print(written["markdown_text"])

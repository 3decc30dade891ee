"""`make bench`: run every phase on the local control plane, then write the report.

    .venv/bin/python -m bench.run [--quick] [--phases throughput,statefulset,admission,memory]
    .venv/bin/python -m bench.run --scale      # `make bench-scale`: 5,000 nodes, 10,000 pods

Every size is a flag with an environment variable (BENCH_PODS, BENCH_NODES,
...), so `make bench BENCH_PODS=10000` works. The cluster is brought up if it
is not (scripts/local-up.sh) and left as it was found: stopped again if this
run started it, else only the bench namespace, nodes and webhook
configurations are removed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import config as kube_config

from . import admission, contenders, machine, memory, profile, report, scale, statefulset, throughput
from .chart import webhook_timeout_seconds, webhook_workers
from .cluster import BenchCluster, cluster_answers, local_script
from .context import NAMESPACE, OUR_SCHEDULER, Bench, Settings
from .kubeapi import KubeApi
from .paths import DEFAULT_OUT, LOCAL_CLUSTER_DIR, LOCAL_KUBECONFIG
from .runners import free_port
from .settle import control_plane_processes
from .webhook import Webhook
from .workload import BENCH_LABEL, NODE_GPUS, gpus_short

PHASES = {
    "throughput": throughput.run,
    "statefulset": statefulset.run,
    "admission": admission.run,
    "memory": memory.run,
}
# `make bench-scale` runs this one alone (not part of `make bench`).
SCALE_PHASES = {"scale": scale.run}

# The admission targets at the highest rate read a run this long at least (QUICK mode excepted).
MIN_HOLD_SECONDS = 60.0
# Rounds of `make bench-scale`: a median of three (issue 47's targets at 5,000 nodes ask for three).
SCALE_RUNS = 3
# (full, quick) defaults; quick mode finishes in a few minutes on 2 cores.
DEFAULTS = {
    "pods": (1000, 200),
    "nodes": (100, 20),
    "runs": (5, 1),
    "sts_replicas": (500, 60),
    "admission_seconds": (15.0, 3.0),
    "admission_hold_seconds": (60.0, 3.0),
    "mem_pods": (10000, 500),
    "mem_nodes": (1000, 50),
}


def _default(name: str, quick: bool, env_name: str, kind=int):
    value = os.environ.get(env_name)
    return kind(value) if value else DEFAULTS[name][1 if quick else 0]


def _flag(env_name: str) -> bool:
    return os.environ.get(env_name, "") not in ("", "0")


def _names(text: str, known, what: str, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    names = tuple(n for n in text.split(",") if n)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def parse_settings(argv: list[str] | None) -> Settings:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(
        "--quick",
        action="store_true",
        default=_flag("QUICK"),
        help="smaller sizes and one round: a check in under 5 minutes, not figures to quote; the "
        "report says its sizes are not the targets' (env QUICK=1)",
    )
    pre.add_argument(
        "--scale",
        action="store_true",
        default=_flag("BENCH_SCALE"),
        help="the scale run alone (`make bench-scale`): --scale-pods pods over --scale-nodes nodes, "
        "gpu-scheduler and kube-scheduler side by side, three rounds unless --runs says otherwise (env BENCH_SCALE=1)",
    )
    known = pre.parse_known_args(argv)[0]
    quick, scale_run = known.quick, known.scale

    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0], parents=[pre])
    add = parser.add_argument
    add(
        "--pods",
        type=int,
        default=_default("pods", quick, "BENCH_PODS"),
        help="pods per burst (env BENCH_PODS; up to 10000); for the count-line runners "
        f"({','.join(contenders.DYNAMIC_RUNNERS)}) at most --nodes x {NODE_GPUS}, one free GPU each",
    )
    add(
        "--nodes",
        type=int,
        default=_default("nodes", quick, "BENCH_NODES"),
        help=f"KWOK nodes for the bursts, each advertising {NODE_GPUS} nvidia.com/gpu (env BENCH_NODES)",
    )
    add(
        "--group",
        type=int,
        default=int(os.environ.get("BENCH_GROUP", "100")),
        help="pods sharing one map text, like one StatefulSet (env BENCH_GROUP)",
    )
    add(
        "--runs",
        type=int,
        default=int(os.environ.get("BENCH_RUNS") or (SCALE_RUNS if scale_run else DEFAULTS["runs"][1 if quick else 0])),
        help=f"rounds; each figure is the median over them (env BENCH_RUNS; 5, QUICK 1, scale {SCALE_RUNS})",
    )
    add(
        "--runners",
        default=os.environ.get("BENCH_RUNNERS", ",".join(contenders.RUNNERS)),
        help=f"comma-separated subset of {','.join(contenders.ALL_RUNNERS)} for the throughput and scale "
        f"phases (env BENCH_RUNNERS; default: all); {contenders.OURS_BIND} is gpu-scheduler (bind mode, its pods "
        f"created with no admission call); {contenders.OURS_DYNAMIC} is gpu-scheduler choosing node and GPU for pods "
        f"whose map is `*=*:gpus=1`, {contenders.KUBE_GPUS} kube-scheduler matched (default profile) placing as "
        "many pods that request nvidia.com/gpu: 1 (issue 50's count lines); a ratio needs both of its runners",
    )
    add(
        "--modes",
        default=os.environ.get("BENCH_MODES", ",".join(throughput.MODES)),
        help=f"comma-separated subset of {','.join(throughput.MODES)} (env BENCH_MODES)",
    )
    add(
        "--webhook-workers",
        type=int,
        default=int(os.environ.get("BENCH_WEBHOOK_WORKERS") or webhook_workers()),
        help="the webhook's worker processes (env BENCH_WEBHOOK_WORKERS; default the chart's webhook.workers)",
    )
    add(
        "--threads",
        type=int,
        default=int(os.environ.get("BENCH_THREADS", "32")),
        help="concurrent create requests (env BENCH_THREADS)",
    )
    add(
        "--sts-replicas",
        type=int,
        default=_default("sts_replicas", quick, "BENCH_STS_REPLICAS"),
        help="StatefulSet replicas and lines of its map (env BENCH_STS_REPLICAS)",
    )
    add(
        "--admission-seconds",
        type=float,
        default=_default("admission_seconds", quick, "BENCH_ADMISSION_SECONDS", float),
        help="duration of each admission rate (env BENCH_ADMISSION_SECONDS)",
    )
    add(
        "--admission-hold-seconds",
        type=float,
        default=_default("admission_hold_seconds", quick, "BENCH_ADMISSION_HOLD_SECONDS", float),
        help=f"duration of the highest admission rate, which its targets read (env BENCH_ADMISSION_HOLD_SECONDS; "
        f"at least {MIN_HOLD_SECONDS:g} outside QUICK mode)",
    )
    add(
        "--admission-rates",
        default=os.environ.get("BENCH_ADMISSION_RATES", "100,500,1000"),
        help="requests per second, comma-separated (env BENCH_ADMISSION_RATES)",
    )
    add(
        "--admission-workloads",
        default=os.environ.get("BENCH_ADMISSION_WORKLOADS", ",".join(admission.WORKLOADS)),
        help=f"comma-separated subset of {','.join(admission.WORKLOADS)} (env BENCH_ADMISSION_WORKLOADS)",
    )
    add(
        "--scale-pods",
        type=int,
        default=int(os.environ.get("BENCH_SCALE_PODS", "10000")),
        help=f"pods of the scale run's burst (env BENCH_SCALE_PODS); for the count-line runners at most "
        f"--scale-nodes x {NODE_GPUS}",
    )
    add(
        "--scale-nodes",
        type=int,
        default=int(os.environ.get("BENCH_SCALE_NODES", "5000")),
        help="KWOK nodes of the scale run (env BENCH_SCALE_NODES)",
    )
    add(
        "--strict",
        action="store_true",
        default=_flag("BENCH_STRICT"),
        help="exit 1 when a target is missed or not measured (env BENCH_STRICT=1)",
    )
    add(
        "--record",
        action="store_true",
        default=_flag("BENCH_RECORD"),
        help="a run of record: keep its results and plot in docs/bench/<UTC start>-<bench|scale>.json/.png, "
        "from which `make bench-readme` makes the README's table (env BENCH_RECORD=1; not with --quick)",
    )
    add(
        "--mem-pods",
        type=int,
        default=_default("mem_pods", quick, "BENCH_MEM_PODS"),
        help="pods bound for the memory phase (env BENCH_MEM_PODS)",
    )
    add(
        "--mem-nodes",
        type=int,
        default=_default("mem_nodes", quick, "BENCH_MEM_NODES"),
        help="nodes for the memory phase (env BENCH_MEM_NODES)",
    )
    add(
        "--out",
        type=Path,
        default=Path(os.environ.get("BENCH_OUT", str(DEFAULT_OUT))),
        help="where the report goes (env BENCH_OUT)",
    )
    add(
        "--phases",
        default=os.environ.get("BENCH_PHASES", ",".join(SCALE_PHASES if scale_run else PHASES)),
        help=f"comma-separated subset of {','.join(PHASES)} (env BENCH_PHASES); --scale runs scale alone",
    )
    add(
        "--profile",
        nargs="?",
        const=profile.ALL_THREADS,
        default=os.environ.get("BENCH_PROFILE", ""),
        metavar="VIEW",
        help=f"sample gpu-scheduler with py-spy during its throughput runs; top functions go into the "
        f"report. VIEW: {profile.ALL_THREADS} (the default: every busy thread, the wall-clock view) or "
        f"{profile.GIL} (only the GIL's holder, i.e. the Python CPU). Env BENCH_PROFILE=1 or gil. Needs py-spy: "
        "the bench group of `make install`",
    )
    args = parser.parse_args(argv)
    try:
        args.profile = profile.view(args.profile)
    except ValueError as err:
        parser.error(f"--profile/BENCH_PROFILE: {err}")
    phases = _names(args.phases, SCALE_PHASES if scale_run else PHASES, "phase(s)", parser)
    runners = _names(args.runners, contenders.ALL_RUNNERS, "runner(s)", parser)
    modes = _names(args.modes, throughput.MODES, "mode(s)", parser)
    workloads = _names(args.admission_workloads, admission.WORKLOADS, "admission workload(s)", parser)
    if args.profile and not profile.available():
        parser.error(
            "--profile/BENCH_PROFILE needs py-spy, from the bench group of uv.lock: "
            'make install INSTALL_GROUPS="test lint bench" (the default)'
        )
    if not 1 <= args.pods <= 10000:
        parser.error(f"--pods/BENCH_PODS must be within 1-10000, got {args.pods}")
    if args.runs < 1:
        parser.error(f"--runs/BENCH_RUNS must be at least 1, got {args.runs}")
    if args.webhook_workers < 1:
        parser.error(f"--webhook-workers/BENCH_WEBHOOK_WORKERS must be at least 1, got {args.webhook_workers}")
    # Count-line pods each need a free GPU: a burst that cannot all be placed would time out, not measure.
    dynamic = [key for key in runners if key in contenders.DYNAMIC_RUNNERS]
    if scale_run:
        pods, nodes, flags = args.scale_pods, args.scale_nodes, "--scale-pods/BENCH_SCALE_PODS and --scale-nodes"
    else:
        pods, nodes, flags = args.pods, args.nodes, "--pods/BENCH_PODS and --nodes/BENCH_NODES"
    short = gpus_short(pods, nodes) if dynamic and (scale_run or "throughput" in phases) else None
    if short:
        parser.error(
            f"{flags}: {short}, which the runners {', '.join(dynamic)} need; give more nodes or fewer pods, or "
            "leave those runners out (--runners/BENCH_RUNNERS)"
        )
    if args.record and args.quick:
        parser.error(
            "--record/BENCH_RECORD with --quick/QUICK: a QUICK run's sizes are not the targets', it is not a run "
            "of record"
        )
    if not args.quick and args.admission_hold_seconds < MIN_HOLD_SECONDS:
        parser.error(
            f"--admission-hold-seconds/BENCH_ADMISSION_HOLD_SECONDS must be at least {MIN_HOLD_SECONDS:g} outside "
            f"QUICK mode (a webhook that falls behind needs time to show it), got {args.admission_hold_seconds:g}"
        )
    return Settings(
        quick=args.quick,
        pods=args.pods,
        nodes=args.scale_nodes if scale_run else args.nodes,
        group=args.group,
        runs=args.runs,
        threads=args.threads,
        webhook_workers=args.webhook_workers,
        sts_replicas=args.sts_replicas,
        admission_rates=tuple(int(r) for r in args.admission_rates.split(",") if r),
        admission_seconds=args.admission_seconds,
        admission_hold_seconds=args.admission_hold_seconds,
        mem_pods=args.mem_pods,
        mem_nodes=max(args.mem_nodes, args.nodes),
        out=args.out.resolve(),
        phases=phases,
        profile=args.profile,
        runners=runners,
        modes=modes,
        admission_workloads=workloads,
        scale=scale_run,
        scale_pods=args.scale_pods,
        scale_nodes=args.scale_nodes,
        strict=args.strict,
        record=args.record,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(argv)
    settings.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict = {
        "settings": settings.to_json(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "webhook_timeout_s": webhook_timeout_seconds(),
        "errors": {},
    }
    print(f"[   0.0s] bench {'(quick) ' if settings.quick else ''}-> {settings.out}", file=sys.stderr, flush=True)

    kubeconfig = os.environ.get("KUBECONFIG") or str(LOCAL_KUBECONFIG)
    started_cluster = not cluster_answers(Path(kubeconfig))
    if started_cluster:
        if kubeconfig != str(LOCAL_KUBECONFIG):
            print(f"the cluster of KUBECONFIG={kubeconfig} does not answer", file=sys.stderr)
            return 1
        print("[   0.0s] the local cluster is not up: starting it (scripts/local-up.sh)", file=sys.stderr)
        local_script("local-up.sh")
    results["cluster_started_by_bench"] = started_cluster

    api = KubeApi(kubeconfig)
    api_client = kube_config.new_client_from_config(config_file=kubeconfig)
    bench = Bench(
        settings,
        kubeconfig,
        api,
        api_client,
        BenchCluster(api, NAMESPACE),
        Webhook(settings.out, OUR_SCHEDULER, free_port(), kubeconfig, workers=settings.webhook_workers),
        started,
        control_plane_processes=(
            control_plane_processes(LOCAL_CLUSTER_DIR) if kubeconfig == str(LOCAL_KUBECONFIG) else {}
        ),
    )
    try:
        bench.phase(f"setup: namespace {NAMESPACE}, {settings.nodes} KWOK nodes, webhook")
        bench.cluster.create_namespace()
        bench.cluster.ensure_nodes(settings.nodes)
        bench.webhook.start()
        bench.webhook.register(api_client, api, NAMESPACE, (BENCH_LABEL, "true"))
        phases = SCALE_PHASES if settings.scale else PHASES
        for name in settings.phases:
            try:
                results[name] = phases[name](bench)
                if results[name].get("stopped"):  # a phase that kept what it measured before it failed
                    results["errors"][name] = results[name]["stopped"]
            except Exception as err:  # noqa: BLE001 - record it and go on: the other phases still tell something
                traceback.print_exc()
                results["errors"][name] = f"{err.__class__.__name__}: {err}"
                bench.cluster.delete_pods()
    finally:
        bench.phase("cleanup")
        cleanup(bench, started_cluster)
    results["duration_s"] = round(time.monotonic() - started, 1)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    written = report.write(results, settings.out)
    print(written["markdown_text"])
    bench.phase(f"done in {results['duration_s']:.0f}s: {written['markdown']}, {written['plot']}, {written['json']}")
    if settings.record:
        kept = report.record(results, written["plot"])
        bench.phase(f"run of record kept: {kept['json']}, {kept['plot']} (README table: make bench-readme)")
    print(report.verdict_text(results), file=sys.stderr)
    return exit_code(results, settings.strict)


def exit_code(results: dict, strict: bool) -> int:
    """1 when a phase failed; with strict, also when a target was missed or not measured."""
    if results["errors"]:
        return 1
    if strict and any(t["status"] != report.targets.PASS for t in results["targets"]):
        return 1
    return 0


def cleanup(bench: Bench, started_cluster: bool) -> None:
    """Leave the cluster as it was found."""
    if started_cluster:
        steps = [bench.webhook.stop, lambda: local_script("local-down.sh")]
    else:
        steps = [
            lambda: bench.webhook.unregister(bench.api_client),
            bench.webhook.stop,
            bench.cluster.delete_pods,
            bench.cluster.delete_namespace,
            bench.cluster.delete_nodes,
        ]
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - do every cleanup step that can be done
            traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())

"""`make bench`: run every phase on the local control plane, then write the report.

    .venv/bin/python -m bench.run [--quick] [--phases throughput,statefulset,admission,memory]

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

from . import admission, machine, memory, profile, report, statefulset, throughput
from .cluster import BenchCluster, cluster_answers, local_script
from .context import NAMESPACE, OUR_SCHEDULER, Bench, Settings
from .kubeapi import KubeApi
from .paths import DEFAULT_OUT, LOCAL_CLUSTER_DIR, LOCAL_KUBECONFIG
from .runners import free_port
from .settle import control_plane_pids
from .webhook import Webhook
from .workload import BENCH_LABEL

PHASES = {
    "throughput": throughput.run,
    "statefulset": statefulset.run,
    "admission": admission.run,
    "memory": memory.run,
}

# (full, quick) defaults; quick mode finishes in a few minutes on 2 cores.
DEFAULTS = {
    "pods": (1000, 200),
    "nodes": (100, 20),
    "runs": (3, 1),
    "sts_replicas": (500, 60),
    "admission_seconds": (15.0, 3.0),
    "mem_pods": (10000, 500),
    "mem_nodes": (1000, 50),
}


def _default(name: str, quick: bool, env_name: str, kind=int):
    value = os.environ.get(env_name)
    return kind(value) if value else DEFAULTS[name][1 if quick else 0]


def parse_settings(argv: list[str] | None) -> Settings:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("QUICK", "") not in ("", "0"),
        help="smaller sizes and one round: a check in 2-3 minutes, not figures to quote (env QUICK=1)",
    )
    quick = pre.parse_known_args(argv)[0].quick

    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0], parents=[pre])
    add = parser.add_argument
    add(
        "--pods",
        type=int,
        default=_default("pods", quick, "BENCH_PODS"),
        help="pods per burst (env BENCH_PODS; up to 10000)",
    )
    add(
        "--nodes",
        type=int,
        default=_default("nodes", quick, "BENCH_NODES"),
        help="KWOK nodes for the bursts (env BENCH_NODES)",
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
        default=_default("runs", quick, "BENCH_RUNS"),
        help="rounds; each figure is the median over them (env BENCH_RUNS)",
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
        "--admission-rates",
        default=os.environ.get("BENCH_ADMISSION_RATES", "100,500,1000"),
        help="requests per second, comma-separated (env BENCH_ADMISSION_RATES)",
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
        default=os.environ.get("BENCH_PHASES", ",".join(PHASES)),
        help=f"comma-separated subset of {','.join(PHASES)} (env BENCH_PHASES)",
    )
    add(
        "--profile",
        action="store_true",
        default=os.environ.get("BENCH_PROFILE", "") not in ("", "0"),
        help="sample gpu-scheduler with py-spy during its throughput runs; top functions go into the "
        "report (env BENCH_PROFILE=1; needs py-spy: the bench group of `make install`)",
    )
    args = parser.parse_args(argv)
    phases = tuple(p for p in args.phases.split(",") if p)
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; choose from {', '.join(PHASES)}")
    if args.profile and not profile.available():
        parser.error(
            "--profile/BENCH_PROFILE needs py-spy, from the bench group of uv.lock: "
            'make install INSTALL_GROUPS="test lint bench" (the default)'
        )
    if not 1 <= args.pods <= 10000:
        parser.error(f"--pods/BENCH_PODS must be within 1-10000, got {args.pods}")
    return Settings(
        quick=args.quick,
        pods=args.pods,
        nodes=args.nodes,
        group=args.group,
        runs=args.runs,
        threads=args.threads,
        sts_replicas=args.sts_replicas,
        admission_rates=tuple(int(r) for r in args.admission_rates.split(",") if r),
        admission_seconds=args.admission_seconds,
        mem_pods=args.mem_pods,
        mem_nodes=max(args.mem_nodes, args.nodes),
        out=args.out.resolve(),
        phases=phases,
        profile=args.profile,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(argv)
    settings.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict = {
        "settings": settings.to_json(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
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
        Webhook(settings.out, OUR_SCHEDULER, free_port()),
        started,
        control_plane=control_plane_pids(LOCAL_CLUSTER_DIR) if kubeconfig == str(LOCAL_KUBECONFIG) else [],
    )
    try:
        bench.phase(f"setup: namespace {NAMESPACE}, {settings.nodes} KWOK nodes, webhook")
        bench.cluster.create_namespace()
        bench.cluster.ensure_nodes(settings.nodes)
        bench.webhook.start()
        bench.webhook.register(api_client, api, NAMESPACE, (BENCH_LABEL, "true"))
        for name in settings.phases:
            try:
                results[name] = PHASES[name](bench)
            except Exception as err:  # noqa: BLE001 - record it and go on: the other phases still tell something
                traceback.print_exc()
                results["errors"][name] = f"{err.__class__.__name__}: {err}"
                bench.cluster.delete_pods()
    finally:
        bench.phase("cleanup")
        cleanup(bench, started_cluster)
    results["duration_s"] = round(time.monotonic() - started, 1)
    written = report.write(results, settings.out)
    print(written["markdown_text"])
    bench.phase(f"done in {results['duration_s']:.0f}s: {written['markdown']}, {written['plot']}, {written['json']}")
    return 1 if results["errors"] else 0


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

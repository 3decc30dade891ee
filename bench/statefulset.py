"""Phase 2: a real StatefulSet (Parallel) whose one map has a line per replica.

kube-controller-manager creates the pods at its own client rate, so the
clock runs from the first pod the watch sees to the last bind, and the
controller's creation rate is reported beside the bind rate: when they are
equal, the scheduler kept up and the controller set the pace. The per-pod
figure that isolates the map's size is seen-to-bound latency (the watch sees
the pod, then sees it bound), compared with the same figure for the bare pods,
whose maps have `group` lines.

gpu-scheduler runs it in bind mode (ours_bind: the template's containers carry
the env entry, no admission call), once each round.
"""

from __future__ import annotations

from . import contenders
from .context import Bench
from .measure import attempt_seconds, make_runner
from .pods import BindWatcher, wait_until_bound
from .stats import latency_summary, median
from .workload import statefulset

NAME = "ss"


def measure_once(bench: Bench, key: str = contenders.OURS_BIND) -> dict:
    settings = bench.settings
    replicas = settings.sts_replicas
    settled = bench.settle()
    runner = make_runner(bench, key)
    runner.start()
    watcher = BindWatcher(bench.api, bench.namespace)
    watcher.start()
    try:
        bench.api.call(
            "POST",
            f"/apis/apps/v1/namespaces/{bench.namespace}/statefulsets",
            statefulset(
                NAME,
                replicas,
                settings.nodes,
                runner.scheduler_name,
                bench.namespace,
                bind_mode=True,
            ),
        )
        names = [f"{NAME}-{i}" for i in range(replicas)]
        complete = wait_until_bound(watcher, names, settings.burst_timeout(replicas), "statefulset")
        attempt = attempt_seconds(runner)
    finally:
        watcher.stop()
        runner.stop()
    seen = {n: watcher.first_seen[n] for n in names if n in watcher.first_seen}
    bound = {n: watcher.bound_at[n] for n in names if n in watcher.bound_at}
    first, last_seen = min(seen.values()), max(seen.values())
    last_bound = max(bound.values(), default=first)
    bench.cluster.delete_statefulset(NAME)
    bench.cluster.delete_pods()
    return {
        "key": key,
        "replicas": replicas,
        "map_lines": replicas,
        "bound": len(bound),
        "complete": complete,
        "seconds": last_bound - first,
        "pods_per_second": len(bound) / (last_bound - first) if last_bound > first else float("nan"),
        "created_per_second": len(seen) / (last_seen - first) if last_seen > first else float("nan"),
        "seen_to_bound_s": latency_summary([t - seen[n] for n, t in bound.items()]),
        "attempt_seconds": attempt,
        **settled,
    }


def summarize(runs: list[dict]) -> dict:
    return {
        "runs": runs,
        "pods_per_second": median([r["pods_per_second"] for r in runs]),
        "created_per_second": median([r["created_per_second"] for r in runs]),
        "seen_to_bound_p50_s": median([r["seen_to_bound_s"]["p50"] for r in runs]),
        "seen_to_bound_p99_s": median([r["seen_to_bound_s"]["p99"] for r in runs]),
        "attempt_ms": median([(r["attempt_seconds"] or float("nan")) * 1000 for r in runs]),
    }


def run(bench: Bench) -> dict:
    runs = []
    for round_no in range(1, bench.settings.runs + 1):
        bench.phase(
            f"statefulset round {round_no}/{bench.settings.runs}, {contenders.LABELS[contenders.OURS_BIND]}: "
            f"{bench.settings.sts_replicas} replicas, a {bench.settings.sts_replicas}-line map"
        )
        figures = measure_once(bench)
        figures["round"] = round_no
        bench.phase(
            f"  {figures['pods_per_second']:.1f} pods/s bound, controller created "
            f"{figures['created_per_second']:.1f} pods/s, seen-to-bound p99 "
            f"{figures['seen_to_bound_s']['p99']:.3f}s"
        )
        runs.append(figures)
    return {"replicas": bench.settings.sts_replicas, **summarize(runs)}

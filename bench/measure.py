"""One measured run of one runner, in either of two modes, each followed by deleting its pods.

burst: the runner is up; the pods are created at once; the clock runs from
       the first create request to the last bind (what a user sees).
drain: the pods are created first, while no runner is up; then the runner
       starts on the backlog, and the rate is binds per second between the
       first and the last bind. Creation (and its admission webhooks) is out
       of the clock: this is the runner's own binding capacity.
"""

from __future__ import annotations

import time
import urllib.request
from datetime import UTC, datetime

from . import apiserver_work, audit, contenders, events, runners
from .context import (
    CEILING_SCHEDULER,
    KUBE_SCHEDULER,
    OUR_BIND_SCHEDULER,
    PYTHON_BINDER_SCHEDULER,
    Bench,
)
from .cpuwork import WorkMeter
from .pods import BindWatcher, Creator, run_burst, wait_until_bound
from .profile import GIL, Profiler, top_functions
from .prometheus import sample
from .runners import Runner
from .webhook import dry_run_untouched
from .workload import bench_pods, dynamic_pods, in_bind_mode


def make_runner(bench: Bench, key: str) -> Runner:
    if key in contenders.GPU_SCHEDULER_RUNNERS:
        # Its figures say "no admission call" only while no webhook or policy of the bench touches its pods.
        probe = pods_for(key, 1, 1, 1, OUR_BIND_SCHEDULER, bench.namespace)[0]
        untouched, answer = dry_run_untouched(bench.api, bench.namespace, probe)
        if not untouched:
            raise RuntimeError(
                f"an admission of {bench.namespace} changes or refuses pods of {OUR_BIND_SCHEDULER}: "
                f"{contenders.LABELS[key]} would not be (dry-run answer {answer[:200]!r})"
            )
        return runners.ours(bench.api, bench.kubeconfig, bench.namespace, bench.logs, OUR_BIND_SCHEDULER, key=key)
    if key == contenders.CEILING:
        return runners.ceiling(bench.api, bench.logs, CEILING_SCHEDULER)
    if key == contenders.PYTHON_BINDER:
        return runners.python_binder(bench.kubeconfig, bench.logs, PYTHON_BINDER_SCHEDULER)
    return runners.kube(bench.api, key, bench.kubeconfig, bench.namespace, bench.logs, KUBE_SCHEDULER)


def pods_for(key: str, pods: int, nodes: int, group: int, scheduler_name: str, namespace: str) -> list[dict]:
    """The pods runner `key` places: pinned ones (workload.bench_pods) or, for the count-line runners, ones
    pinned to nothing (workload.dynamic_pods: a map of `*=*:gpus=1` for ours, a request of nvidia.com/gpu: 1
    for kube-scheduler's); gpu-scheduler's, and kube_same_pods', carry the bind mode's env entries in every
    container."""
    if key in contenders.DYNAMIC_RUNNERS:
        bodies = dynamic_pods(pods, scheduler_name, namespace, request_gpu=key not in contenders.GPU_SCHEDULER_RUNNERS)
    else:
        bodies = bench_pods(pods, nodes, group, scheduler_name, namespace)
    return [in_bind_mode(pod) for pod in bodies] if key in contenders.BIND_ENTRY_RUNNERS else bodies


def runner_pods(bench: Bench, runner: Runner, pods: int, nodes: int) -> list[dict]:
    """The burst's pods for runner (pods_for)."""
    return pods_for(runner.key, pods, nodes, bench.settings.group, runner.scheduler_name, bench.namespace)


def runner_metrics(runner: Runner) -> str:
    """gpu-scheduler's /metrics text (runner.metrics_url set)."""
    with urllib.request.urlopen(runner.metrics_url, timeout=5) as response:
        return response.read().decode()


def attempt_seconds(runner: Runner) -> float | None:
    """gpu-scheduler's own mean time per successful attempt (decide + bind), from its /metrics.

    A diagnostic beside the measured figures (which never come from the
    scheduler itself): it tells scheduling work apart from waiting.
    """
    if not runner.metrics_url:
        return None
    text = runner_metrics(runner)
    name = "gpu_scheduler_scheduling_attempt_duration_seconds"
    total = sample(text, f"{name}_sum", result="scheduled")
    count = sample(text, f"{name}_count", result="scheduled")
    return total / count if total is not None and count else None


# Pods of an incomplete run described in its figures, at most.
DIAGNOSED_PODS = 5


def unbound_diagnosis(
    bench: Bench, runner: Runner, unbound: list[str], since: datetime, seen: dict[str, float] | None = None
) -> dict:
    """What a run that left pods unbound leaves to go on, read before the runner stops: the
    first unbound pods as kube-apiserver has them (phase, node, conditions, the scheduler name
    and the placement the webhook wrote), whether the bench's own watch ever saw them (`seen`,
    drain mode), every binding posted for them since the run began by kube-apiserver's audit
    log, and the runner's own queue by state when it has one (gpu-scheduler's
    gpu_scheduler_pending_pods). Never a figure: the run is a MISS already."""
    diagnosed = sorted(unbound)[:DIAGNOSED_PODS]
    log = audit.audit_log_path()
    posted = audit.bindings_of(log, bench.namespace, set(diagnosed), since) if log else {}
    pods = []
    for name in diagnosed:
        found = {"bindings": posted.get(name) if log else "no audit log"}
        if seen is not None:
            found["seen_by_bench_watch"] = name in seen
        try:
            pod = bench.api.get(f"/api/v1/namespaces/{bench.namespace}/pods/{name}")
        except Exception as err:  # noqa: BLE001 - a diagnosis says what it could not read
            gone = getattr(err, "status", None) == 404
            error = "not found: deleted" if gone else " ".join(str(err).split())[:200]
            pods.append({"name": name, "error": error, **found})
            continue
        metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        pods.append(
            {
                "name": name,
                "uid": metadata.get("uid"),
                "created": metadata.get("creationTimestamp"),
                "deleting": metadata.get("deletionTimestamp"),
                "scheduler": spec.get("schedulerName"),
                "node": spec.get("nodeName"),
                "phase": status.get("phase"),
                "conditions": status.get("conditions") or [],
                "placement": (metadata.get("annotations") or {}).get("gpu-scheduler/placement"),
                **found,
            }
        )
    queue = {}
    if runner.metrics_url:
        try:
            text = runner_metrics(runner)
            for state in ("active", "in-flight", "backoff", "unschedulable"):
                value = sample(text, "gpu_scheduler_pending_pods", queue=state)
                if value is not None:
                    queue[state] = value
        except OSError as err:
            queue = {"error": str(err)}
    return {"unbound": len(unbound), "unbound_pods": pods, "runner_queue": queue}


def start_profiler(bench: Bench, runner: Runner, label: str) -> Profiler | None:
    if not (bench.settings.profile and runner.key in contenders.GPU_SCHEDULER_RUNNERS):
        return None
    out = bench.settings.out / "profiles" / f"{label.replace(' ', '-')}.txt"
    return Profiler(runner.process.pid, out, bench.settings.profile)


def profile_figures(profiler: Profiler | None) -> dict:
    return {"profile": {**top_functions(profiler.finish(), 12), "gil": profiler.view == GIL}} if profiler else {}


def apiserver_figures(before: dict[str, float], after: dict[str, float], bound: int) -> dict:
    """The apiserver's counted work per pod bound over the burst's window (apiserver_work.py)."""
    try:
        return {"apiserver_per_pod": apiserver_work.per_pod(before, after, bound)}
    except ValueError as err:
        return {"apiserver_per_pod": {}, "apiserver_per_pod_error": str(err)}


def cpu_groups(bench: Bench, runner: Runner | None) -> dict[str, list[int]]:
    """The processes whose CPU a run counts: the runner (when it runs), the webhook (granian's master and
    workers) and the control plane.

    On two shared cores, CPU per pod says what a throughput figure costs and
    who pays it (the webhook serves none of the runners' pods: it idles beside them).
    """
    webhook = [bench.webhook.process.pid] if bench.webhook.process.running() else []
    groups = {"webhook": webhook, "control_plane": bench.control_plane}
    return {"runner": [runner.process.pid], **groups} if runner else groups


def measure_burst(bench: Bench, key: str, pods: int, nodes: int, label: str) -> dict:
    """The burst's figures (pods.BurstResult.to_json) plus the runner's startup time and peak RSS."""
    settings = bench.settings
    settled = bench.settle()
    runner = make_runner(bench, key)
    ready_seconds = runner.start()
    profiler = start_profiler(bench, runner, label)
    try:
        work = WorkMeter(idle_seconds=settings.idle_s, timeout=settings.settle_timeout_s)
        work.measure_idle(cpu_groups(bench, runner))
        pod_bodies = runner_pods(bench, runner, pods, nodes)
        counted_before = apiserver_work.fetch(bench.api)  # outside the CPU window: /metrics costs the apiserver
        work.start(cpu_groups(bench, runner))
        since = datetime.now(UTC)
        result = run_burst(
            bench.api, bench.namespace, label, pod_bodies, settings.threads, settings.burst_timeout(pods)
        )
        figures = result.to_json()
        figures.update(work.finish())  # cpu_s: the burst's work, from before the first pod until settled
        # Read first after the window: an Event sent after it closed is not counted (events.py).
        names = [pod["metadata"]["name"] for pod in pod_bodies]
        figures.update(events.figures(bench.api, bench.namespace, names, since.timestamp(), time.time()))
        if result.unbound:  # read after the window: it reads the audit log, and the run is a MISS anyway
            figures["diagnosis"] = unbound_diagnosis(bench, runner, list(result.unbound), since)
        figures.update(apiserver_figures(counted_before, apiserver_work.fetch(bench.api), figures.get("bound", 0)))
        figures.update(settled)
        figures.update(
            key=key,
            label=runner.label,
            mode="burst",
            nodes=nodes,
            ready_seconds=ready_seconds,
            peak_rss_mib=runner.peak_rss_mib(),
            attempt_seconds=attempt_seconds(runner),
        )
    finally:
        runner.stop()
    figures.update(profile_figures(profiler))
    figures["cleanup_seconds"] = bench.cluster.delete_pods()
    return figures


def measure_drain(bench: Bench, key: str, pods: int, nodes: int, label: str) -> dict:
    settings = bench.settings
    runner = make_runner(bench, key)
    creator = Creator(bench.api, bench.namespace, settings.threads)
    since = datetime.now(UTC)
    creator.start(runner_pods(bench, runner, pods, nodes))
    creator.done.wait(settings.burst_timeout(pods))
    names = creator.succeeded()
    settled = bench.settle()
    watcher = BindWatcher(bench.api, bench.namespace)
    watcher.start()
    try:
        work = WorkMeter(idle_seconds=settings.idle_s, timeout=settings.settle_timeout_s)
        work.measure_idle(cpu_groups(bench, None))  # the runner is not running yet: nothing to take off
        launched, window_start = time.monotonic(), time.time()
        runner.launch()
        work.start(cpu_groups(bench, runner))  # from launch: startup is part of draining a backlog
        # Sampled from launch: on a backlog it binds before it is seen ready.
        profiler = start_profiler(bench, runner, label)
        runner.wait_ready()
        complete = wait_until_bound(watcher, names, settings.burst_timeout(pods), label)
        figures = {"peak_rss_mib": runner.peak_rss_mib(), "attempt_seconds": attempt_seconds(runner)}
        figures.update(work.finish())
        figures.update(events.figures(bench.api, bench.namespace, names, window_start, time.time()))
        if not complete:
            unbound = [n for n in names if n not in watcher.bound_at]
            figures["diagnosis"] = unbound_diagnosis(bench, runner, unbound, since, watcher.first_seen)
    finally:
        watcher.stop()
        runner.stop()
    binds = sorted(watcher.bound_at[n] for n in names if n in watcher.bound_at)
    span = binds[-1] - binds[0] if len(binds) > 1 else float("nan")
    figures.update(settled)
    figures.update(profile_figures(profiler))
    figures.update(
        key=key,
        label=runner.label,
        mode="drain",
        pods=pods,
        nodes=nodes,
        created=len(names),
        bound=len(binds),
        seconds=span,
        pods_per_second=(len(binds) - 1) / span if span > 0 else float("nan"),
        launch_to_first_bind_s=binds[0] - launched if binds else float("nan"),
        create_errors=len(creator.failures()),
        create_retries=len(creator.retry_reasons),
        complete=complete,
    )
    figures["cleanup_seconds"] = bench.cluster.delete_pods()
    return figures


def warm_up(bench: Bench, key: str, measure, pods: int, nodes: int) -> dict:
    """One run of runner `key` whose figures count nowhere, before a phase's first measured round,
    then the control plane's baseline (Bench.learn_baseline).

    Right after the setup (nodes created, the webhook registered) the
    control plane is busier than between runs, and whichever runner led round 1 measured an
    inflated idle rate and had too much subtracted (settle.py). After this run the first
    measured runner starts from the state every later runner starts from: after another
    runner's burst, its pods deleted, the control plane back at its baseline. What it measured
    is kept under the phase's "warmup" for the curious, never in a median or a ratio."""
    bench.phase(f"warm-up, not measured: {contenders.LABELS[key]}, {pods} pods on {nodes} nodes")
    kept: dict = {"key": key}
    try:
        figures = measure(bench, key, pods, nodes, f"{key} warm-up")
        kept.update({k: figures.get(k) for k in ("mode", "pods_per_second", "bound", "complete", "idle_cores")})
    except Exception as err:  # noqa: BLE001 - a failed warm-up is no figure; the measured rounds still run
        kept["error"] = f"{err.__class__.__name__}: {err}"
        bench.cluster.delete_pods()
    kept["control_plane_baseline"] = bench.learn_baseline()
    return kept

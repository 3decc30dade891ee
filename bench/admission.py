"""Phase 3: the webhook's latency and CPU at fixed request rates, with vegeta (a constant-rate load tool).

vegeta sends on schedule whether or not earlier answers came back, so a
saturated webhook shows up as latency, errors and answers short of the rate
asked instead of a lower sending rate (a closed-loop client would hide it).
vegeta gives up on a request when the apiserver would: after the chart's
webhook.timeoutSeconds (bench/chart.py), so a request the apiserver would
have refused is an error here too. The highest rate is held
settings.admission_hold_seconds (60 s outside QUICK mode), long enough for
a webhook that falls behind to show it; a saturated rate
(summary.admission_saturation) is a MISS whatever its error count. It runs on the same machine as the webhook,
as the targets ask. Each request is the AdmissionReview the apiserver sends to
/mutate for a bench pod with a `group`-line map and no CUDA_VISIBLE_DEVICES
entry (what a 1.35 API server sends the webhook); one answer of each workload
is checked first, so the load exercises the real path (a patch that gives
every container the entry that reads the bind's devices), not an error path.

Two workloads, kept from when the webhook parsed every pod's map (the removed
admission.mode webhook): the webhook reads no map of such a pod now, so the
two measure the same path, and their figures should agree:
- repeated: every request carries the same map, as the pods of one big
  StatefulSet do;
- distinct: every request of a run carries a map no earlier request of the
  phase carried (the pod p-<g*size> of group g, for a new g each time), as in
  a cluster with many workloads.

The webhook's CPU (granian's master and workers, from /proc) is read around
each run: CPU ms per request is a figure the machine's noise barely moves.

Then the stack's floor (bench/stack_floor.py): an app that does no admission,
bare and in Flask, under the webhook's own server (granian), under gunicorn's
gevent worker and under its gthread worker, gets the repeated load at FLOOR_RATE, so the
report shows how much of the webhook's CPU per request is the server's and
TLS's, Flask's, and ours, and what another server would save.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from . import stack_floor
from .chart import webhook_timeout_seconds
from .context import OUR_SCHEDULER, Bench
from .paths import BIN, REPO
from .processes import CpuMeter, Process, descendants
from .runners import free_port
from .settle import wait_quiet
from .summary import admission_saturation
from .workload import admission_review, group_leader

VEGETA = str(BIN / "vegeta")  # built by bench/tools.sh from bench/tools/go.mod
WARMUP = (50, 2)  # rate/s, seconds: both workers answer at least once before measuring
REPEATED, DISTINCT = "repeated", "distinct"
RECOVERY_SECONDS = 120  # for a webhook left with a backlog by a saturated run to answer again and go idle
# An idle webhook uses next to no CPU; more means it is still working off the last run's
# backlog, which the next run's CPU per request would be charged with.
WEBHOOK_QUIET_CORES = 0.05
WORKLOADS = {
    REPEATED: "one map, repeated (parse cache hits)",
    DISTINCT: "a new map per request (parse cache misses)",
}


def review_body(group: int, settings) -> bytes:
    pod = group_leader(group, settings.group, settings.nodes, OUR_SCHEDULER, "gpu-bench")
    return json.dumps(admission_review(pod, uid=f"bench-{group}"), separators=(",", ":")).encode()


def check_answer(bench: Bench, body: bytes, timeout: float = 10) -> None:
    request = urllib.request.Request(
        f"{bench.webhook.url}/mutate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout, context=bench.webhook.tls_context()) as response:
        review = json.loads(response.read())
    answer = review.get("response") or {}
    if not answer.get("allowed") or not answer.get("patch"):
        raise RuntimeError(f"the webhook did not allow and patch the benchmark's pod: {review}")


def answering(bench: Bench, body: bytes, within: float = RECOVERY_SECONDS) -> None:
    """check_answer, tried again until the webhook answers. A saturated run leaves the webhook
    a backlog of connections and TLS handshakes that it works through after the load stops
    (docs/logs/benchmarks.md, "Measurements behind the code"); the next run must start from
    a webhook that answers, not measure that backlog."""
    deadline = time.monotonic() + within
    while True:
        try:
            check_answer(bench, body, timeout=5)
            return
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the webhook did not answer within {within:g} s of the last run: {err}") from err
            bench.phase(f"  the webhook does not answer yet ({err}): waiting for it to work through its backlog")
            time.sleep(2)


def ready_for_a_run(bench: Bench, body: bytes) -> None:
    """Each run starts from a webhook that answers and has gone idle, and from a quiet control
    plane. A saturated run leaves the webhook working for seconds after the load stops, which
    the next run would pay for (docs/logs/benchmarks.md, "Measurements behind the code")."""
    answering(bench, body)
    pid = bench.webhook.process.pid
    waited, cores = wait_quiet([pid, *descendants(pid)], RECOVERY_SECONDS, WEBHOOK_QUIET_CORES)
    if cores >= WEBHOOK_QUIET_CORES:
        raise RuntimeError(
            f"the webhook still used {cores:.2f} cores {waited:.0f} s after the last run: "
            "its backlog would be charged to the next run"
        )
    if waited > 2:
        bench.phase(f"  waited {waited:.0f}s for the webhook to work off the last run's backlog")
    bench.settle()


def seconds_at(settings, rate: int) -> float:
    """How long a rate is sent: the highest is held (the targets read it), the others run admission_seconds."""
    return settings.admission_hold_seconds if rate == max(settings.admission_rates) else settings.admission_seconds


def write_targets(path: Path, url: str, bodies: Iterable[bytes]) -> Path:
    """vegeta's JSON target format, one request per line, written as the bodies come (a held minute
    of distinct maps is hundreds of MB); vegeta sends them in turn."""
    with open(path, "w") as out:
        for body in bodies:
            target = {
                "method": "POST",
                "url": url,
                "header": {"Content-Type": ["application/json"]},
                "body": base64.b64encode(body).decode("ascii"),
            }
            out.write(json.dumps(target) + "\n")
    return path


def attack_argv(
    targets: Path, rate: int, seconds: float, root_certs: Path, timeout_s: float, results: Path, lazy: bool = False
) -> list[str]:
    """vegeta attack's command line. lazy: targets are read as they are sent, not all first (for
    files of distinct maps too large to hold in memory; each target is then sent once)."""
    return [
        VEGETA,
        "attack",
        "-format=json",
        f"-targets={targets}",
        f"-rate={rate}/1s",
        f"-duration={seconds:g}s",
        f"-root-certs={root_certs}",
        f"-timeout={timeout_s:g}s",
        f"-output={results}",
        *(["-lazy"] if lazy else []),
    ]


def attack(bench: Bench, targets: Path, rate: int, seconds: float, results: Path, lazy: bool = False) -> dict:
    """One constant-rate run, giving up on a request after the apiserver's webhook timeout; vegeta's JSON report."""
    timeout = webhook_timeout_seconds()
    subprocess.run(
        attack_argv(targets, rate, seconds, bench.webhook.certs / "ca.crt", timeout, results, lazy),
        check=True,
        timeout=seconds + timeout + 60,
    )
    report = subprocess.run(
        [VEGETA, "report", "-type=json", str(results)], check=True, capture_output=True, text=True, timeout=60
    )
    return json.loads(report.stdout)


def row(rate: int, seconds: float, report: dict, cpu_s: float) -> dict:
    """The figures of one vegeta report (its latencies are in nanoseconds) and the webhook's CPU."""
    latencies = report["latencies"]
    ok = report.get("status_codes", {}).get("200", 0)
    return {
        "rate": rate,
        "duration_s": seconds,
        "requests": report["requests"],
        "achieved_rate": report["rate"],
        "throughput": report["throughput"],
        "p50_ms": latencies["50th"] / 1e6,
        "p99_ms": latencies["99th"] / 1e6,
        "max_ms": latencies["max"] / 1e6,
        "mean_ms": latencies["mean"] / 1e6,
        "errors": report["requests"] - ok,
        "error_samples": (report.get("errors") or [])[:3],
        "cpu_s": cpu_s,
        "cpu_ms_per_request": cpu_s * 1000 / report["requests"] if report["requests"] else float("nan"),
    }


def distinct_groups(rates: tuple[int, ...], seconds: tuple[float, ...]) -> list[range]:
    """The groups whose maps each rate's run (of its own duration) sends: disjoint, one per request,
    so no map is sent twice in the phase and the parse cache cannot answer (whatever its size)."""
    ranges, start = [], 1  # group 0 is the repeated workload's map
    for rate, duration in zip(rates, seconds, strict=True):
        count = int(rate * duration) + rate  # vegeta may send a little more than rate x seconds
        ranges.append(range(start, start + count))
        start += count
    return ranges


FLOOR_RATE = 500  # requests/s: the rate of the latency target


def check_floor(url: str, context, body: bytes) -> bool:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5, context=context) as response:
        return response.status == 200


def measure_stack_floor(bench: Bench, body: bytes, out: Path) -> list[dict]:
    """Each stack_floor app under each server (the webhook's own granian first), at FLOOR_RATE
    for the admission seconds."""
    settings, rows = bench.settings, []
    for server, app in itertools.product(stack_floor.SERVERS, stack_floor.APPS):
        name = f"{server}-{app}"
        port = free_port()
        url = f"https://127.0.0.1:{port}/mutate"
        process = Process(
            f"stack-floor-{name}",
            [
                sys.executable,
                "-m",
                "bench.stack_floor",
                "--server",
                server,
                "--app",
                app,
                "--tls-cert-file",
                str(bench.webhook.certs / "tls.crt"),
                "--tls-private-key-file",
                str(bench.webhook.certs / "tls.key"),
                "--port",
                str(port),
                "--workers",
                str(bench.webhook.workers),
            ],
            settings.out / "logs" / f"stack-floor-{name}.log",
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        process.start()
        try:
            context = bench.webhook.tls_context()
            process.wait_ready(lambda url=url, context=context: check_floor(url, context, body), timeout=60)
            targets = write_targets(out / f"floor-{name}.json", url, [body])
            attack(bench, targets, *WARMUP, out / f"floor-{name}-warmup.bin")
            bench.phase(
                f"admission, the stack's floor ({server}, {app}): {FLOOR_RATE} requests/s for "
                f"{settings.admission_seconds:g}s"
            )
            cpu = CpuMeter({"floor": [process.pid]})
            report = attack(bench, targets, FLOOR_RATE, settings.admission_seconds, out / f"floor-{name}.bin")
            figures = {
                "server": server,
                "app": app,
                **row(FLOOR_RATE, settings.admission_seconds, report, cpu.used()["floor"]),
            }
            bench.phase(
                f"  p99 {figures['p99_ms']:.2f}ms, errors {figures['errors']}, "
                f"CPU {figures['cpu_ms_per_request']:.3f} ms/request"
            )
            rows.append(figures)
        finally:
            process.stop()
    return rows


def not_run_row(rate: int, seconds: float, reason: str) -> dict:
    """A run the phase did not make (an earlier step failed): no figures, and why, so its
    targets MISS naming the reason (summary.headline_metrics) instead of the phase's
    finished runs being dropped with it."""
    nan = float("nan")
    return {
        "rate": rate,
        "duration_s": seconds,
        "requests": 0,
        "achieved_rate": nan,
        "throughput": nan,
        "p50_ms": nan,
        "p99_ms": nan,
        "max_ms": nan,
        "mean_ms": nan,
        "errors": None,
        "error_samples": [],
        "cpu_s": nan,
        "cpu_ms_per_request": nan,
        "not_run": reason,
    }


def run(bench: Bench) -> dict:
    """Every rate of every workload, then the stack's floor. A step that fails stops the phase
    there: the runs already made are kept, the rest are rows that say why they were not made,
    and the result's "stopped" says what failed (bench.run records it as the phase's error)."""
    settings = bench.settings
    out = settings.out / "admission"
    out.mkdir(parents=True, exist_ok=True)
    url = f"{bench.webhook.url}/mutate"
    repeated = review_body(0, settings)
    answering(bench, repeated)
    repeated_targets = write_targets(out / "repeated.json", url, [repeated])
    attack(bench, repeated_targets, *WARMUP, out / "warmup.bin")

    durations = tuple(seconds_at(settings, rate) for rate in settings.admission_rates)
    workloads, stopped = [], None
    for key in settings.admission_workloads:
        rows = []
        groups = distinct_groups(settings.admission_rates, durations)
        for rate, seconds, rate_groups in zip(settings.admission_rates, durations, groups, strict=True):
            if stopped is None:
                try:
                    rows.append(_one_run(bench, key, rate, seconds, rate_groups, repeated, repeated_targets, out))
                    continue
                except Exception as err:  # noqa: BLE001 - keep what was measured, say why the rest was not
                    stopped = f"{WORKLOADS[key]} at {rate}/s: {err.__class__.__name__}: {err}"
                    bench.phase(f"  admission phase stopped ({stopped}); the runs made so far are kept")
            rows.append(not_run_row(rate, seconds, f"the phase stopped before this run ({stopped})"))
        workloads.append({"key": key, "maps": WORKLOADS[key], "rates": rows})
    floor: list[dict] = []
    if stopped is None:
        try:
            ready_for_a_run(bench, repeated)  # the floor's servers must not share the cores with the webhook's backlog
            floor = measure_stack_floor(bench, repeated, out)
        except Exception as err:  # noqa: BLE001 - the webhook's own runs stand without the floor
            stopped = f"the stack's floor: {err.__class__.__name__}: {err}"
            bench.phase(f"  admission phase stopped ({stopped}); the runs made so far are kept")
    return {
        "endpoint": "/mutate",
        "map_lines": settings.group,
        "workers": bench.webhook.workers,
        "client_timeout_s": webhook_timeout_seconds(),
        "workloads": workloads,
        "stack_floor": floor,
        **({"stopped": stopped} if stopped else {}),
    }


def _one_run(
    bench: Bench,
    key: str,
    rate: int,
    seconds: float,
    rate_groups: range,
    repeated: bytes,
    repeated_targets: Path,
    out: Path,
) -> dict:
    """One workload at one rate, from a webhook that answers and has gone idle."""
    settings = bench.settings
    url = f"{bench.webhook.url}/mutate"
    lazy = key == DISTINCT
    if key == REPEATED:
        ready_for_a_run(bench, repeated)
        targets = repeated_targets
    else:
        # A map of this run's, answered before its run: not sent again.
        ready_for_a_run(bench, review_body(rate_groups[-1], settings))
        bodies = (review_body(g, settings) for g in rate_groups[:-1])
        targets = write_targets(out / f"distinct-{rate}.json", url, bodies)
    bench.phase(f"admission, {WORKLOADS[key]}: {rate} requests/s for {seconds:g}s")
    cpu = CpuMeter({"webhook": [bench.webhook.process.pid]})
    try:
        report = attack(bench, targets, rate, seconds, out / f"{key}-{rate}.bin", lazy=lazy)
    finally:
        if lazy:
            targets.unlink(missing_ok=True)  # hundreds of MB for a held minute, and never read again
    figures = row(rate, seconds, report, cpu.used()["webhook"])
    saturated = admission_saturation(figures)
    bench.phase(
        f"  p50 {figures['p50_ms']:.2f}ms, p99 {figures['p99_ms']:.2f}ms, max {figures['max_ms']:.1f}ms, "
        f"answered {figures['throughput']:.0f}/s, errors {figures['errors']}, "
        f"webhook CPU {figures['cpu_ms_per_request']:.3f} ms/request"
        + (f"; SATURATED ({saturated}): its targets MISS" if saturated else "")
    )
    return figures

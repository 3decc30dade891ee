"""Phase 3: the webhook's latency at fixed request rates, with vegeta (a constant-rate load tool).

vegeta sends on schedule whether or not earlier answers came back, so a
saturated webhook shows up as latency and errors instead of a lower rate (a
closed-loop client would hide it). The request is the AdmissionReview the
apiserver sends to /mutate for a bench pod with a `group`-line map; one
answer is checked first, so the load exercises the real path (a patch that
injects CUDA_VISIBLE_DEVICES), not an error path.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request

from .context import OUR_SCHEDULER, Bench
from .paths import BIN
from .workload import admission_review, bench_pods

VEGETA = str(BIN / "vegeta")  # built by bench/tools.sh from bench/tools/go.mod
WARMUP = (50, 2)  # rate/s, seconds: both gunicorn workers answer at least once before measuring


def check_answer(bench: Bench, body: bytes) -> None:
    request = urllib.request.Request(
        f"{bench.webhook.url}/mutate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10, context=bench.webhook.tls_context()) as response:
        review = json.loads(response.read())
    answer = review.get("response") or {}
    if not answer.get("allowed") or not answer.get("patch"):
        raise RuntimeError(f"the webhook did not allow and patch the benchmark's pod: {review}")


def attack(bench: Bench, targets: str, rate: int, seconds: float) -> dict:
    """One constant-rate run; vegeta's JSON report."""
    out = bench.settings.out / "admission"
    results = out / f"{rate}.bin"
    subprocess.run(
        [
            VEGETA,
            "attack",
            f"-targets={targets}",
            f"-rate={rate}/1s",
            f"-duration={seconds}s",
            f"-root-certs={bench.webhook.certs / 'ca.crt'}",
            "-timeout=10s",
            f"-output={results}",
        ],
        check=True,
        timeout=seconds + 60,
    )
    report = subprocess.run(
        [VEGETA, "report", "-type=json", str(results)], check=True, capture_output=True, text=True, timeout=60
    )
    return json.loads(report.stdout)


def row(rate: int, seconds: float, report: dict) -> dict:
    """The figures of one vegeta report (its latencies are in nanoseconds)."""
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
    }


def run(bench: Bench) -> dict:
    settings = bench.settings
    out = settings.out / "admission"
    out.mkdir(parents=True, exist_ok=True)
    # p-0 of a full group: it carries its group's whole map, as a StatefulSet's pod carries its workload's.
    pod = bench_pods(settings.group, settings.nodes, settings.group, OUR_SCHEDULER, bench.namespace)[0]
    body = json.dumps(admission_review(pod)).encode()
    (out / "review.json").write_bytes(body)
    check_answer(bench, body)
    targets = out / "targets.txt"
    targets.write_text(f"POST {bench.webhook.url}/mutate\nContent-Type: application/json\n@{out / 'review.json'}\n")

    attack(bench, str(targets), *WARMUP)
    rows = []
    for rate in settings.admission_rates:
        bench.phase(f"admission: {rate} requests/s for {settings.admission_seconds:g}s")
        figures = row(rate, settings.admission_seconds, attack(bench, str(targets), rate, settings.admission_seconds))
        bench.phase(
            f"  p50 {figures['p50_ms']:.2f}ms, p99 {figures['p99_ms']:.2f}ms, "
            f"max {figures['max_ms']:.1f}ms, errors {figures['errors']}"
        )
        rows.append(figures)
    return {"endpoint": "/mutate", "map_lines": settings.group, "workers": 2, "rates": rows}

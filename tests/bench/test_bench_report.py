"""From runs to figures to the report: medians, paired ratios, targets PASS/MISS, the Markdown tables."""

import io
import json
import math

from bench.report import json_safe, render_markdown, run_name
from bench.summary import headline_metrics, summarize_throughput
from bench.targets import MISS, NOT_MEASURED, PASS, evaluate, load

LABELS = {
    "ours_bind": "gpu-scheduler",
    "kube_matched": "kube matched",
    "kube_defaults": "kube defaults",
    "ceiling": "ceiling",
    "python_binder": "python binder",
    "ours_dynamic": "gpu-scheduler, count line",
    "kube_gpus": "kube gpus",
}


def run(key: str, round_no: int, rate: float, p99: float = 0.5) -> dict:
    return {
        "key": key,
        "label": LABELS[key],
        "round": round_no,
        "mode": "burst",
        "pods_per_second": rate,
        "latency_s": {"p50": p99 / 5, "p99": p99, "max": p99 * 2},
        "create_latency_s": {"p50": 0.01, "p99": 0.02, "max": 0.05},
        "seen_to_bound_s": {"p50": 0.05, "p99": 0.2, "max": 0.3},
        "peak_rss_mib": 60.0,
        "pods": 500,
        "created": 500,
        "bound": 500,
        "cpu_s": {"runner": 2.0, "webhook": 1.0 if key == "ours_bind" else 0.0, "control_plane": 4.0},
        "attempt_seconds": 0.004,
        "create_errors": 0,
        "create_retries": 0,
        "complete": True,
    }


def burst_runs() -> list[dict]:
    # Round 2 is slow for everyone (a noisy neighbour): paired ratios cancel it out.
    rates = {
        "ours_bind": (300, 100, 310),
        "kube_matched": (200, 50, 210),
        "kube_defaults": (50, 20, 50),
        "ceiling": (500, 300, 520),
    }
    return [run(key, r + 1, rate) for key, per_round in rates.items() for r, rate in enumerate(per_round)]


def results() -> dict:
    burst = burst_runs()
    return {
        "started": "2026-01-01T00:00:00+00:00",
        "duration_s": 600.0,
        "settings": {"quick": False},
        "machine": {"cores": 2, "cpu_model": "Test CPU", "memory_gib": 24.0, "kernel": "6.1"},
        "throughput": {
            "pods": 1000,
            "nodes": 100,
            "group": 100,
            "burst": {"runs": burst, **summarize_throughput(burst)},
        },
        "admission": {
            "endpoint": "/mutate",
            "map_lines": 100,
            "workers": 2,
            "workloads": [
                admission_workload("repeated", 8.5, 0, saturated=False),
                admission_workload("distinct", 12.0, 42, saturated=True),
            ],
        },
        "errors": {},
    }


def admission_workload(key: str, p99_at_500: float, errors_at_1000: int, saturated: bool) -> dict:
    """500/s for 15 s and 1000/s held 60 s; saturated: a backlog at 1000/s (p50 900 ms, 900 answers/s)."""
    return {
        "key": key,
        "maps": key,
        "rates": [
            {
                "rate": 500,
                "duration_s": 15.0,
                "requests": 7500,
                "achieved_rate": 500.0,
                "throughput": 500.0,
                "p50_ms": 1.0,
                "p99_ms": p99_at_500,
                "max_ms": 30.0,
                "mean_ms": 1.2,
                "errors": 0,
                "error_samples": [],
                "cpu_s": 7.5,
                "cpu_ms_per_request": 1.0,
            },
            {
                "rate": 1000,
                "duration_s": 60.0,
                "requests": 60000,
                "achieved_rate": 990.0 if saturated else 1000.0,
                "throughput": 900.0 if saturated else 999.9,
                "p50_ms": 900.0 if saturated else 2.0,
                "p99_ms": 4900.0 if saturated else 30.0,
                "max_ms": 5000.0 if saturated else 80.0,
                "mean_ms": 1000.0 if saturated else 3.0,
                "errors": errors_at_1000,
                "error_samples": ["timeout"] if errors_at_1000 else [],
                "cpu_s": 60.0,
                "cpu_ms_per_request": 1.0,
            },
        ],
    }


def test_each_runner_gets_the_median_of_its_rounds():
    summary = summarize_throughput(burst_runs())["summary"]
    assert summary["ours_bind"]["pods_per_second"] == 300
    assert (summary["ours_bind"]["pods_per_second_min"], summary["ours_bind"]["pods_per_second_max"]) == (100, 310)
    assert summary["kube_defaults"]["pods_per_second"] == 50


def test_cpu_is_given_in_milliseconds_per_pod_bound():
    cpu = summarize_throughput(burst_runs())["summary"]["ours_bind"]["cpu_ms_per_pod"]
    assert cpu == {"runner": 4.0, "webhook": 2.0, "control_plane": 8.0, "total": 14.0}


def test_cpu_ratios_are_per_round_against_kube_scheduler_at_our_client_settings():
    cpu_ratios = summarize_throughput(burst_runs())["cpu_ratios"]
    # ours: 14 ms per pod in all, kube-scheduler matched: 12 (no webhook); the scheduler alone 4 vs 4.
    assert cpu_ratios["bind_over_kube_matched"]["total"]["median"] == 14 / 12
    assert cpu_ratios["bind_over_kube_matched"]["runner"]["median"] == 1.0
    assert "bind_over_kube_pinned" not in cpu_ratios  # that runner did not run


def test_an_incomplete_round_is_listed_and_left_out_never_averaged_in():
    runs = burst_runs()
    slow = next(r for r in runs if r["key"] == "ours_bind" and r["round"] == 3)
    slow.update(complete=False, bound=400)
    figures = summarize_throughput(runs)
    ours = figures["summary"]["ours_bind"]
    assert ours["runs"] == 2 and not ours["complete"]
    assert ours["incomplete"] == [{"round": 3, "reason": "timed out; 100 of 500 pods not bound"}]
    assert ours["pods_per_second"] == 200  # median of rounds 1 and 2 only
    assert math.isnan(figures["ratios"]["bind_over_kube_matched"]["per_round"][2])


def test_an_incomplete_round_carries_its_unbound_pods_diagnosis_into_the_report():
    runs = burst_runs()
    slow = next(r for r in runs if r["key"] == "ours_bind" and r["round"] == 3)
    slow.update(
        complete=False,
        bound=499,
        diagnosis={
            "unbound": 1,
            "unbound_pods": [
                {
                    "name": "p-99",
                    "phase": "Pending",
                    "node": None,
                    "conditions": [{"type": "PodScheduled", "status": "False"}],
                    "seen_by_bench_watch": True,
                    "bindings": [],
                },
                {
                    "name": "p-7",
                    "error": "404 Not Found",
                    "seen_by_bench_watch": False,
                    "bindings": [{"by": "bench-ceiling/0 (linux)", "code": 201, "at": "2026-12-02T01:12:09Z"}],
                },
            ],
            "runner_queue": {"active": 0.0, "backoff": 1.0},
        },
    )
    data = results()
    data["throughput"]["burst"] = summarize_throughput(runs)
    (item,) = data["throughput"]["burst"]["summary"]["ours_bind"]["incomplete"]
    assert item["diagnosis"]["unbound"] == 1
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    assert (
        "round 3, gpu-scheduler: timed out; 1 of 500 pods not bound (unbound: p-99: phase Pending, node none, "
        "conditions ['PodScheduled=False'], seen by the bench's watch, bindings posted: none; p-7: 404 Not Found, "
        "never seen by the bench's watch, bindings posted: 201 to bench-ceiling; "
        "the scheduler's queue {'active': 0.0, 'backoff': 1.0})"
    ) in markdown


def test_ratios_are_the_median_of_per_round_ratios_not_a_ratio_of_medians():
    ratios = summarize_throughput(burst_runs())["ratios"]
    assert ratios["bind_over_kube_matched"]["per_round"] == [1.5, 2.0, 310 / 210]
    assert ratios["bind_over_kube_matched"]["median"] == 1.5
    assert ratios["bind_over_kube_defaults"]["median"] == 6.0
    assert "bind_over_python_binder" not in ratios  # that runner did not run


def test_targets_pass_miss_or_say_they_were_not_measured():
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(results()))}
    assert checked["ratio.bind_over_kube_matched"]["status"] == PASS  # 1.5 >= 1.0
    assert checked["ratio.bind_over_ceiling"]["status"] == MISS  # median 310/520 < 0.9
    assert checked["admission.repeated.500.p99_ms"]["status"] == PASS  # 8.5 < 10
    assert checked["admission.distinct.500.p99_ms"]["status"] == MISS  # 12 >= 10
    assert checked["admission.repeated.1000.errors"]["status"] == PASS
    assert checked["admission.distinct.1000.errors"]["status"] == MISS  # 42 != 0
    assert checked["scale.ratio.bind_over_kube_matched"]["status"] == NOT_MEASURED  # no scale run
    assert checked["memory.scheduler_peak_rss_mib"]["status"] == NOT_MEASURED  # no memory phase
    assert checked["ratio.bind_over_kube_matched"]["measured_at"] == "1000 pods, 100 nodes"


def test_a_nan_figure_is_not_measured_rather_than_a_miss():
    targets = [{"metric": "m", "op": "<", "threshold": 1, "unit": "s", "at": "x", "description": "d"}]
    assert evaluate(targets, {"m": {"value": math.nan, "scale": "s"}})[0]["status"] == NOT_MEASURED
    assert evaluate(targets, {"m": {"value": 0.5, "scale": "s"}})[0]["status"] == PASS
    assert evaluate(targets, {"m": {"value": 1.0, "scale": "s"}})[0]["status"] == MISS


def test_the_markdown_report_shows_each_runner_each_ratio_and_each_target():
    data = results()
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    assert (
        "| gpu-scheduler, bind mode (devices in the Binding; no admission call) | 3 | 300.0 (100.0–310.0) "
        "| 100 ms | 500 ms | 20 ms | 0 | 4.00 / 2.00 / 8.00 |"
    ) in markdown
    assert "**1.50x**" in markdown and "**6.00x**" in markdown
    checked = evaluate(load(), headline_metrics(data))
    statuses = [t["status"] for t in checked]
    assert markdown.count("**PASS**") == statuses.count(PASS) > 0
    assert markdown.count("**MISS**") == statuses.count(MISS) > 0
    assert "2 cores (Test CPU)" in markdown
    assert "## 4. Memory" not in markdown  # no phase, no section


def test_results_json_has_no_nan_which_json_cannot_carry():
    text = json.dumps(json_safe({"a": [math.nan, 1.0], "b": {"c": math.nan}}), allow_nan=False)
    assert json.loads(text) == {"a": [None, 1.0], "b": {"c": None}}


def test_strict_mode_fails_on_a_miss_and_on_a_target_not_measured():
    from bench.run import exit_code

    passed = {"errors": {}, "targets": [{"status": PASS}]}
    assert exit_code(passed, strict=True) == 0
    assert exit_code({"errors": {}, "targets": [{"status": PASS}, {"status": MISS}]}, strict=True) == 1
    assert exit_code({"errors": {}, "targets": [{"status": NOT_MEASURED}]}, strict=True) == 1
    assert exit_code({"errors": {}, "targets": [{"status": MISS}]}, strict=False) == 0
    assert exit_code({"errors": {"memory": "boom"}, "targets": []}, strict=False) == 1


def test_the_stack_floor_is_shown_beside_the_webhook_at_the_same_rate():
    data = results()
    floor_row = dict(data["admission"]["workloads"][0]["rates"][0], cpu_ms_per_request=0.4)
    data["admission"]["stack_floor"] = [
        dict(floor_row, server="gthread", app="gunicorn"),
        dict(floor_row, server="gthread", app="flask", cpu_ms_per_request=0.6),
        dict(floor_row, server="granian", app="flask", cpu_ms_per_request=0.3),
    ]
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    assert "**The stack's floor** at 500/s" in markdown
    gthread = "gunicorn, gthread worker (32 threads), TLS"
    assert f"| {gthread}, a bare WSGI app answering a fixed review | 8.50 ms | 0 | 0.400 ms |" in markdown
    assert f"| {gthread}, the same answer from a Flask route | 8.50 ms | 0 | 0.600 ms |" in markdown
    assert "| granian (WSGI), TLS, the same answer from a Flask route | 8.50 ms | 0 | 0.300 ms |" in markdown
    assert (
        "| gpu-scheduler webhook (admission, logging, metrics), one map repeated | 8.50 ms | 0 | 1.000 ms |" in markdown
    )


def test_a_kept_run_from_before_the_servers_were_compared_shows_its_floor_as_gthreads():
    data = results()
    floor_row = dict(data["admission"]["workloads"][0]["rates"][0], cpu_ms_per_request=0.4)
    data["admission"]["stack_floor"] = [dict(floor_row, app="gunicorn")]  # no "server" key
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    assert "| gunicorn, gthread worker (32 threads), TLS, a bare WSGI app answering" in markdown


def test_the_stack_floor_apps_read_the_body_and_allow():
    from bench import stack_floor

    environ = {"wsgi.input": io.BytesIO(b'{"request": {}}'), "REQUEST_METHOD": "POST"}
    started = []
    body = b"".join(stack_floor.bare_app(environ, lambda status, headers: started.append(status)))
    assert started == ["200 OK"] and json.loads(body)["response"]["allowed"] is True
    client = stack_floor.flask_app().test_client()
    answer = client.post("/mutate", data=b"{}", content_type="application/json")
    assert answer.status_code == 200 and answer.get_json()["response"]["allowed"] is True


def test_a_target_whose_runner_has_an_incomplete_round_is_a_miss_whatever_the_median_of_the_others():
    data = results()
    runs = data["throughput"]["burst"]["runs"]
    next(r for r in runs if r["key"] == "ours_bind" and r["round"] == 3).update(complete=False, bound=400)
    data["throughput"]["burst"].update(summarize_throughput(runs))
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(data))}
    # Rounds 1 and 2 alone give 1.5 and 2.0 (>= 1.0), but gpu-scheduler did not finish round 3.
    ratio = checked["ratio.bind_over_kube_matched"]
    assert ratio["status"] == MISS and ratio["value"] == 1.75
    assert ratio["reason"] == "gpu-scheduler: round 3 incomplete (timed out; 100 of 500 pods not bound)"
    assert checked["ours_bind.latency_p99_s"]["status"] == MISS  # 0.5 s < 1 s, from the complete rounds only
    markdown = render_markdown(data, list(checked.values()))
    assert "**MISS** (gpu-scheduler: round 3 incomplete (timed out; 100 of 500 pods not bound))" in markdown


def test_an_incomplete_round_of_the_reference_makes_only_the_targets_that_read_it_miss():
    data = results()
    runs = data["throughput"]["burst"]["runs"]
    next(r for r in runs if r["key"] == "kube_matched" and r["round"] == 1).update(complete=False)
    data["throughput"]["burst"].update(summarize_throughput(runs))
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(data))}
    assert checked["ratio.bind_over_kube_matched"]["status"] == MISS
    assert checked["ratio.bind_over_kube_matched"]["reason"] == "kube matched: round 1 incomplete (timed out)"
    assert checked["cpu_ratio.total.bind_over_kube_matched"]["status"] == MISS
    assert checked["ratio.bind_over_kube_defaults"]["status"] == PASS
    assert checked["ours_bind.latency_p99_s"]["status"] == PASS


def test_every_round_incomplete_is_a_miss_not_a_target_not_measured():
    data = results()
    runs = data["throughput"]["burst"]["runs"]
    for r in runs:
        if r["key"] == "ours_bind":
            r.update(complete=False, bound=0)
    data["throughput"]["burst"].update(summarize_throughput(runs))
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(data))}
    assert checked["ratio.bind_over_kube_matched"]["status"] == MISS
    assert math.isnan(checked["ratio.bind_over_kube_matched"]["value"])
    assert checked["ratio.bind_over_kube_matched"]["reason"].startswith("gpu-scheduler: rounds 1, 2, 3 incomplete")


def test_the_rss_target_needs_its_burst_complete():
    data = results()
    data["memory"] = {
        "pods": 10000,
        "nodes": 1000,
        "bound": 9000,
        "complete": False,
        "scheduler_peak_rss_mib": 80.0,
        "webhook": {"sum_mib": 300.0},
    }
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(data))}
    rss = checked["memory.scheduler_peak_rss_mib"]
    assert rss["status"] == MISS and rss["value"] == 80.0
    assert rss["reason"] == "the memory burst did not complete: 9000 of 10000 pods bound"
    data["memory"].update(bound=10000, complete=True)
    assert {t["metric"]: t for t in evaluate(load(), headline_metrics(data))}["memory.scheduler_peak_rss_mib"][
        "status"
    ] == PASS


def test_the_scale_rss_target_needs_every_scale_round_of_ours_complete():
    scale_runs = [run("ours_bind", 1, 100), run("kube_matched", 1, 150)]
    scale_runs[0].update(complete=False, bound=9000, pods=10000, created=10000)
    data = {"scale": {"pods": 10000, "nodes": 5000, "runs": scale_runs, **summarize_throughput(scale_runs)}}
    checked = {t["metric"]: t for t in evaluate(load(run="scale"), headline_metrics(data))}
    assert checked["scale.ours_bind.peak_rss_mib"]["status"] == MISS
    assert checked["scale.ours_bind.peak_rss_mib"]["reason"].startswith("gpu-scheduler: round 1 incomplete")


def test_the_report_names_the_versions_read_from_the_binaries_never_a_typed_one():
    data = results()
    data["machine"].update(
        kube_scheduler="Kubernetes v1.35.2", gpu_scheduler="gpu-scheduler 0.2.0", commit="0123456789ab"
    )
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    assert "v1.34" not in markdown
    assert "kube-scheduler (Kubernetes v1.35.2), three ways" in markdown
    assert "gpu-scheduler 0.2.0 (commit 0123456789ab) runs as in production" in markdown


def test_the_commit_measured_is_read_from_git_and_says_when_the_tree_had_changes(tmp_path):
    import subprocess

    from bench.machine import git_commit

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "f").write_text("1")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    sha = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert git_commit(tmp_path) == sha
    (tmp_path / "f").write_text("2")
    assert git_commit(tmp_path) == f"{sha} with uncommitted changes"
    assert git_commit(tmp_path / "not-a-repo") == "unknown"


def test_a_saturated_webhook_is_a_miss_whatever_its_error_count():
    data = results()
    data["admission"]["workloads"][0] = admission_workload("repeated", 8.5, 0, saturated=True)
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(data))}
    errors = checked["admission.repeated.1000.errors"]
    assert errors["value"] == 0 and errors["status"] == MISS
    assert errors["reason"] == "webhook saturated at 1000/s: answered 900/s of 1000/s asked; median 900 ms"
    assert checked["admission.repeated.500.p99_ms"]["status"] == PASS  # 500/s kept up


def test_saturation_is_an_answer_rate_short_of_the_asked_rate_or_a_median_that_is_a_backlog():
    from bench.summary import admission_saturation

    kept_up = {"rate": 1000, "throughput": 999.0, "p50_ms": 2.0}
    assert admission_saturation(kept_up) is None
    assert admission_saturation(dict(kept_up, throughput=949.0)) == "answered 949/s of 1000/s asked"
    assert admission_saturation(dict(kept_up, p50_ms=101.0)) == "median 101 ms"
    assert admission_saturation(dict(kept_up, throughput=950.0, p50_ms=100.0)) is None  # both bounds inclusive


def test_the_admission_table_gives_p50_p99_cpu_and_saturation_at_each_rate():
    data = results()
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    assert "| 1000/s for 60 s | 1,000 | 1,000 | 60,000 | 2.00 ms | 30.00 ms | 80.0 ms | 0 | 1.000 ms | no |" in markdown
    assert (
        "| 1000/s for 60 s | 990 | 900 | 60,000 | 900.00 ms | 4,900.00 ms | 5,000.0 ms | 42 | 1.000 ms | "
        "**yes**: answered 900/s of 1000/s asked; median 900 ms |" in markdown
    )


def test_the_idle_rates_subtracted_and_the_settling_after_the_last_bind_are_reported():
    runs = burst_runs()
    for r in runs:
        r.update(idle_cores={"runner": 0.01, "webhook": 0.02, "control_plane": 0.3}, settle_s=2.0, settled=True)
    next(r for r in runs if r["key"] == "ours_bind" and r["round"] == 2).update(settle_s=20.0, settled=False)
    summary = summarize_throughput(runs)["summary"]
    assert summary["ours_bind"]["idle_cores"] == {"runner": 0.01, "webhook": 0.02, "control_plane": 0.3}
    assert summary["ours_bind"]["settle_s"] == 2.0 and summary["ours_bind"]["unsettled"] == 1
    data = results()
    data["throughput"]["burst"] = {"runs": runs, **summarize_throughput(runs)}
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    assert "| idle cores subtracted: scheduler / webhook / control plane | settled after the last bind |" in markdown
    assert "| 0.01 / 0.02 / 0.30 | 2.0 s (1 run not settled in 20 s) |" in markdown


def test_a_run_of_some_throughput_modes_names_them_so_the_readme_does_not_pass_it_for_a_full_run():
    def named(settings: dict) -> str:
        return run_name({"settings": settings, "started": "2026-11-26T05:03:09", "machine": {"cores": 2}})

    assert named({"modes": ["burst"]}).startswith("`make bench BENCH_MODES=burst` of 2026-11-26 05:03 UTC")
    assert named({"modes": ["burst", "drain"]}).startswith("`make bench` of")
    assert named({"modes": ["burst"], "scale": True}).startswith("`make bench-scale` of")


def test_bind_modes_targets_are_issue_47s_and_read_its_own_figures():
    checked = {t["metric"]: t for t in load()}
    wanted = {
        "cpu_ratio.total.bind_over_kube_matched": ("<=", 1.0),
        "ratio.bind_over_kube_matched": (">=", 1.0),
        "ratio.bind_over_kube_defaults": (">=", 2.0),
        "ratio.bind_over_ceiling": (">=", 0.9),
        "ours_bind.latency_p99_s": ("<", 1.0),
        "ours_bind.scheduled_event_share": (">=", 1.0),
    }
    for metric, (op, threshold) in wanted.items():
        assert (checked[metric]["op"], checked[metric]["threshold"], checked[metric]["run"]) == (op, threshold, "bench")
    scale_targets = {t["metric"]: t for t in load(run="scale")}
    assert scale_targets["scale.ratio.bind_over_kube_matched"]["threshold"] == 1.2
    assert scale_targets["scale.cpu_ratio.total.bind_over_kube_matched"]["threshold"] == 1.0


def test_a_scale_cpu_ratio_whose_windows_did_not_settle_cannot_pass():
    def scale_run(key, round_no, settled):
        figures = run("ours_bind" if key == "ours_bind" else key, round_no, 200.0)
        return {**figures, "key": key, "label": key, "settled": settled}

    runs = [scale_run("ours_bind", 1, False), scale_run("kube_matched", 1, True)]
    results = {"scale": {"pods": 10000, "nodes": 5000, "runs": runs, **summarize_throughput(runs)}}
    metrics = headline_metrics(results)
    assert "1 CPU window not settled" in metrics["scale.cpu_ratio.total.bind_over_kube_matched"]["reason"]
    assert "reason" not in metrics["scale.ratio.bind_over_kube_matched"]
    checked = {t["metric"]: t for t in evaluate(load(run="scale"), metrics)}
    assert checked["scale.cpu_ratio.total.bind_over_kube_matched"]["status"] == MISS


def test_the_report_names_only_gpu_schedulers_bind_mode_runner_and_no_removed_mode():
    data = results()
    drain = [dict(r, mode="drain", launch_to_first_bind_s=0.5) for r in data["throughput"]["burst"]["runs"]]
    data["throughput"]["drain"] = {"runs": drain, **summarize_throughput(drain)}
    markdown = render_markdown(data, evaluate(load(), headline_metrics(data)))
    bind = "gpu-scheduler, bind mode (devices in the Binding; no admission call)"
    assert f"| {bind} / kube-scheduler, matched (qps 500, burst 1000, default" in markdown
    # The mean attempt from its /metrics; not for kube-scheduler.
    assert f"| {bind} | 3 | 300.0 (100.0–310.0) | 0.50 s | 4.0 ms |" in markdown
    assert "| kube matched | 3 |" not in markdown and "| 0.50 s | — |" in markdown
    assert "admission.mode" not in markdown and "admission policy (CEL)" not in markdown
    assert "admission webhook" not in markdown


def test_the_statefulset_table_sets_the_statefulset_beside_the_bare_pods_of_the_burst():
    from bench.report import statefulset_lines

    sts = {
        "replicas": 500,
        "pods_per_second": 90.0,
        "created_per_second": 95.0,
        "seen_to_bound_p50_s": 0.05,
        "seen_to_bound_p99_s": 0.2,
        "attempt_ms": 4.0,
    }
    alone = statefulset_lines(sts, None)
    assert "| gpu-scheduler | bare pods | StatefulSet, 500-line map |" in alone
    assert "| pods/s bound | — | 90.0 |" in alone
    burst = {"ours_bind": {"pods_per_second": 300.0, "seen_to_bound_p50_s": 0.01, "seen_to_bound_p99_s": 0.03}}
    beside = statefulset_lines(
        sts, {"group": 100, "burst": {"summary": {"ours_bind": dict(burst["ours_bind"], attempt_ms=3.0)}}}
    )
    assert "| gpu-scheduler | bare pods, 100-line maps | StatefulSet, 500-line map |" in beside
    assert "| pods/s bound | 300.0 | 90.0 |" in beside
    assert "| scheduler's mean attempt (its /metrics) | 3.00 ms | 4.00 ms |" in beside


def test_the_count_lines_targets_read_ours_against_kube_scheduler_placing_gpu_requests_in_the_same_rounds():
    # Round 2 is slow for both: the paired ratio is 0.5 every round, whatever the medians say.
    runs = [run("ours_dynamic", r, rate) for r, rate in ((1, 100), (2, 40), (3, 110))]
    runs += [run("kube_gpus", r, rate) for r, rate in ((1, 200), (2, 80), (3, 220))]
    for kube in runs[3:]:
        kube["cpu_s"] = {"runner": 1.0, "webhook": 0.0, "control_plane": 4.0}
    data = results()
    data["throughput"]["burst"] = {"runs": runs, **summarize_throughput(runs)}
    scale_runs = [{**r, "round": 1} for r in (runs[0], runs[3])]
    data["scale"] = {"pods": 10000, "nodes": 5000, "runs": scale_runs, **summarize_throughput(scale_runs)}
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(data))}
    assert checked["ratio.dynamic_over_kube_gpus"]["value"] == 0.5
    assert checked["ratio.dynamic_over_kube_gpus"]["status"] == MISS
    assert checked["ratio.dynamic_over_kube_gpus"]["threshold"] == 1.0
    # CPU seconds of the run, scheduler + webhook + control plane: (2 + 0 + 4) / (1 + 0 + 4), every round.
    assert math.isclose(checked["cpu_ratio.total.dynamic_over_kube_gpus"]["value"], 1.2)
    assert checked["cpu_ratio.total.dynamic_over_kube_gpus"]["status"] == MISS
    assert checked["scale.ratio.dynamic_over_kube_gpus"]["value"] == 0.5
    assert checked["scale.ratio.dynamic_over_kube_gpus"]["run"] == "scale"
    assert checked["scale.cpu_ratio.total.dynamic_over_kube_gpus"]["run"] == "scale"
    markdown = render_markdown(data, list(checked.values()))
    assert "gpu-scheduler, count line (map *=*:gpus=1" in markdown  # the runner's row, by its real label
    assert "burst throughput, count lines (*=*:gpus=1), vs kube-scheduler matched" in markdown


def test_a_profiled_scale_run_shows_where_gpu_schedulers_time_went():
    scale_runs = [run("ours_dynamic", 1, 4.0), run("kube_gpus", 1, 150.0)]
    scale_runs[0]["profile"] = {
        "samples": 900,
        "gil": True,
        "self": [{"function": "conflicts (scheduling/ledger.py)", "share": 0.4}],
        "inclusive": [{"function": "candidate (scheduling/dynamic.py)", "share": 0.9}],
    }
    data = {
        "settings": {"scale": True},
        "machine": {},
        "scale": {"pods": 200, "nodes": 5000, "runs": scale_runs, **summarize_throughput(scale_runs)},
    }
    markdown = render_markdown(data, [])
    assert "### Where gpu-scheduler's time goes at this scale (py-spy)" in markdown
    assert "| 40.0% conflicts (scheduling/ledger.py) | 90.0% candidate (scheduling/dynamic.py) |" in markdown

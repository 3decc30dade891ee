"""A run of record is kept in the repo, and the README's benchmark table is made from that file."""

import json
from pathlib import Path

import pytest

from bench import readme
from bench.report import json_safe, record
from bench.run import parse_settings
from bench.summary import headline_metrics, summarize_throughput
from bench.targets import evaluate, load


def burst_run(key: str, label: str, rate: float, cpu: dict) -> dict:
    return {
        "key": key,
        "label": label,
        "round": 1,
        "pods": 1000,
        "created": 1000,
        "bound": 1000,
        "complete": True,
        "pods_per_second": rate,
        "latency_s": {"p50": 0.2, "p99": 0.5, "max": 0.9},
        "create_latency_s": {"p50": 0.01, "p99": 0.02, "max": 0.05},
        "seen_to_bound_s": {"p50": 0.05, "p99": 0.2, "max": 0.3},
        "peak_rss_mib": 60.0,
        "cpu_s": cpu,
    }


def results() -> dict:
    """A synthetic run: gpu-scheduler at 150 pods/s, kube-scheduler matched at 100; the webhook
    saturated at 1000/s with 42 errors."""
    burst = [
        burst_run("ours_bind", "gpu-scheduler", 150.0, {"runner": 2.0, "webhook": 1.5, "control_plane": 8.0}),
        burst_run(
            "kube_matched", "kube-scheduler, matched", 100.0, {"runner": 1.0, "webhook": 0.0, "control_plane": 7.0}
        ),
    ]
    row = {"duration_s": 60.0, "requests": 60000, "achieved_rate": 1000.0, "max_ms": 5000.0, "cpu_ms_per_request": 1.2}
    return {
        "started": "2026-01-01T00:00:59+00:00",
        "duration_s": 900.0,
        "settings": {"quick": False},
        "machine": {"cores": 2, "cpu_model": "Test CPU", "memory_gib": 24.0, "kernel": "6.1"},
        "throughput": {
            "pods": 1000,
            "nodes": 100,
            "group": 100,
            "burst": {"runs": burst, **summarize_throughput(burst)},
        },
        "admission": {
            "workloads": [
                {
                    "key": "distinct",
                    "maps": "distinct",
                    "rates": [dict(row, rate=1000, throughput=900.0, p50_ms=900.0, p99_ms=4900.0, errors=42)],
                }
            ]
        },
        "errors": {},
    }


def recorded(tmp_path: Path, name: str = "2026-01-01-0000-bench.json") -> Path:
    data = results()
    data["machine"]["commit"] = "0123456789ab"
    data["targets"] = evaluate(load(), headline_metrics(data))
    path = tmp_path / name
    path.write_text(json.dumps(json_safe(data)))
    return path


def test_a_run_of_record_is_written_beside_its_plot_under_its_utc_start(tmp_path: Path):
    data = results()
    plot = tmp_path / "bench.png"
    plot.write_bytes(b"png")
    kept = record(data, plot, tmp_path / "docs-bench")
    assert kept["json"] == tmp_path / "docs-bench" / "2026-01-01-0000-bench.json"
    assert kept["plot"] == tmp_path / "docs-bench" / "2026-01-01-0000-bench.png"
    assert json.loads(kept["json"].read_text())["throughput"]["pods"] == 1000
    assert kept["plot"].read_bytes() == b"png"
    with pytest.raises(FileExistsError, match="2026-01-01-0000-bench.json"):
        record(data, plot, tmp_path / "docs-bench")  # a kept record is never overwritten


def test_record_is_asked_by_flag_or_environment_and_refused_for_a_quick_run(monkeypatch, capsys):
    for name in ("QUICK", "BENCH_RECORD", "BENCH_ADMISSION_HOLD_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    assert parse_settings(["--record"]).record is True
    monkeypatch.setenv("BENCH_RECORD", "1")
    assert parse_settings([]).record is True
    with pytest.raises(SystemExit):
        parse_settings(["--quick"])
    assert "not a run of record" in capsys.readouterr().err


def test_the_readme_table_is_made_from_the_kept_file(tmp_path: Path):
    path = recorded(tmp_path)
    text = readme.render([path])
    assert f"[{path.name}]" in text and "commit 0123456789ab" in text
    assert (
        "| burst throughput, bind mode, vs kube-scheduler matched (default profile) | >= 1 x | 1.500 x | **PASS** |"
    ) in text
    assert (
        "| webhook errors at 1000 requests/s held 60 s, a new map per request; a saturated webhook is a MISS "
        "| == 0 requests | 42 requests | **MISS** (42 requests instead of 0; webhook saturated at 1000/s: "
        "answered 900/s of 1000/s asked; median 900 ms) |"
    ) in text
    assert (
        "| gpu-scheduler, bind mode (devices in the Binding; no admission call) | 150.0 | 500 ms | 2.00 / 1.50 / 8.00 |"
        in text
    )
    assert (
        "| kube-scheduler, matched (qps 500, burst 1000, default profile) | 100.0 | 500 ms | 1.00 / 0.00 / 7.00 |"
    ) in text
    assert (
        "| scheduler peak RSS (VmHWM) with the pods bound by it and the nodes in its caches | < 150 MiB | — "
        "| not measured |"
    ) in text


def test_the_readme_section_between_its_markers_is_replaced_and_nothing_else():
    text = "# Title\n\nbefore\n<!-- bench:start -->\nold figures\n<!-- bench:end -->\nafter\n"
    assert readme.replace_section(text, "new\n") == (
        "# Title\n\nbefore\n<!-- bench:start -->\nnew\n<!-- bench:end -->\nafter\n"
    )
    with pytest.raises(ValueError, match="<!-- bench:start -->"):
        readme.replace_section("no markers\n", "new\n")


def test_markers_quoted_in_a_sentence_are_left_alone():
    # docs/benchmarks.md names the markers in its prose; the first writer took those for them.
    prose = "between its `<!-- bench:start -->` and `<!-- bench:end -->`\nmarkers.\n"
    text = prose + "<!-- bench:start -->\nold\n<!-- bench:end -->\n"
    assert readme.replace_section(text, "new\n") == prose + "<!-- bench:start -->\nnew\n<!-- bench:end -->\n"


def test_the_latest_records_are_the_newest_bench_run_and_the_newest_scale_run(tmp_path: Path):
    for name in ("2026-01-01-0900-bench", "2026-01-02-0800-bench", "2026-01-01-1000-scale", "notes"):
        (tmp_path / f"{name}.json").write_text("{}")
    assert readme.latest_records(tmp_path) == [
        tmp_path / "2026-01-02-0800-bench.json",
        tmp_path / "2026-01-01-1000-scale.json",
    ]


def test_the_readme_headline_counts_the_targets_and_shows_the_runners_and_the_full_page_links_from_docs(
    tmp_path: Path,
):
    path = recorded(tmp_path)
    results = json.loads(path.read_text())
    met = sum(t["status"] == "PASS" for t in results["targets"])
    missed = sum(t["status"] == "MISS" for t in results["targets"])
    headline = readme.render_headlines([path])
    assert f"[{path.name}](docs/bench/{path.name})" in headline
    assert f"{met} of {len(results['targets'])} targets met, {missed} missed" in headline
    assert (
        "| gpu-scheduler, bind mode (devices in the Binding; no admission call) | 150.0 | 500 ms | 2.00 / 1.50 / 8.00 |"
        in headline
    )
    assert "| target | wanted |" not in headline  # every target is docs/benchmarks.md's
    assert f"[{path.name}](bench/{path.name})" in readme.render([path], link_dir="bench/")


def test_bench_readme_writes_the_headline_and_the_full_tables_into_their_files(tmp_path: Path):
    path = recorded(tmp_path)
    markers = "top\n<!-- bench:start -->\nold\n<!-- bench:end -->\nbottom\n"
    (tmp_path / "README.md").write_text(markers)
    (tmp_path / "benchmarks.md").write_text(markers)
    assert (
        readme.main([str(path), "--write", str(tmp_path / "README.md"), "--full", str(tmp_path / "benchmarks.md")]) == 0
    )
    short, full = (tmp_path / "README.md").read_text(), (tmp_path / "benchmarks.md").read_text()
    assert "old" not in short and "old" not in full
    assert "targets met" in short and "| target | wanted |" not in short
    assert "| target | wanted | measured | status |" in full and "top\n" in full and full.endswith("bottom\n")


def test_a_kept_run_with_the_removed_modes_runners_shows_only_todays_runners(tmp_path: Path):
    # The runs of record up to 2026-12-07 hold "ours" (admission.mode webhook) and "ours_policy"
    # (admission.mode policy): their rows are left out, their targets shown as the run evaluated them.
    data = results()
    burst = data["throughput"]["burst"]["runs"]
    for key in ("ours", "ours_policy"):
        burst.append(burst_run(key, "x", 180.0, {"runner": 2.0, "webhook": 0.0, "control_plane": 8.5}))
    data["throughput"]["burst"] = {"runs": burst, **summarize_throughput(burst)}
    removed = {
        "metric": "ratio.policy_over_kube_matched",
        "description": "burst throughput, admission policy (CEL), vs kube-scheduler matched (default profile)",
        "op": ">=",
        "threshold": 1.0,
        "unit": "x",
        "value": 1.8,
        "status": "PASS",
    }
    data["targets"] = [*evaluate(load(), headline_metrics(data)), removed]
    path = tmp_path / "2026-01-01-0000-bench.json"
    path.write_text(json.dumps(json_safe(data)))
    headline = readme.render_headlines([path])
    assert "| gpu-scheduler, bind mode (devices in the Binding; no admission call) | 150.0 |" in headline
    assert "| x |" not in headline and "180.0" not in headline
    assert f"| {removed['description']} | >= 1 x | 1.800 x | **PASS** |" in readme.render([path])


def test_the_readme_gives_bind_modes_targets(tmp_path: Path):
    full = readme.render([recorded(tmp_path)])
    assert "| burst throughput, bind mode, vs kube-scheduler matched (default profile) | >= 1 x | 1.500 x |" in full
    assert "CPU per pod of a burst, bind mode: scheduler + control plane (no webhook)" in full

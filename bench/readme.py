"""The benchmark tables of the README and docs/benchmarks.md, made from kept runs of record
(docs/bench/*.json), never typed.

    .venv/bin/python -m bench.readme [RECORD.json ...] [--write README.md] [--full docs/benchmarks.md]
    # `make bench-readme` writes both

Without files, the newest bench run and the newest scale run of docs/bench/
are taken. The README gets the headline: how many targets the newest bench
run met, and its runners' figures in one small table; docs/benchmarks.md
gets every target and every runner of each run. Each replaces what stands
between the markers `<!-- bench:start -->` and `<!-- bench:end -->` in its
file, and nothing else; without a file the headline is printed. Every figure
is what the run itself recorded: its targets as it evaluated them, its medians.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import targets
from .contenders import LABELS
from .paths import RECORD_DIR, REPO
from .report import CPU_HEADER, cpu_cell, ms, num, run_name, table

START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def latest_records(directory: Path = RECORD_DIR) -> list[Path]:
    """The newest run of record of each kind (names start with their UTC start, so they sort)."""
    newest = [max(directory.glob(f"*-{kind}.json"), default=None) for kind in ("bench", "scale")]
    return [path for path in newest if path is not None]


def _status(target: dict) -> str:
    status = f"**{target['status']}**" if target["status"] in (targets.PASS, targets.MISS) else target["status"]
    return status + (f" ({targets.shortfall(target)})" if target["status"] == targets.MISS else "")


def _measured(target: dict) -> str:
    return num(target["value"], 3 if target["unit"] in ("x", "s", "ms") else 0, f" {target['unit']}")


def _runner_rows(summary: dict) -> list[list[str]]:
    # Each row named by today's label of its runner, which says how gpu-scheduler's pods were admitted
    # (webhook or policy); runs kept before the policy runner existed call the webhook one "gpu-scheduler".
    return [
        [LABELS[key], num(s["pods_per_second"]), ms(s["latency_p99_s"]), cpu_cell(s)]
        for key in LABELS
        if (s := summary.get(key))
    ]


def _source(path: Path, results: dict, link_dir: str) -> str:
    commit = (results.get("machine") or {}).get("commit", "unknown")
    return (
        f"From [{path.name}]({link_dir}{path.name}): {run_name(results)}, commit {commit}, "
        f"{num(results.get('duration_s'), 0)} s in all."
    )


def _runner_table(title: str, sizes: dict, summary: dict) -> list[str]:
    return table(
        [f"{sizes['pods']:,} pods / {sizes['nodes']:,} nodes, {title}, median", "pods/s", "p99", CPU_HEADER],
        _runner_rows(summary),
    )


def render_headline(path: Path, results: dict, link_dir: str = "docs/bench/") -> list[str]:
    """The README's part of one run: where it is, how many targets it met, its burst runners."""
    statuses = [t["status"] for t in results.get("targets", [])]
    met = statuses.count(targets.PASS)
    missed = [t["description"] for t in results.get("targets", []) if t["status"] == targets.MISS]
    lines = [
        _source(path, results, link_dir),
        f"{met} of {len(statuses)} targets met"
        + (f", {len(missed)} missed" if missed else "")
        + (f", {len(statuses) - met - len(missed)} not measured" if len(statuses) - met - len(missed) else "")
        + ".",
    ]
    burst = (results.get("throughput") or {}).get("burst") or {}
    if burst.get("summary"):
        lines += ["", *_runner_table("burst", results["throughput"], burst["summary"])]
    return lines


def render_record(path: Path, results: dict, link_dir: str = "docs/bench/") -> list[str]:
    """One run of record: where it is, what it was, its targets, and its runners' figures."""
    lines = [
        _source(path, results, link_dir),
        "",
        *table(
            ["target", "wanted", "measured", "status"],
            [
                [t["description"], f"{t['op']} {t['threshold']:g} {t['unit']}", _measured(t), _status(t)]
                for t in results.get("targets", [])
            ],
        ),
    ]
    for title, figures in (
        ("burst", ((results.get("throughput") or {}).get("burst") or {})),
        ("scale", results.get("scale") or {}),
    ):
        if figures.get("summary"):
            sizes = results["throughput"] if title == "burst" else figures
            lines += ["", *_runner_table(title, sizes, figures["summary"])]
    return lines


def render(paths: list[Path], link_dir: str = "docs/bench/") -> str:
    """Every target and runner of each run (docs/benchmarks.md links from docs/: link_dir "bench/")."""
    blocks = [render_record(path, json.loads(path.read_text()), link_dir) for path in paths]
    return "\n\n".join("\n".join(block) for block in blocks) + "\n"


def render_headlines(paths: list[Path]) -> str:
    """The README's headline: the bench run's (a scale run has no burst to head with)."""
    blocks = [
        render_headline(path, results)
        for path in paths
        if (results := json.loads(path.read_text())).get("throughput") is not None
    ]
    return "\n\n".join("\n".join(block) for block in blocks) + "\n"


def replace_section(text: str, section: str) -> str:
    """text with what stands between START and END, each alone on its line, replaced by
    section. Markers quoted in prose (`<!-- bench:start -->` in a sentence) are not markers."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"expected one {START} line and one {END} line after it around the benchmark table")
    return "".join(lines[: starts[0] + 1]) + section + "".join(lines[ends[0] :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.readme", description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", type=Path, help="runs of record (default: the newest of each kind)")
    parser.add_argument(
        "--write", type=Path, help=f"write the headline between the markers of this file (e.g. {REPO / 'README.md'})"
    )
    parser.add_argument(
        "--full",
        type=Path,
        help=f"write every target and runner between the markers of this file (e.g. {REPO / 'docs/benchmarks.md'})",
    )
    args = parser.parse_args(argv)
    paths = args.records or latest_records()
    if not paths:
        parser.error(f"no run of record in {RECORD_DIR}: run `make bench BENCH_RECORD=1` first")
    headline = render_headlines(paths)
    # docs/benchmarks.md sits in docs/, beside the kept runs' folder
    for target, section in ((args.write, headline), (args.full, render(paths, link_dir="bench/"))):
        if target is None:
            continue
        try:
            target.write_text(replace_section(target.read_text(), section))
        except ValueError as err:
            parser.error(f"{target}: {err}")
        print(f"{target}: benchmark tables from {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if not (args.write or args.full):
        print(headline, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

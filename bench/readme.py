"""The README's benchmark table, made from kept runs of record (docs/bench/*.json), never typed.

    .venv/bin/python -m bench.readme [RECORD.json ...] [--write README.md]   # `make bench-readme`

Without files, the newest bench run and the newest scale run of docs/bench/
are taken. The table is printed; with --write it replaces what stands
between the markers `<!-- bench:start -->` and `<!-- bench:end -->` in that
file, and nothing else. Every figure is what the run itself recorded: its
targets as it evaluated them, its medians.
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
    return [
        [s["label"], num(s["pods_per_second"]), ms(s["latency_p99_s"]), cpu_cell(s)]
        for key in LABELS
        if (s := summary.get(key))
    ]


def render_record(path: Path, results: dict) -> list[str]:
    """One run of record: where it is, what it was, its targets, and its runners' figures."""
    commit = (results.get("machine") or {}).get("commit", "unknown")
    lines = [
        f"From [{path.name}](docs/bench/{path.name}): {run_name(results)}, commit {commit}, "
        f"{num(results.get('duration_s'), 0)} s in all.",
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
            lines += [
                "",
                *table(
                    [
                        f"{sizes['pods']:,} pods / {sizes['nodes']:,} nodes, {title}, median",
                        "pods/s",
                        "p99",
                        CPU_HEADER,
                    ],
                    _runner_rows(figures["summary"]),
                ),
            ]
    return lines


def render(paths: list[Path]) -> str:
    blocks = [render_record(path, json.loads(path.read_text())) for path in paths]
    return "\n\n".join("\n".join(block) for block in blocks) + "\n"


def replace_section(text: str, section: str) -> str:
    """text with what stands between START and END replaced by section."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {START} ... {END} markers around the benchmark table")
    return text[: start + len(START)] + "\n" + section + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.readme", description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", type=Path, help="runs of record (default: the newest of each kind)")
    parser.add_argument(
        "--write", type=Path, help=f"replace the table between the markers in this file (e.g. {REPO / 'README.md'})"
    )
    args = parser.parse_args(argv)
    paths = args.records or latest_records()
    if not paths:
        parser.error(f"no run of record in {RECORD_DIR}: run `make bench BENCH_RECORD=1` first")
    section = render(paths)
    if args.write:
        try:
            args.write.write_text(replace_section(args.write.read_text(), section))
        except ValueError as err:
            parser.error(f"{args.write}: {err}")
        print(f"{args.write}: benchmark table from {', '.join(str(p) for p in paths)}", file=sys.stderr)
    else:
        print(section, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

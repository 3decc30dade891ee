"""The stage table of `make test`: each stage's seconds and the tests it passed.

scripts/stages.sh records one line per stage in DIR/stages.tsv (id, title,
start and end in seconds since the run began, exit status), and every pytest
run of a stage writes its JUnit report under DIR/junit/<id>/ (the root
conftest.py's JUNIT_DIR). This prints the table and writes it as JSON, with
the run's wall time (stages of two lanes overlap, so it is not their sum):

    python3 scripts/test-times.py DIR OUT.json WALL_SECONDS

Standard library only: it runs with the machine's python3, also when .venv
could not be made.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def junit_counts(directory: Path) -> dict[str, int]:
    """Tests passed, failed (failures and errors) and skipped in every JUnit report under `directory`."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for path in sorted(directory.rglob("*.xml")) if directory.is_dir() else []:
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError:
            continue  # a pytest killed mid-write: its report says nothing
        suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
        for suite in suites:
            tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
            failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            counts["passed"] += tests - skipped - failed
            counts["failed"] += failed
            counts["skipped"] += skipped
    return counts


def read_stages(directory: Path) -> list[dict]:
    stages = []
    lines = (directory / "stages.tsv").read_text().splitlines() if (directory / "stages.tsv").exists() else []
    for line in lines:
        ident, title, start, end, status = line.split("\t")
        stage = {"stage": ident, "title": title, "start": int(start), "seconds": int(end) - int(start)}
        stage["status"] = int(status)
        stage.update(junit_counts(directory / "junit" / ident))
        stages.append(stage)
    return stages


def table(stages: list[dict], wall: int) -> str:
    width = max([len("the whole run")] + [len(stage["stage"]) for stage in stages])
    rows = [f"{'stage':<{width}}  {'start':>5}  {'seconds':>7}  {'passed':>6}  {'failed':>6}  {'skipped':>7}  result"]
    for stage in stages:
        result = "ok" if stage["status"] == 0 else f"FAILED (exit {stage['status']})"
        rows.append(
            f"{stage['stage']:<{width}}  {stage['start']:>5}  {stage['seconds']:>7}  {stage['passed']:>6}  "
            f"{stage['failed']:>6}  {stage['skipped']:>7}  {result}"
        )
    passed = sum(stage["passed"] for stage in stages)
    rows.append(f"{'the whole run':<{width}}  {0:>5}  {wall:>7}  {passed:>6}")
    return "\n".join(rows)


def main(directory: str, out: str, wall: str) -> int:
    stages = read_stages(Path(directory))
    print(table(stages, int(wall)))
    Path(out).write_text(json.dumps({"seconds": int(wall), "stages": stages}, indent=2) + "\n")
    print(f"(also in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

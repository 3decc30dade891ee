"""scripts/test-times.py: make test's stage table, from the stages' records and their JUnit reports."""

from __future__ import annotations

import json

import pytest
from commands import run

from .conftest import REPO

pytestmark = pytest.mark.delivery

SCRIPT = REPO / "scripts" / "test-times.py"


def junit(cases: list[str]) -> str:
    """A JUnit report as pytest writes it, one <testcase> per outcome in `cases`."""
    body = {
        "passed": "<testcase classname='t' name='{0}'/>",
        "failed": "<testcase classname='t' name='{0}'><failure message='x'/></testcase>",
        "error": "<testcase classname='t' name='{0}'><error message='x'/></testcase>",
        "skipped": "<testcase classname='t' name='{0}'><skipped message='x'/></testcase>",
    }
    counts = {kind: cases.count(kind) for kind in ("failed", "error", "skipped")}
    suite = (
        f"<testsuite name='pytest' tests='{len(cases)}' failures='{counts['failed']}' "
        f"errors='{counts['error']}' skipped='{counts['skipped']}'>"
    )
    return f"<testsuites>{suite}{''.join(body[c].format(i) for i, c in enumerate(cases))}</testsuite></testsuites>"


def test_each_stage_gets_its_seconds_and_the_outcomes_of_its_own_reports(tmp_path):
    (tmp_path / "stages.tsv").write_text("unit\tunit tests\t20\t120\t0\nkind\tKinD tests\t30\t95\t1\n")
    (tmp_path / "junit" / "unit").mkdir(parents=True)
    (tmp_path / "junit" / "kind").mkdir(parents=True)
    (tmp_path / "junit" / "unit" / "a.xml").write_text(junit(["passed"] * 3 + ["skipped"]))
    (tmp_path / "junit" / "unit" / "b.xml").write_text(junit(["passed"]))
    (tmp_path / "junit" / "kind" / "c.xml").write_text(junit(["passed", "failed", "error"]))
    # A pytest killed while writing leaves a report that does not parse: it counts nothing.
    (tmp_path / "junit" / "kind" / "d.xml").write_text("<testsuites><testsuite")
    out = tmp_path / "times.json"

    result = run(["python3", SCRIPT, tmp_path, out, 150])

    assert result.returncode == 0, result.stderr
    table = json.loads(out.read_text())
    assert table["seconds"] == 150
    assert [(s["stage"], s["start"], s["seconds"], s["status"]) for s in table["stages"]] == [
        ("unit", 20, 100, 0),
        ("kind", 30, 65, 1),
    ]
    assert [(s["passed"], s["failed"], s["skipped"]) for s in table["stages"]] == [(4, 0, 1), (1, 2, 0)]
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["stage", "start", "seconds", "passed", "failed", "skipped", "result"]
    assert lines[1].split() == ["unit", "20", "100", "4", "0", "1", "ok"]
    assert lines[2].split() == ["kind", "30", "65", "1", "2", "0", "FAILED", "(exit", "1)"]
    assert lines[3].split() == ["the", "whole", "run", "0", "150", "5"]


def test_a_run_that_recorded_no_stage_still_prints_its_table(tmp_path):
    result = run(["python3", SCRIPT, tmp_path, tmp_path / "times.json", 3])

    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "times.json").read_text()) == {"seconds": 3, "stages": []}

"""Golden AdmissionReviews: testdata/admission/<case>.input.json -> <case>.output.json.

Case names start with the operation (mutate-..., validate-...). In the output
files the response's base64 `patch` is stored decoded, as the JSON Patch it
carries, so a reviewer can read it. Regenerate after an intended change with
UPDATE_GOLDEN=1 and review the diff.
"""

import json
import os
from pathlib import Path

import jsonpatch
import pytest
from documents import readable
from gpu_scheduler.webhook import admission

SCHEDULER = "gpu-scheduler"
TESTDATA = Path(__file__).parent / "testdata" / "admission"
CASES = sorted(TESTDATA.glob("*.input.json"))


def decide(case: Path, review: dict) -> admission.Answer:
    operation = case.name.split("-", 1)[0]
    if operation == "mutate":
        return admission.mutate(review, SCHEDULER)
    return admission.validate(review, SCHEDULER)


def test_there_are_golden_cases_for_both_operations():
    names = [case.name for case in CASES]
    assert sum(name.startswith("mutate-") for name in names) >= 5
    assert sum(name.startswith("validate-") for name in names) >= 5


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name.removesuffix(".input.json"))
def test_response_matches_golden_output(case):
    review = json.loads(case.read_text())
    actual = readable(decide(case, review).review)
    expected_file = case.with_name(case.name.replace(".input.json", ".output.json"))
    if os.environ.get("UPDATE_GOLDEN"):
        expected_file.write_text(json.dumps(actual, indent=2) + "\n")
    assert actual == json.loads(expected_file.read_text())


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.name.startswith("mutate-")],
    ids=lambda case: case.name.removesuffix(".input.json"),
)
def test_mutated_pod_needs_no_second_patch_and_the_patch_is_idempotent(case):
    review = json.loads(case.read_text())
    decision = decide(case, review)
    if decision.result != admission.PATCHED:
        assert "patch" not in decision.review["response"]
        return
    patch = jsonpatch.JsonPatch(readable(decision.review)["response"]["patch"])
    once = patch.apply(review["request"]["object"])
    assert patch.apply(once) == once
    review["request"]["object"] = once
    again = decide(case, review)
    assert again.result == admission.ALLOWED
    assert "patch" not in again.review["response"]

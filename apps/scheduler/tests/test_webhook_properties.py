"""Whatever JSON arrives, the decision functions answer with a well-formed
AdmissionReview or raise BadRequest; nothing else escapes them."""

import base64
import json
from pathlib import Path

import jsonpatch
import pytest
from documents import at, locations, replaced
from gpu_scheduler.webhook.admission import (
    DENIED,
    Answer,
    BadRequest,
    mutate,
    validate,
)
from hypothesis import given, settings
from hypothesis import strategies as st

SCHEDULER = "gpu-scheduler"
GOLDEN = sorted((Path(__file__).parent / "testdata" / "admission").glob("*.input.json"))

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@st.composite
def mangled_reviews(draw):
    """A real AdmissionReview from the golden files with a few locations replaced
    by random JSON: deep enough to reach the pod's fields, unlike random JSON alone."""
    document = json.loads(draw(st.sampled_from(GOLDEN)).read_text())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(locations(document))))
        # Scalars half the time: a number where an object belongs is the
        # likeliest way to crash code that expects a mapping.
        document = replaced(document, path, draw(SCALARS | JSON))
    return document


def assert_well_formed(review, decision):
    assert isinstance(decision, Answer)
    out = decision.review
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    response = out["response"]
    assert response["uid"] == review["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    json.dumps(out)  # serializable as it is sent
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        operations = json.loads(base64.b64decode(response["patch"]))
        patched = jsonpatch.JsonPatch(operations).apply(review["request"]["object"])
        assert jsonpatch.JsonPatch(operations).apply(patched) == patched
    if decision.result == DENIED:
        assert response["allowed"] is False
        assert response["status"]["code"] == 422
        assert response["status"]["message"]


def decide_all(review):
    for decide in (mutate, validate):
        try:
            decision = decide(review, SCHEDULER)
        except BadRequest as err:
            assert str(err)
        else:
            assert_well_formed(review, decision)


@settings(max_examples=300)
@given(JSON)
def test_random_json_is_answered_or_a_bad_request(value):
    decide_all(value)


@settings(max_examples=500)
@given(mangled_reviews())
def test_reviews_with_a_random_part_are_answered_or_a_bad_request(review):
    decide_all(review)


# Each JSON type, falsy and truthy: `value or {}` and `isinstance` slips differ.
WRONG_VALUES = [None, 0, 7, True, "", "x", [], [1], {}, {"a": 1}]


@pytest.mark.parametrize("case", GOLDEN, ids=lambda case: case.name.removesuffix(".input.json"))
def test_every_location_of_a_real_review_with_every_kind_of_wrong_value(case):
    """Exhaustive where the random test samples: each single replacement."""
    document = json.loads(case.read_text())
    for path in list(locations(document))[1:]:
        parent = at(document, path[:-1])
        original = parent[path[-1]]
        for value in WRONG_VALUES:
            parent[path[-1]] = value  # in place and restored: copying is the slow part
            decide_all(document)
        parent[path[-1]] = original

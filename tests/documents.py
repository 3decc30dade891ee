"""Locations in a JSON document, and copies of it with one location changed: what the property
and fuzz tests mangle AdmissionReviews with; an answered review as the golden files hold it."""

from __future__ import annotations

import base64
import copy
import json


def locations(value, prefix=()):
    """Every location in a JSON document, as a tuple of keys and indexes; () is the whole."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from locations(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from locations(child, (*prefix, index))


def at(document, path):
    """The value at location `path`."""
    for step in path:
        document = document[step]
    return document


def replaced(document, path, value):
    """A copy of `document` with `value` at `path` (`value` itself for the empty path)."""
    if not path:
        return value
    result = copy.deepcopy(document)
    at(result, path[:-1])[path[-1]] = value
    return result


def removed(document, path):
    """A copy of `document` without location `path`."""
    result = copy.deepcopy(document)
    del at(result, path[:-1])[path[-1]]
    return result


def readable(review: dict) -> dict:
    """A copy of an answered AdmissionReview with its JSONPatch decoded from base64, as the
    golden files (apps/scheduler/tests/testdata/admission) hold it."""
    review = copy.deepcopy(review)
    response = review["response"]
    if "patch" in response:
        response["patch"] = json.loads(base64.b64decode(response["patch"]))
    return review

"""Hypothesis strategies for hostile AdmissionReview bodies, and what a correct answer to one is.

Every hostile body must be refused: answered 4xx with a message, or denied
with a message. The one well-formed review they start from is a pod of our
scheduler, created on a node (spec.nodeName: the only pod whose map the webhook
reads, since no Binding will come), whose map has a broken line, so whatever a
mutation leaves intact, the honest answer is still a denial. (with_valid_map is the exception: big
but valid, to be allowed, for the memory check.)
"""

from __future__ import annotations

import json

from documents import at, locations, removed, replaced
from hypothesis import strategies as st

SCHEDULER_NAME = "gpu-scheduler"
MAX_BODY = 3 * 1024 * 1024  # what the webhook (and the API server) accept
BROKEN_MAP = "0=node1:0\nthis line is broken\n"


def base_review(uid: str = "fuzz-uid") -> dict:
    """A real-shaped review of a pod of our scheduler created on node1; its map's line 2 is broken."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "fuzz",
            "name": "fuzz-0",
            "userInfo": {"username": "fuzzer", "groups": ["system:authenticated"]},
            "dryRun": False,
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "fuzz-0",
                    "namespace": "fuzz",
                    "labels": {"app": "fuzz"},
                    "annotations": {"gpu-scheduling-map": BROKEN_MAP},
                },
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "nodeName": "node1",
                    "containers": [{"name": "main", "image": "x", "env": [{"name": "A", "value": "1"}]}],
                },
            },
        },
    }


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


# Lone surrogates and control characters: valid in JSON text (as \u escapes), poison elsewhere.
NASTY_TEXT = st.text(
    st.characters(codec=None) | st.sampled_from(["\ud800", "\udfff", "\x00", "\u2028", "\r", "\ufeff"]),
    max_size=40,
)
SCALARS = st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | NASTY_TEXT
JSON = st.recursive(
    st.none() | SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(NASTY_TEXT, children, max_size=4),
    max_leaves=25,
)
NON_NULL_JSON = JSON.filter(lambda v: v is not None)

# Keys without which no answer is possible: dropping one must be a 400.
REQUIRED = [("apiVersion",), ("kind",), ("request",), ("request", "uid"), ("request", "kind"), ("request", "object")]


@st.composite
def wrong_types(draw):
    """The base review with one location holding a value of another JSON type (never null:
    a null schedulerName, say, honestly means "not ours")."""
    document = base_review()
    path = draw(st.sampled_from([p for p in locations(document) if p]))
    original = at(document, path)
    value = draw(NON_NULL_JSON.filter(lambda v: json_type(v) != json_type(original)))
    return replaced(document, path, value)


@st.composite
def missing_parts(draw):
    document = base_review()
    return removed(document, draw(st.sampled_from(REQUIRED)))


@st.composite
def hostile_maps(draw):
    """Our pod with a hostile map: random text, then one line that can never parse."""
    garbage = draw(NASTY_TEXT | st.text(st.sampled_from("0123456789=:,#-\r\n \tabcGPU"), max_size=200))
    where = draw(st.sampled_from(["before", "after"]))
    text = f"{garbage}\n=:\n" if where == "before" else f"=:\n{garbage}"
    document = base_review()
    document["request"]["object"]["metadata"]["annotations"]["gpu-scheduling-map"] = text
    return document


def invalid_utf8() -> st.SearchStrategy[bytes]:
    """Bytes that are not UTF-8: random ones, and a review with a bad byte inside a string."""
    prefix, suffix = json.dumps(base_review()).encode().split(b"this line is broken")
    bad = st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"])
    random_bytes = st.binary(min_size=1, max_size=300).filter(_not_utf8)
    return random_bytes | st.builds(lambda b: prefix + b + suffix, bad)


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def nested(depth: int, kind: str, in_review: bool) -> bytes:
    """[[[...]]] or {"a":{"a":...}} `depth` deep: the whole body, or a field the webhook never
    reads (request.userInfo) of the base review."""
    if kind == "array":
        inner = b"[" * depth + b"]" * depth
    else:
        inner = b'{"a":' * depth + b"1" + b"}" * depth
    if not in_review:
        return inner
    document = base_review()
    document["request"]["userInfo"] = "NESTED"
    return json.dumps(document).encode().replace(b'"NESTED"', inner)


# Up to far past any JSON parser's recursion limit (Python's is about 1,000).
NESTINGS = st.tuples(st.integers(500, 200_000), st.sampled_from(["array", "object"]), st.booleans())


def with_huge_map(size: int, filler: str) -> bytes:
    """The base review whose map is a broken first line and then `filler` repeated, the
    whole body `size` bytes (give or take a line)."""
    document = base_review()
    document["request"]["object"]["metadata"]["annotations"]["gpu-scheduling-map"] = ""
    overhead = len(json.dumps(document).encode())
    escaped = len(json.dumps(filler)) - 2  # "\n" takes two bytes in the body
    text = "=:\n" + filler * max(0, (size - overhead) // escaped)
    document["request"]["object"]["metadata"]["annotations"]["gpu-scheduling-map"] = text
    return json.dumps(document).encode()


# Megabytes of map: one long line, comments, duplicate indexes, bad devices. Up to just
# past the 3 MiB body limit.
HUGE_MAPS = st.tuples(
    st.integers(100_000, MAX_BODY) | st.integers(MAX_BODY + 1, MAX_BODY + 500_000),
    st.sampled_from(["x", "#" * 100 + "\n", "0=node1:0\n", "9=no:de:x\n"]),
)


def with_valid_map(lines: int, variant: int) -> bytes:
    """Our pod with a valid map of `lines` lines, distinct per `variant`: allowed (patched)."""
    text = "".join(f"{i}=node{i % 4 + 1}:{i % 4}\n" for i in range(lines)) + f"# variant {variant}\n"
    document = base_review(f"valid-{variant}")
    document["request"]["object"]["metadata"]["annotations"]["gpu-scheduling-map"] = text
    return json.dumps(document).encode()


def check_refused(status: int, body: bytes, sent_uid: str | None) -> str:
    """'' when the answer is a refusal with a message, else what is wrong with it."""
    if status >= 500:
        return f"HTTP {status} (a server error): {body[:300]!r}"
    try:
        answer = json.loads(body)
    except ValueError:
        return f"HTTP {status} with a body that is not JSON: {body[:300]!r}"
    if 400 <= status < 500:
        if not isinstance(answer, dict) or not answer.get("message"):
            return f"HTTP {status} without a message: {body[:300]!r}"
        return ""
    if status != 200:
        return f"HTTP {status}: {body[:300]!r}"
    response = answer.get("response") if isinstance(answer, dict) else None
    if not isinstance(response, dict):
        return f"HTTP 200 that is not an AdmissionReview answer: {body[:300]!r}"
    if sent_uid is not None and response.get("uid") != sent_uid:
        return f"answer uid {response.get('uid')!r}, request uid {sent_uid!r}"
    if response.get("allowed") is not False:
        return f"ALLOWED a hostile request: {body[:300]!r}"
    if not (response.get("status") or {}).get("message"):
        return f"a denial without a message: {body[:300]!r}"
    return ""


def uid_of(document) -> str | None:
    request = document.get("request") if isinstance(document, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and uid else None

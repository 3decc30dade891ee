"""Over a thousand hostile AdmissionReview bodies sent over real TLS to `gpu-scheduler webhook`
under gunicorn: each is refused with a message, the server stays up, keeps its workers, and its
memory stays bounded.

The webhook engineer's property tests (apps/scheduler/tests/test_webhook_properties.py) feed
the pure decision functions; this drives the running server: TLS, gunicorn's HTTP parsing,
Flask's body limit and the JSON decoder included.

TLS versions and certificate rotation over the wire are proven by the webhook
engineer's apps/scheduler/tests/test_webhook_server.py (the real CLI process):
test_tls_1_1_is_refused_by_the_server, test_tls_1_2_and_1_3_are_accepted,
test_certificate_rewritten_in_place_is_served_without_a_failed_handshake and
test_secret_volume_symlink_swap_is_followed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e2e.components import WebhookProcess

from . import hostile_reviews as hostile
from .conftest import track, untrack

pytestmark = pytest.mark.faults

PATHS = st.sampled_from(["/mutate", "/validate"])
REQUEST_TIMEOUT = 20.0
# The chart's webhook.timeoutSeconds: the API server gives up on the webhook after it.
WEBHOOK_TIMEOUT = 5.0
RSS_GROWTH_LIMIT = 50 * 1024 * 1024
MIN_REQUESTS = 1000
FUZZ = settings(
    deadline=None,
    database=None,  # every run explores afresh; nothing is written to the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return sorted(found)


class Target:
    """The running webhook: posts bodies over TLS and counts what was sent."""

    def __init__(self, process: WebhookProcess) -> None:
        self.process = process
        self.session = requests.Session()
        # Per request, not on the session: requests lets REQUESTS_CA_BUNDLE
        # from the environment override a session's verify.
        self.verify = str(process.certs.ca_file)
        self.sent = 0
        self.slowest = 0.0
        self.workers: list[int] = []  # PIDs of gunicorn's workers after the warm-up
        self.baseline: dict[int, int] = {}  # RSS after the warm-up

    def post(self, path: str, body: bytes, timeout: float = REQUEST_TIMEOUT) -> requests.Response:
        self.sent += 1
        started = time.monotonic()
        try:
            return self.session.post(
                self.process.base_url + path,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=timeout,
                verify=self.verify,
            )
        finally:
            self.slowest = max(self.slowest, time.monotonic() - started)

    def rss(self) -> dict[int, int]:
        """pid -> resident bytes, for the gunicorn master and each worker."""
        pids = [self.process.pid, *children(self.process.pid)]
        return {pid: rss_bytes(pid) for pid in pids}

    def assert_refused(self, path: str, body: bytes, sent_uid: str | None) -> None:
        response = self.post(path, body)
        problem = hostile.check_refused(response.status_code, response.content, sent_uid)
        assert not problem, f"POST {path} with {body[:200]!r}... ({len(body)} bytes): {problem}"


@pytest.fixture(scope="module")
def target(certs, tmp_path_factory):
    process = track(WebhookProcess(certs, tmp_path_factory.mktemp("fuzz") / "webhook.log"))
    process.start_and_wait()
    fuzzed = Target(process)
    # Warm up every worker (imports, first decisions) before the memory baseline.
    for _ in range(40):
        fuzzed.assert_refused("/mutate", json.dumps(hostile.base_review()).encode(), "fuzz-uid")
    fuzzed.workers = children(process.pid)
    fuzzed.baseline = fuzzed.rss()
    fuzzed.sent = 0
    yield fuzzed
    process.stop()
    untrack(process)


@settings(FUZZ, max_examples=300)
@given(path=PATHS, value=hostile.JSON)
def test_random_json_is_refused_with_a_message(target, path, value):
    target.assert_refused(path, json.dumps(value).encode(), sent_uid=None)


@settings(FUZZ, max_examples=250)
@given(path=PATHS, review=hostile.wrong_types())
def test_a_value_of_the_wrong_type_anywhere_in_a_review_is_refused(target, path, review):
    target.assert_refused(path, json.dumps(review).encode(), hostile.uid_of(review))


@settings(FUZZ, max_examples=60)
@given(path=PATHS, review=hostile.missing_parts())
def test_a_review_missing_its_uid_kind_request_or_object_is_a_bad_request(target, path, review):
    response = target.post(path, json.dumps(review).encode())
    assert response.status_code == 400, response.text
    assert response.json()["message"]


@settings(FUZZ, max_examples=200)
@given(path=PATHS, review=hostile.hostile_maps())
def test_a_hostile_map_is_denied_naming_a_line(target, path, review):
    response = target.post(path, json.dumps(review).encode())
    assert not hostile.check_refused(response.status_code, response.content, "fuzz-uid")
    if response.status_code == 200:
        assert "line " in response.json()["response"]["status"]["message"]


@settings(FUZZ, max_examples=150)
@given(path=PATHS, body=hostile.invalid_utf8())
def test_bytes_that_are_not_utf8_are_a_bad_request(target, path, body):
    response = target.post(path, body)
    assert response.status_code == 400, response.text
    assert response.json()["message"]


@settings(FUZZ, max_examples=60)
@given(path=PATHS, body=hostile.deep_nesting())
def test_deeply_nested_json_is_refused(target, path, body):
    response = target.post(path, body)
    assert not hostile.check_refused(response.status_code, response.content, None), response.text


@settings(FUZZ, max_examples=40)
@given(path=PATHS, body=hostile.huge_bodies())
def test_megabyte_maps_are_denied_within_the_api_servers_webhook_timeout(target, path, body):
    """The mutating webhook sees a pod before the API server checks the 256 KiB annotation
    limit, so a map of up to 3 MiB reaches it; an answer after the configuration's
    timeoutSeconds is no answer (the API server refuses the pod for the timeout instead)."""
    if len(body) > hostile.MAX_BODY:
        try:
            response = target.post(path, body)
        except requests.ConnectionError:
            # Answered 413 from Content-Length alone and closed the connection
            # while the client was still sending: refused before being read.
            target.session.close()
            return
        assert response.status_code == 413, response.text
        return
    started = time.monotonic()
    try:
        response = target.post(path, body, timeout=WEBHOOK_TIMEOUT)
    except requests.Timeout:
        pytest.fail(f"no answer within {WEBHOOK_TIMEOUT}s to a {len(body) / 2**20:.2f} MiB map ({body[-60:]!r})")
    assert not hostile.check_refused(response.status_code, response.content, "fuzz-uid")
    # The denial names the broken line and stays short enough for kubectl and Events.
    message = response.json()["response"]["status"]["message"]
    assert "line 1" in message and len(message) <= 4000
    print(f"{len(body) / 2**20:.2f} MiB denied in {time.monotonic() - started:.2f}s")


def test_after_every_hostile_body_the_server_is_up_with_the_same_workers_and_bounded_memory(target):
    assert target.sent >= MIN_REQUESTS, f"only {target.sent} hostile bodies were sent"
    assert target.process.alive(), target.process.log_tail()
    health = target.session.get(target.process.base_url + "/healthz", timeout=5, verify=target.verify)
    assert health.status_code == 200
    # A worker that crashed or timed out would have been replaced by a new PID.
    assert children(target.process.pid) == target.workers, target.process.log_tail()
    after = target.rss()
    growth = sum(after.values()) - sum(target.baseline.values())
    print(
        f"\n{target.sent} hostile bodies; slowest answer {target.slowest:.2f}s; RSS (MiB) before "
        f"{ {pid: round(b / 2**20, 1) for pid, b in target.baseline.items()} } after "
        f"{ {pid: round(b / 2**20, 1) for pid, b in after.items()} }, growth {growth / 2**20:.1f} MiB"
    )
    assert growth < RSS_GROWTH_LIMIT
    log = target.process.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "unexpected error" not in log
    assert "PRIVATE KEY" not in log


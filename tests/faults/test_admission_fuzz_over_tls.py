"""Over a thousand hostile AdmissionReview bodies sent over real TLS to `gpu-scheduler webhook`
under granian: each is refused with a message within the API server's webhook timeout, the
server stays up with the same worker processes, and its memory stays bounded.

The webhook engineer's property tests (apps/scheduler/tests/test_webhook_properties.py) feed
the pure decision functions; this drives the running server: TLS, granian's HTTP parsing,
Flask's body limit and the JSON decoder included. TLS versions and certificate rotation over
the wire are proven in apps/scheduler/tests/test_webhook_server.py (the real CLI process):
test_tls_1_1_is_refused_by_the_server, test_tls_1_2_and_1_3_are_accepted,
test_certificate_rewritten_in_place_is_served_once_whole and
test_secret_volume_symlink_swap_is_followed.

The tests of this module share one webhook and run in order: the categories, then the
checks on what they left behind (answer times, workers, memory).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests
import yaml
from e2e.components import WebhookProcess
from gpu_scheduler.logs import BATCH_SECONDS
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from . import hostile_reviews as hostile
from .conftest import track, untrack

pytestmark = pytest.mark.faults

PATHS = st.sampled_from(["/mutate", "/validate"])
# The chart's webhook.timeoutSeconds: after it the API server gives up on the webhook
# (and, with failurePolicy Fail, refuses the pod with a timeout instead of our message).
WEBHOOK_TIMEOUT = 5.0
RSS_GROWTH_LIMIT = 50 * 2**20
MIN_REQUESTS = 1000
# The chart's webhook.resources.limits.memory.
# The webhook container's memory limit, as the chart sets it.
CONTAINER_LIMIT = int(
    parse_quantity(
        yaml.safe_load((Path(__file__).parents[2] / "charts/gpu-scheduler/values.yaml").read_text())["webhook"][
            "resources"
        ]["limits"]["memory"]
    )
)
FUZZ = settings(
    deadline=None,
    database=None,  # every run explores afresh; nothing is written to the work tree
    # A slow answer is recorded, not raised (see Target.post), so there is nothing to shrink
    # by time; shrinking a body that failed on content stays on.
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
    """The running webhook: posts bodies over TLS, counts them, notes the slow answers."""

    def __init__(self, process: WebhookProcess) -> None:
        self.process = process
        self.session = requests.Session()
        # Per request, not on the session: requests lets REQUESTS_CA_BUNDLE
        # from the environment override a session's verify.
        self.verify = str(process.certs.ca_file)
        self.sent = 0
        self.slow: list[str] = []  # answers later than WEBHOOK_TIMEOUT, or none at all
        self.workers: list[int] = []  # the worker PIDs after the warm-up
        self.baseline: dict[int, int] = {}  # RSS after the warm-up
        self.peak: dict[int, int] = {}
        self.peak_total = 0  # the most master and workers held together (one container)

    def post(self, path: str, body: bytes, what: str) -> requests.Response | None:
        """The answer, or None when it took longer than WEBHOOK_TIMEOUT (noted in self.slow)."""
        self.sent += 1
        started = time.monotonic()
        try:
            response = self.session.post(
                self.process.base_url + path,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=WEBHOOK_TIMEOUT,
                verify=self.verify,
            )
        except requests.Timeout:
            self.slow.append(f"{path} {what} ({len(body)} bytes): no answer within {WEBHOOK_TIMEOUT:g}s")
            self.session.close()
            return None
        finally:
            self._note_memory()
        seconds = time.monotonic() - started
        if seconds > WEBHOOK_TIMEOUT:
            self.slow.append(f"{path} {what} ({len(body)} bytes): answered after {seconds:.1f}s")
        return response

    def _note_memory(self) -> None:
        sizes = self.rss()
        for pid, size in sizes.items():
            self.peak[pid] = max(self.peak.get(pid, 0), size)
        self.peak_total = max(self.peak_total, sum(sizes.values()))

    def rss(self) -> dict[int, int]:
        """pid -> resident bytes, for the master and each worker."""
        pids = [self.process.pid, *children(self.process.pid)]
        return {pid: rss_bytes(pid) for pid in pids}

    def assert_refused(self, path: str, body: bytes, sent_uid: str | None, what: str) -> requests.Response | None:
        response = self.post(path, body, what)
        if response is not None:
            problem = hostile.check_refused(response.status_code, response.content, sent_uid)
            assert not problem, f"POST {path} {what} ({len(body)} bytes): {problem}"
        return response


def mib(sizes: dict[int, int]) -> str:
    return ", ".join(f"{pid}: {size / 2**20:.0f}" for pid, size in sizes.items())


@pytest.fixture(scope="module")
def target(certs, tmp_path_factory):
    process = track(WebhookProcess(certs, tmp_path_factory.mktemp("fuzz") / "webhook.log"))
    try:
        process.start_and_wait()
        fuzzed = Target(process)
        # Warm up both workers (imports, first decisions) before the memory baseline:
        # a new connection per request spreads them over the workers.
        for _ in range(20):
            fuzzed.session.close()
            fuzzed.assert_refused("/mutate", json.dumps(hostile.base_review()).encode(), "fuzz-uid", "warm-up")
        fuzzed.workers = children(process.pid)
        fuzzed.baseline = fuzzed.rss()
        fuzzed.peak = dict(fuzzed.baseline)
        fuzzed.sent = 0
        yield fuzzed
    finally:
        process.stop()
        untrack(process)


@settings(FUZZ, max_examples=300)
@given(path=PATHS, value=hostile.JSON)
def test_random_json_is_refused_with_a_message(target, path, value):
    target.assert_refused(path, json.dumps(value).encode(), None, "random JSON")


@settings(FUZZ, max_examples=250)
@given(path=PATHS, review=hostile.wrong_types())
def test_a_value_of_the_wrong_type_anywhere_in_a_review_is_refused(target, path, review):
    target.assert_refused(path, json.dumps(review).encode(), hostile.uid_of(review), "wrong type")


@settings(FUZZ, max_examples=60)
@given(path=PATHS, review=hostile.missing_parts())
def test_a_review_missing_its_uid_kind_request_or_object_is_a_bad_request(target, path, review):
    response = target.post(path, json.dumps(review).encode(), "missing part")
    assert response is not None and response.status_code == 400, response and response.text
    assert response.json()["message"]


@settings(FUZZ, max_examples=200)
@given(path=PATHS, review=hostile.hostile_maps())
def test_a_hostile_map_is_denied_naming_a_line(target, path, review):
    response = target.assert_refused(path, json.dumps(review).encode(), "fuzz-uid", "hostile map")
    if response is not None and response.status_code == 200:
        assert "line " in response.json()["response"]["status"]["message"]


@settings(FUZZ, max_examples=150)
@given(path=PATHS, body=hostile.invalid_utf8())
def test_bytes_that_are_not_utf8_are_a_bad_request(target, path, body):
    response = target.post(path, body, "not UTF-8")
    assert response is not None and response.status_code == 400, response and response.text
    assert response.json()["message"]


@settings(FUZZ, max_examples=60)
@given(path=PATHS, nesting=hostile.NESTINGS)
def test_deeply_nested_json_is_refused(target, path, nesting):
    depth, kind, in_review = nesting
    body = hostile.nested(depth, kind, in_review)
    target.assert_refused(path, body, "fuzz-uid" if in_review else None, f"{kind}s nested {depth} deep")


def test_distinct_valid_megabyte_maps_are_answered_without_memory_piling_up(target):
    """Well-formed maps larger than Kubernetes allows annotations to be are denied with
    a message that says so, and nothing is kept per distinct map."""
    target.session.close()  # one new connection: every map goes to the same worker
    before = target.rss()
    for variant in range(12):
        body = hostile.with_valid_map(60_000, variant)  # about 800 KiB of map
        response = target.post("/mutate", body, f"valid map {variant}")
        if response is not None:
            assert response.json()["response"]["allowed"] is False
            assert "Kubernetes allows 262144 bytes" in response.json()["response"]["status"]["message"]
    after = target.rss()
    growth = sum(after.values()) - sum(before.values())
    print(f"\nRSS (MiB) before {mib(before)}; after 12 distinct valid 800 KiB maps {mib(after)}")
    assert growth < RSS_GROWTH_LIMIT, f"{growth / 2**20:.0f} MiB more after 12 distinct valid maps"


@settings(FUZZ, max_examples=20, phases=[Phase.explicit, Phase.generate])
@given(path=PATHS, huge=hostile.HUGE_MAPS)
# Always: a map just under the body limit whose every line is wrong (the slowest kind to deny).
@example(path="/mutate", huge=(3_000_000, "9=no:de:x\n"))
def test_megabyte_maps_are_denied_naming_the_line_and_bodies_over_3_mib_refused(target, path, huge):
    """The mutating webhook sees a pod before the API server checks the 256 KiB annotation
    limit, so maps of up to 3 MiB reach it."""
    size, filler = huge
    body = hostile.with_huge_map(size, filler)
    what = f"map of {filler[:12]!r} x {size // len(filler)}"
    if len(body) > hostile.MAX_BODY:
        try:
            response = target.post(path, body, what)
        except requests.ConnectionError:
            # Answered 413 from Content-Length alone and closed the connection
            # while the client was still sending: refused before being read.
            target.session.close()
            return
        assert response is None or response.status_code == 413, response.text
        return
    response = target.assert_refused(path, body, "fuzz-uid", what)
    if response is not None:
        # The denial names the broken line and stays short enough for kubectl and Events.
        message = response.json()["response"]["status"]["message"]
        assert "line 1" in message and len(message) <= 4000


def test_every_hostile_body_was_answered_within_the_webhook_timeout(target):
    assert target.sent >= MIN_REQUESTS, f"only {target.sent} hostile bodies were sent"
    assert not target.slow, f"{len(target.slow)} slow answers:\n" + "\n".join(target.slow[:20])


def test_the_server_is_still_up_with_the_same_workers_and_bounded_memory(target):
    assert target.process.alive(), target.process.log_tail()
    health = target.session.get(target.process.base_url + "/healthz", timeout=5, verify=target.verify)
    assert health.status_code == 200
    # A worker that crashed, and that granian started again, has a new PID.
    assert children(target.process.pid) == target.workers, target.process.log_tail()
    after = target.rss()
    growth = sum(after.values()) - sum(target.baseline.values())
    print(
        f"\n{target.sent} hostile bodies; RSS (MiB) of master and workers: before {mib(target.baseline)}, "
        f"peak {mib(target.peak)} (together {target.peak_total / 2**20:.0f}), after {mib(after)}; "
        f"growth {growth / 2**20:.1f} MiB"
    )
    time.sleep(3 * BATCH_SECONDS)  # what the log writer still held reaches the file
    log = target.process.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "unexpected error" not in log
    assert "PRIVATE KEY" not in log
    assert growth < RSS_GROWTH_LIMIT
    assert target.peak_total < CONTAINER_LIMIT, (
        f"master and workers held {target.peak_total / 2**20:.0f} MiB together; the chart limits the "
        f"webhook container to {CONTAINER_LIMIT / 2**20:.0f} MiB"
    )

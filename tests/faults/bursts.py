"""Bursts of pods created while something breaks, and the checks that nothing was lost or misplaced.

The creator behaves like a controller: a create that fails because the API
server, etcd or the webhook is away is retried until it succeeds, and a 409
on a retry means the earlier attempt was stored after all (its answer was
lost). So every pod of a burst exists in the end; the faults under test are
the scheduler's and the webhook's, not the creator's.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from e2e.cluster import describe_pods, get_json, list_pods
from e2e.waiting import NotYet, WaitTimeout, wait_for
from e2e.workloads import bare_pod
from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

NODES = 4
CREATE_THREADS = 8
RETRY_PAUSE = 0.25
# Longer than any outage a test causes (a restart takes 5-20 s here).
CREATE_DEADLINE = 120.0


def burst_map(count: int) -> str:
    """The map of a burst: index i on node(i % 4 + 1), with a GPU of its own (burst_device), so
    that a scheduler under --gpu-sharing=deny can bind every pod of it at once. (A node
    advertises 4 GPUs, and ordinals are checked against that; UUIDs are not, as long as no
    inventory of the node's GPUs is known.) The GPUs the fault tests make pods compete for
    are contention.py's."""
    salt = uuid.uuid4().hex[:8]
    return "".join(f"{i}={expected_node(i)}:{burst_device(salt, i)}\n" for i in range(count))


def burst_device(salt: str, index: int) -> str:
    """GPU-<uuid>, one per pod of a burst, and unlike any other burst's (salt)."""
    return f"GPU-{salt}-0000-4000-8000-{index:012x}"


def map_line_devices(pod: dict) -> str:
    """What the pod's own line of its map gives CUDA_VISIBLE_DEVICES (the devices after the node)."""
    lines = dict(
        line.split("=", 1) for line in pod["metadata"]["annotations"]["gpu-scheduling-map"].splitlines() if line
    )
    return lines[str(index_of(pod["metadata"]["name"]))].split(":", 1)[1]


def expected_node(index: int) -> str:
    return f"node{index % NODES + 1}"


def pod_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


def index_of(pod_name: str) -> int:
    return int(pod_name.rsplit("-", 1)[1])


@dataclass
class BurstReport:
    """What the creator saw: pods stored, and the failed attempts it retried."""

    created: list[str] = field(default_factory=list)
    failed_attempts: int = 0
    errors: Counter = field(default_factory=Counter)  # "503 ServiceUnavailable" -> count
    unfinished: list[str] = field(default_factory=list)  # gave up at the deadline
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note_failure(self, what: str) -> None:
        with self.lock:
            self.failed_attempts += 1
            self.errors[what] += 1


def _describe(err: Exception) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    return err.__class__.__name__


def create_with_retries(
    core: client.CoreV1Api, namespace: str, pod: dict, report: BurstReport, deadline: float
) -> None:
    retried = False
    name = pod["metadata"]["name"]
    while True:
        try:
            core.create_namespaced_pod(namespace, pod, _request_timeout=15)
            break
        except ApiException as err:
            if err.status == 409 and retried:
                break  # an earlier attempt was stored; its answer was lost
            report.note_failure(_describe(err))
        except (HTTPError, OSError) as err:
            report.note_failure(_describe(err))
        if time.monotonic() > deadline:
            with report.lock:
                report.unfinished.append(name)
            return
        retried = True
        time.sleep(RETRY_PAUSE)
    with report.lock:
        report.created.append(name)


class Burst:
    """Creates pods on CREATE_THREADS threads in the background; wait() joins them."""

    def __init__(self, api_client, namespace: str, pods: Iterable[dict], threads: int = CREATE_THREADS) -> None:
        self.report = BurstReport()
        self._pods = list(pods)
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="burst")
        self._futures = []
        self.started = self.finished = 0.0

    def start(self) -> Burst:
        self.started = time.monotonic()
        deadline = self.started + CREATE_DEADLINE
        self._futures = [
            self._pool.submit(create_with_retries, self._core, self._namespace, pod, self.report, deadline)
            for pod in self._pods
        ]
        return self

    def done(self) -> bool:
        return all(f.done() for f in self._futures)

    def wait(self) -> BurstReport:
        for future in self._futures:
            future.result()
        self._pool.shutdown()
        self.finished = time.monotonic()
        return self.report


def burst_pods(prefix: str, count: int, scheduler_name: str, scheduling_map: str | None = None) -> list[dict]:
    scheduling_map = scheduling_map or burst_map(count)
    return [
        bare_pod(name, scheduling_map, scheduler_name=scheduler_name, labels={"burst": prefix})
        for name in pod_names(prefix, count)
    ]


def count_bound(api_client, namespace: str) -> int:
    return sum(1 for pod in list_pods(api_client, namespace) if pod["spec"].get("nodeName"))


def listed_pods(api_client, namespace: str) -> list[dict]:
    """The namespace's pods; NotYet while the API server does not answer (it may be restarting)."""
    try:
        return list_pods(api_client, namespace)
    except (ApiException, HTTPError, OSError, AssertionError) as err:
        raise NotYet(f"listing pods failed: {err.__class__.__name__}: {str(err)[:200]}") from None


def assert_healthy(scheduler) -> None:
    """Fails at once when the scheduler process has exited or its /healthz reports a dead part
    (a waiting test would otherwise only time out)."""
    if not scheduler.alive():
        raise AssertionError(f"{scheduler.name} exited with {scheduler.exit_code()}")
    try:
        with urllib.request.urlopen(f"{scheduler.base_url}/healthz", timeout=5):
            return
    except urllib.error.HTTPError as err:
        raise AssertionError(
            f"{scheduler.name} /healthz answered {err.code}: {err.read().decode(errors='replace').strip()}"
        ) from None


def wait_all_bound(api_client, namespace: str, count: int, timeout: float, scheduler=None) -> list[dict]:
    """Waits until `count` pods exist in `namespace` and every one has a node; with `scheduler`,
    fails as soon as that scheduler is no longer healthy."""

    def probe() -> list[dict]:
        if scheduler is not None:
            assert_healthy(scheduler)
        pods = listed_pods(api_client, namespace)
        unbound = [p for p in pods if not p["spec"].get("nodeName")]
        if len(pods) != count or unbound:
            raise NotYet(f"{len(pods)} pods, {len(unbound)} unbound: {describe_pods(unbound[:10])}")
        return pods

    try:
        return wait_for(f"{count} pods in {namespace} to be bound", probe, timeout, interval=0.5)
    except WaitTimeout as err:
        if scheduler is None:
            raise
        unbound = [p["metadata"]["name"] for p in listed_pods(api_client, namespace) if not p["spec"].get("nodeName")]
        said = attempts_on(scheduler, namespace, unbound)
        raise WaitTimeout(f"{err}\n{scheduler.name} on the unbound pods:\n{said}") from None


def attempts_on(scheduler, namespace: str, names: list[str], limit: int = 5) -> str:
    """The scheduler's log lines about the first `limit` of these pods."""
    lines = Path(scheduler.log_path).read_text(errors="replace").splitlines()
    wanted = tuple(f"pod={namespace}/{name} " for name in names[:limit])
    return "\n".join(line for line in lines if any(w in line for w in wanted)) or "(none)"


def misplaced(pods: list[dict]) -> dict[str, str]:
    """pod -> "on X, map says Y" for every pod not on the node its map names."""
    wrong = {}
    for pod in pods:
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName") or "<unbound>"
        if node != expected_node(index_of(name)):
            wrong[name] = f"on {node}, map says {expected_node(index_of(name))}"
    return wrong


def scheduled_events(api_client, namespace: str) -> Counter:
    """pod name -> how many times a Scheduled event reports it (a series counts each occurrence)."""
    events = get_json(
        api_client,
        f"/api/v1/namespaces/{namespace}/events",
        {"fieldSelector": "reason=Scheduled,involvedObject.kind=Pod"},
    )["items"]
    counts: Counter = Counter()
    for event in events:
        series = (event.get("series") or {}).get("count")
        counts[event["involvedObject"]["name"]] += int(series or event.get("count") or 1)
    return counts


def settled_scheduled_events(
    api_client, namespace: str, expected: int, quiet: float = 3.0, timeout: float = 60.0
) -> Counter:
    """scheduled_events() once `expected` pods have one, or once no new one came for `quiet`
    seconds (Events are sent in the background, after the binds)."""
    deadline = time.monotonic() + timeout
    last, changed = Counter(), time.monotonic()
    while True:
        try:
            events = scheduled_events(api_client, namespace)
        except (ApiException, HTTPError, OSError, AssertionError):
            events = last  # the API server may still be coming back
        if events != last:
            last, changed = events, time.monotonic()
        now = time.monotonic()
        if len(last) >= expected or now - changed >= quiet or now >= deadline:
            return last
        time.sleep(0.5)

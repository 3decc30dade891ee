"""The scheduler's caches under faults of the API connection, injected by a proxy between the
scheduler and the real kube-apiserver (api_proxy.py): a slow list, a watch stalled without
closing, a watch cut mid-stream, a watch that keeps failing, a resourceVersion expired (410).

Each test here failed against the scheduler before the fixes of issue 10:
- a slow list of the pods on nodes let it bind a pod to a held GPU under deny (it bound
  before its caches had synced);
- a hold assumed for a pod deleted while the watch was away was never dropped at the re-list;
- a watch cut mid-stream resumed from the resourceVersion it had started from (events
  replayed), and a silent watch went unnoticed for timeoutSeconds + 30 s;
- /readyz never turned false once the caches had synced;
- an event whose handler raised was dropped with no re-list.

The two that bind pods while a watch is broken run under --gpu-sharing=deny with pods competing
for GPUs all along (contention.py; on the nodes the test's own pods leave free): no GPU held
twice, read from the cluster's pod list.
"""

from __future__ import annotations

import itertools
import threading
import time
import urllib.error
import urllib.request

import pytest
from e2e.cluster import get_pod, wait_for_event
from e2e.components import SchedulerProcess, started_schedulers
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod
from gpu_scheduler.kube.objects import UNFINISHED_SELECTOR
from kubernetes import client

from .api_proxy import ApiProxy, Delay, Fail, Request, Stream
from .audit import verdict
from .binding_gates import post_binding
from .conftest import tracked

pytestmark = pytest.mark.faults

PODS = UNFINISHED_SELECTOR  # the selector of the scheduler's pod watch
LIST_DELAY = 5.0


@pytest.fixture
def proxied_scheduler(proxy, tmp_path, scheduler_name):
    """proxied_scheduler(*flags, wait=True): a scheduler whose every request goes through the proxy."""
    kubeconfig = str(proxy.write_kubeconfig(tmp_path / "proxy-kubeconfig"))
    with started_schedulers(kubeconfig, tmp_path, tracked) as start_named:
        names = (f"scheduler-{n}" for n in itertools.count())

        def start(*flags: str, wait: bool = True) -> SchedulerProcess:
            return start_named(next(names), *flags, wait=wait, scheduler_name=scheduler_name)

        yield start


def readyz(scheduler: SchedulerProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{scheduler.base_url}/readyz", timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError as err:
        return 0, str(err)


def node_of(api_client, ns: str, name: str) -> str:
    return get_pod(api_client, ns, name)["spec"].get("nodeName") or ""


def bound(api_client, ns: str, name: str):
    def probe() -> str:
        node = node_of(api_client, ns, name)
        if not node:
            raise NotYet(f"{name} is unbound")
        return node

    return probe


def test_no_pod_is_bound_before_every_cache_has_listed(
    api_client, ns, scheduler_name, proxy, proxied_scheduler, audit_log
):
    core = client.CoreV1Api(api_client)
    # GPU 0 of node1 is held by a pod of this scheduler (bound by an earlier run, say, before
    # containers had to have CUDA_VISIBLE_DEVICES: the scheduler reads its GPUs from its map).
    core.create_namespaced_pod(ns, bare_pod("holder-0", "0=node1:0\n", scheduler_name=scheduler_name))
    assert post_binding(api_client, ns, "holder-0", "node1")[0] == 201
    # The waiter has the README's entry (no webhook serves this scheduler): only the held GPU
    # stands in its way.
    waiter = bare_pod("waiter-0", "0=node1:0\n", scheduler_name=scheduler_name, bind_entries=True)
    core.create_namespaced_pod(ns, waiter)
    # The list of the pods is slow (a big cluster, a busy API server).
    proxy.rules.append(
        lambda r: Delay(LIST_DELAY) if r.method == "GET" and not r.watch and PODS in r.field_selector else None
    )

    scheduler = proxied_scheduler("--gpu-sharing=deny", "--leader-elect=false", wait=False)
    started = time.monotonic()
    statuses = []

    def ready() -> None:
        status, body = readyz(scheduler)
        statuses.append(status)
        if status != 200:
            raise NotYet(f"/readyz {status}: {body.strip()}")

    wait_for("the scheduler to be ready", ready, 60, interval=0.1)
    synced_after = time.monotonic() - started
    event = wait_for_event(api_client, ns, "waiter-0", "FailedScheduling", "GPU 0 by", timeout=20)
    assert f"{ns}/holder-0" in event["message"] and "--gpu-sharing=deny" in event["message"]
    assert node_of(api_client, ns, "waiter-0") == ""
    assert verdict(audit_log, ns).stored.get("waiter-0", 0) == 0, "waiter-0 was bound to a held GPU"
    assert 503 in statuses and synced_after >= LIST_DELAY * 0.9, (synced_after, statuses[:5])
    print(f"\n/readyz 503 for {synced_after:.1f}s while the list was delayed {LIST_DELAY:g}s; waiter-0 refused")


def test_a_hold_for_a_pod_deleted_while_the_watch_was_away_ends_at_the_relist(
    api_client, ns, scheduler_name, proxy, proxied_scheduler, gpu_contention
):
    core = client.CoreV1Api(api_client)

    def first_bound(event: dict) -> bool:
        pod = event.get("object") or {}
        metadata = pod.get("metadata") or {}
        return (metadata.get("namespace"), metadata.get("name")) == (ns, "first-0") and bool(
            (pod.get("spec") or {}).get("nodeName")
        )

    # The pod watch hears first-0 created, then nothing from its binding on.
    stall = Stream(stall_at=first_bound)
    stalling = threading.Event()
    stalling.set()
    expired_once = threading.Event()

    def rule(request: Request):
        if not request.watch or PODS not in request.field_selector:
            return None
        if stalling.is_set():
            return stall
        if not expired_once.is_set():
            expired_once.set()
            return Fail(410, "Expired", "too old resource version (faults test)")
        return None

    proxy.rules.append(rule)
    contention = gpu_contention(scheduler_name, nodes=("node2", "node3", "node4"))  # node1 is the test's
    proxied_scheduler("--gpu-sharing=deny", "--leader-elect=false")
    core.create_namespaced_pod(ns, bare_pod("first-0", "0=node1:0\n", scheduler_name=scheduler_name))
    assert wait_for("first-0 to be bound", bound(api_client, ns, "first-0"), 20) == "node1"
    # Deleted while the scheduler cannot see it: its hold is still "assumed", never confirmed.
    core.delete_namespaced_pod("first-0", ns, grace_period_seconds=0)
    wait_for("first-0 to be gone", lambda: _gone(core, ns, "first-0"), 20)

    assert [w.ended for w in proxy.watches(PODS)][-1:] == ["stalled"], "the watch never stalled at first-0's binding"
    # The watch comes back with 410 Gone, and the scheduler lists the pods again.
    stalling.clear()
    stall.released.set()
    wait_for("the 410 and a new list", lambda: _relisted(proxy, expired_once), 30)
    core.create_namespaced_pod(ns, bare_pod("second-0", "0=node1:0\n", scheduler_name=scheduler_name))
    assert wait_for("second-0 to be bound to the freed GPU", bound(api_client, ns, "second-0"), 20) == "node1"
    print(f"\n{contention.verify()}")


def _gone(core, ns: str, name: str) -> None:
    if any(p.metadata.name == name for p in core.list_namespaced_pod(ns).items):
        raise NotYet(f"{name} still exists")


def _relisted(proxy: ApiProxy, expired: threading.Event) -> None:
    if not expired.is_set():
        raise NotYet("the watch has not come back yet")
    after = [f for f in proxy.lists(PODS)][1:]
    if not after:
        raise NotYet("no second list of the pods yet")


def test_a_watch_cut_mid_stream_resumes_from_the_last_version_it_saw(
    api_client, ns, scheduler_name, proxy, proxied_scheduler, gpu_contention
):
    cut_once = threading.Event()

    def rule(request: Request):
        if request.watch and PODS in request.field_selector and not cut_once.is_set():
            cut_once.set()
            return Stream(cut_after=3)
        return None

    proxy.rules.append(rule)
    contention = gpu_contention(scheduler_name)
    proxied_scheduler("--gpu-sharing=deny", "--leader-elect=false")
    core = client.CoreV1Api(api_client)
    for i in range(6):  # pods for a node that does not exist: they stay pending
        core.create_namespaced_pod(ns, bare_pod(f"wait-{i}", f"{i}=nowhere:0\n", scheduler_name=scheduler_name))

    def resumed():
        watches = proxy.watches(PODS)
        if len(watches) < 2 or watches[0].ended != "cut":
            raise NotYet(f"{len(watches)} watches of the pods so far")
        return watches[0], watches[1]

    first, second = wait_for("the cut watch to be resumed", resumed, 30)
    seen = first.events[-1]["object"]["metadata"]["resourceVersion"]
    assert len(first.events) == 3
    assert second.request.query["resourceVersion"] == seen, (
        f"resumed from {second.request.query['resourceVersion']}, the last version it saw was {seen} "
        f"(it had started from {first.request.query['resourceVersion']})"
    )
    print(f"\n{contention.verify()}")


def test_readyz_turns_false_while_a_cache_cannot_be_kept_current_and_true_once_it_can(
    api_client, proxy, proxied_scheduler
):
    scheduler = proxied_scheduler("--leader-elect=false")
    assert readyz(scheduler)[0] == 200

    # /readyz is true once every cache has listed, as client-go's HasSynced is; the watch
    # that follows a list can still be on its way. Cut before it reached the proxy, it would
    # meet the failing rule instead of being cut (seen once in CI: "assert 0 == 1" below).
    def nodes_watch_open() -> None:
        if not any(w.request.path == "/api/v1/nodes" and not w.ended for w in proxy.watches()):
            raise NotYet("no watch of the nodes through the proxy yet")

    wait_for("the scheduler's nodes watch", nodes_watch_open, 30)
    failing = threading.Event()
    failing.set()
    proxy.rules.append(lambda r: Fail(503) if failing.is_set() and r.path == "/api/v1/nodes" else None)
    assert proxy.cut_watches("/api/v1/nodes") == 1
    broken = time.monotonic()

    # Only the cut above, nothing more: a watch that the proxy let through around the cut
    # and that says nothing must not count as working (it did until issue 16, point 5, and
    # /readyz then stayed 200 for 45 s once in CI).
    def not_ready() -> str:
        status, body = readyz(scheduler)
        if status != 503:
            raise NotYet(f"/readyz {status}")
        return body

    body = wait_for("/readyz to turn false", not_ready, 45, interval=0.5)
    took = time.monotonic() - broken
    assert "nodes" in body and "failing" in body, body
    failing.clear()
    healed = time.monotonic()
    wait_for("/readyz to be true again", lambda: _ready(scheduler), 45, interval=0.5)
    print(
        f"\n/readyz false {took:.0f}s after the nodes watch broke ({body.strip()}); "
        f"true {time.monotonic() - healed:.0f}s after it healed"
    )


def _ready(scheduler) -> None:
    status, body = readyz(scheduler)
    if status != 200:
        raise NotYet(f"/readyz {status}: {body.strip()}")


# -- the informer alone, in this process ------------------------------------------------------------


class RecordingHandler:
    def __init__(self, fail_on: str = "") -> None:
        self.names: set[str] = set()
        self.lists = 0
        self.fail_on = fail_on
        self.failed = False

    def replace(self, objects, listed_at=None) -> None:
        self.lists += 1
        self.names = {o["metadata"]["name"] for o in objects}

    def upsert(self, obj) -> None:
        name = obj["metadata"]["name"]
        if name == self.fail_on and not self.failed:
            self.failed = True
            raise RuntimeError(f"faults test: a handler that fails on {name}")
        self.names.add(name)

    def delete(self, obj) -> None:
        self.names.discard(obj["metadata"]["name"])


def _informer(kubeconfig: str, path: str, handler, name: str, read_timeout: float | None = None):
    from gpu_scheduler.kube.client import new_client
    from gpu_scheduler.kube.informer import Informer

    informer = Informer(new_client(kubeconfig, pool_size=4, qps=0, burst=1), path, handler, dict, name=name)
    if read_timeout is not None:
        informer.read_timeout = read_timeout
    return informer


def test_a_watch_that_goes_silent_without_closing_is_cut_by_the_read_timeout(proxy, tmp_path):
    # The proxy holds the first nodes watch open and forwards nothing, not even bookmarks:
    # a dead peer. The product waits at most WATCH_READ_TIMEOUT (90 s) for a line; here 2 s.
    stalled = Stream(stall_after=0)
    proxy.rules.append(lambda r: stalled if r.watch and r.path == "/api/v1/nodes" and not proxy.watches() else None)
    informer = _informer(
        str(proxy.write_kubeconfig(tmp_path / "kc")), "/api/v1/nodes", RecordingHandler(), "faults-nodes", 2.0
    )
    informer.start()
    try:
        started = time.monotonic()

        def reconnected() -> None:
            if len([w for w in proxy.watches() if w.request.path == "/api/v1/nodes"]) < 2:
                raise NotYet("still on the silent watch")

        wait_for("the informer to give up the silent watch", reconnected, 15, interval=0.1)
        assert time.monotonic() - started < 10
    finally:
        informer.stop()
        stalled.released.set()


def test_a_handler_that_fails_on_an_event_makes_the_informer_list_again(kubeconfig, api_client, ns):
    handler = RecordingHandler(fail_on="boom-0")
    informer = _informer(kubeconfig, f"/api/v1/namespaces/{ns}/pods", handler, "faults-pods")
    informer.start()
    try:
        wait_for("the first list", lambda: _listed(handler, 1), 15)
        client.CoreV1Api(api_client).create_namespaced_pod(
            ns, bare_pod("boom-0", "0=node1:0\n", scheduler_name="nobody")
        )

        def recovered() -> None:
            if "boom-0" not in handler.names:
                raise NotYet(f"the cache lacks boom-0 (failed once: {handler.failed}, lists {handler.lists})")

        wait_for("the failed event to be made good by a new list", recovered, 15)
        assert handler.failed and handler.lists == 2
    finally:
        informer.stop()


def _listed(handler: RecordingHandler, count: int) -> None:
    if handler.lists < count:
        raise NotYet(f"{handler.lists} lists")

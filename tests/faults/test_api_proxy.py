"""The faults proxy itself (api_proxy.py). A fault test trusts it to break what its rules say and
nothing more; a watch it stopped forwarding must not break the requests that come after it.

Seen in CI (stop 30, the /readyz fault test): a nodes watch the proxy had cut went back to the
proxy's connection pool while kube-apiserver was still streaming it. The scheduler's next list of
the nodes was sent on that connection, waited behind the watch (a connection's requests are
answered in turn) and then read one of the watch's chunk sizes as its status line
(BadStatusLine('172\\r\\n')): /readyz stayed 503 for 65 s after the fault had been lifted.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import urllib3
from e2e.waiting import NotYet, wait_for
from kubernetes import client

from .api_proxy import ApiProxy, Delay, Forwarded

pytestmark = pytest.mark.faults


def _client(certs) -> urllib3.PoolManager:
    return urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(certs.ca_file), retries=False)


def _forwarded_watch(proxy: ApiProxy, path: str):
    def probe() -> Forwarded:
        for record in proxy.watches():
            if record.request.path == path:
                return record
        raise NotYet(f"no watch of {path} through the proxy")

    return probe


def _streaming(proxy: ApiProxy, path: str):
    def probe() -> Forwarded:
        for record in proxy.watches():
            if record.request.path == path and record.connection is not None and not record.ended:
                return record
        raise NotYet(f"no watch of {path} streaming through the proxy")

    return probe


def _watch(proxy: ApiProxy, certs, path: str, resource_version: str) -> urllib3.BaseHTTPResponse:
    """A watch from resource_version, as an informer's after its list: nothing streams until a write."""
    return _client(certs).request(
        "GET",
        f"{proxy.url}{path}?watch=1&resourceVersion={resource_version}",
        preload_content=False,
        timeout=urllib3.Timeout(connect=5, read=30),
    )


def _list_answered_at_once(proxy: ApiProxy, certs, path: str, after: str) -> dict:
    """The request after the watch, on a connection of the proxy's pool, is answered at once."""
    started = time.monotonic()
    try:
        listed = _client(certs).request("GET", f"{proxy.url}{path}", timeout=urllib3.Timeout(connect=5, read=5))
    except urllib3.exceptions.HTTPError as err:
        pytest.fail(f"a list after {after} got no answer in {time.monotonic() - started:.1f}s: {err}")
    assert listed.status == 200, listed.data[:300]
    return listed.json()


@pytest.mark.parametrize("ended_by", ["cut", "client"])
def test_a_watch_that_ends_while_it_streams_leaves_nothing_for_the_next_request(proxy, certs, api_client, ns, ended_by):
    core = client.CoreV1Api(api_client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    version = core.list_namespaced_config_map(ns).metadata.resource_version
    watch = _watch(proxy, certs, path, version)
    assert watch.status == 200
    record = wait_for("the watch to stream", _streaming(proxy, path), 10)

    if ended_by == "cut":
        assert proxy.cut_watches(path) == 1
    else:
        watch.close()  # the client goes away, as the scheduler does when a watch has been quiet too long
    # The proxy learns that the watch has ended when it next forwards an event: make some.
    deadline = time.monotonic() + 10
    for n in itertools.count():
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"poke-{n}"}})
        if record.finished.wait(0.5) or time.monotonic() > deadline:
            break
    assert record.finished.is_set(), f"the proxy still forwards the {ended_by} watch: {record.ended!r}"

    listed = _list_answered_at_once(proxy, certs, path, f"a {ended_by} watch")
    names = {item["metadata"]["name"] for item in listed["items"]}
    assert "poke-0" in names, names


def test_a_watch_cut_before_it_streams_leaves_nothing_for_the_next_request(proxy, certs, api_client, ns):
    core = client.CoreV1Api(api_client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    version = core.list_namespaced_config_map(ns).metadata.resource_version
    # The watch is held on its way upstream long enough to be cut there (as the /readyz test may).
    proxy.rules.append(lambda r: Delay(1.0) if r.watch and r.path == path else None)

    def watch_until_cut() -> None:
        try:
            _watch(proxy, certs, path, version).close()
        except urllib3.exceptions.HTTPError:
            pass  # the cut: the proxy closes the connection before it answers

    watcher = threading.Thread(target=watch_until_cut, daemon=True)
    watcher.start()
    record = wait_for("the watch to reach the proxy", _forwarded_watch(proxy, path), 10)
    assert record.connection is None, "the watch streamed before the cut: the case is not tested"
    assert proxy.cut_watches(path) == 1
    assert record.finished.wait(10), f"the proxy still forwards the cut watch: {record.ended!r}"
    assert record.ended == "cut" and record.status == 200, (record.ended, record.status)

    _list_answered_at_once(proxy, certs, path, "a watch cut before it streamed")
    watcher.join(10)

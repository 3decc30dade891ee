"""A thin JSON client for the Kubernetes API.

The generated python client turns every response into model objects, which
costs far more CPU and memory than the scheduler can afford at hundreds of
binds per second, and it cannot even read the Status a successful binding
returns. So this client speaks raw JSON and keeps the library only for loading
configuration. Short requests go over our own HTTP/1.1, a kept-alive connection
per thread (kube/direct.py: the cheapest path per request); watches, proxies and
TLS settings only urllib3 honours go over the client library's own urllib3
pool.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes import config as kube_config
from kubernetes.client import Configuration
from kubernetes.client.rest import RESTClientObject
from kubernetes.config.config_exception import ConfigException

from gpu_scheduler.kube.chunked import ChunkedLines, ChunkError
from gpu_scheduler.kube.direct import DirectTransport, tls_context

# Sent with every request; the apiserver logs and audits it. A process adds
# its identity (the one it holds the leader Lease with), so an audit log says
# which replica made each binding.
USER_AGENT = "gpu-scheduler"
# A watch reads what the socket has, up to this much at a time (a TLS record is at most 16 KB; under
# 128 KB, so the buffer read into is not an mmap of its own).
WATCH_READ_SIZE = 64 * 1024

# The methods whose request may be sent again after it reached the server:
# doing them twice does what doing them once does.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})
# Which failed requests are sent again, by urllib3's classification of the
# error. A connection that could not be opened (refused, connect timeout)
# carried nothing, so every method is retried. A request that may have reached
# the server (no answer in time, the connection broken after sending) is sent
# again only if it is idempotent: a POST of a binding whose answer was lost may
# have been stored, and sending it again would hide that from the caller, who
# must then find out (the binder's "maybe stored"). Errors of neither kind (a
# TLS failure, say) are not retried (other=0). PATCH is not idempotent in
# general (a series count, a condition), so it is not retried either.
_RETRIES = urllib3.Retry(
    total=3,
    connect=3,
    read=2,
    other=0,
    status=0,
    redirect=0,
    allowed_methods=IDEMPOTENT_METHODS,
    backoff_factor=0.05,
)
# The longest wait for a TCP (and TLS) connection, within a request's timeout.
CONNECT_TIMEOUT_SECONDS = 10.0


class ApiError(Exception):
    """A Kubernetes API request failed; status 0 means no HTTP answer at all."""

    def __init__(self, method: str, path: str, status: int, body: bytes | str = b"") -> None:
        self.method = method
        self.path = path
        self.status = status
        self.message, self.reason = _status_message(body)
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


def _status_message(body: bytes | str) -> tuple[str, str]:
    """The message and reason of a metav1.Status body, or the raw text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        status = json.loads(text)
    except ValueError:
        return text.strip()[:500], ""
    if isinstance(status, dict):
        return str(status.get("message", text))[:500], str(status.get("reason", ""))
    return text[:500], ""


class TokenBucket:
    """Client-side rate limit, like client-go's --kube-api-qps/--kube-api-burst.

    The bucket starts full (burst tokens) and refills at qps tokens per second;
    acquire() sleeps until a token is free. qps <= 0 turns the limit off.
    """

    def __init__(self, qps: float, burst: int, now: float = 0.0) -> None:
        self._qps = qps
        self._burst = max(1, burst)
        self._tokens = float(self._burst)
        self._updated = now
        self._lock = threading.Lock()

    def reserve(self, now: float) -> float:
        """Take one token at time now; returns how long to wait before using it."""
        if self._qps <= 0:
            return 0.0
        with self._lock:
            self._tokens = min(self._burst, self._tokens + (now - self._updated) * self._qps)
            self._updated = now
            self._tokens -= 1.0
            return -self._tokens / self._qps if self._tokens < 0 else 0.0

    def acquire(self) -> None:
        wait = self.reserve(time.monotonic())
        if wait > 0:
            time.sleep(wait)


def load_configuration(kubeconfig: str | None) -> Configuration:
    """Cluster address and credentials: the kubeconfig if given, else in-cluster.

    Outside a cluster without --kubeconfig, fall back to ~/.kube/config like
    kubectl does, so a developer can run the scheduler from a shell.
    """
    configuration = Configuration()
    if kubeconfig:
        kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return configuration
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except ConfigException:
        kube_config.load_kube_config(client_configuration=configuration)
    return configuration


class KubeClient:
    """JSON requests against one apiserver through a shared connection pool.

    pool_size must cover every thread that talks to the apiserver at once
    (bind workers, event senders, watches, leader election), else urllib3
    opens throwaway connections and the TLS handshakes cost more than the
    requests.

    direct and watch_decoder choose the two paths cheaper than urllib3's,
    each taken where the settings or the answer allow it: short requests
    over our own connection per thread (kube/direct.py), and watch lines cut by our
    chunked decoder (kube/chunked.py). False sends everything through
    urllib3, as the benches and tests that compare the paths need.
    """

    def __init__(
        self,
        configuration: Configuration,
        *,
        pool_size: int = 32,
        qps: float = 0,
        burst: int = 1,
        user_agent: str = USER_AGENT,
        direct: bool = True,
        watch_decoder: bool = True,
    ) -> None:
        configuration.connection_pool_maxsize = pool_size
        self._configuration = configuration
        self._user_agent = user_agent
        self._pool = RESTClientObject(configuration).pool_manager
        self._base = configuration.host.rstrip("/")
        # Without a proxy every request goes to the one apiserver: its connection pool
        # is taken once, and requests go to it by path. The pool manager would parse
        # the URL and look the pool up on every request, a quarter of the client's CPU
        # per request (make bench: 584 -> 431 us per POST). Through a proxy, the pool
        # manager does what the proxy needs.
        self._apiserver = None if configuration.proxy else self._pool.connection_from_url(self._base)
        self._apiserver_path = (urllib3.util.parse_url(self._base).path or "").rstrip("/")
        # Short requests skip urllib3 where its pool would only add CPU (kube/direct.py).
        self._direct = None if self._apiserver is None or not direct else direct_transport(configuration)
        self._watch_decoder = watch_decoder
        self._limiter = TokenBucket(qps, burst, time.monotonic())

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        if content_type:
            headers["Content-Type"] = content_type
        # Read per request: in-cluster and exec credentials rotate, and the
        # configuration's refresh hook reloads them when they expire.
        token = self._configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        elif self._configuration.username:
            headers["Authorization"] = self._configuration.get_basic_auth_token()
        return headers

    def _url(self, path: str, query: dict[str, str] | None) -> str:
        return self._base + path + ("?" + urlencode(query) if query else "")

    def _send(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None,
        payload: bytes | None,
        headers: dict[str, str],
        left: float,
    ) -> tuple[int, bytes]:
        """One try of a short request, its answer read whole; urllib3's errors when none came."""
        connect_timeout = min(CONNECT_TIMEOUT_SECONDS, left)
        if self._direct is not None:
            target = self._apiserver_path + path + ("?" + urlencode(query) if query else "")
            return self._direct.request(method, target, payload, headers, connect_timeout, left)
        # urllib3 retries nothing itself (retries=False): its retries would each get the whole timeout again.
        response = self._open(
            method,
            path,
            query,
            body=payload,
            headers=headers,
            timeout=urllib3.Timeout(connect=connect_timeout, read=left),
            retries=False,
            preload_content=True,
        )
        return response.status, response.data

    def _open(self, method: str, path: str, query: dict[str, str] | None, **kwargs) -> urllib3.BaseHTTPResponse:
        if self._apiserver is None:
            return self._pool.request(method, self._url(path, query), **kwargs)
        target = self._apiserver_path + path + ("?" + urlencode(query) if query else "")
        # redirect=False: as the pool manager does (the apiserver never redirects).
        return self._apiserver.urlopen(method, target, redirect=False, **kwargs)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> tuple[int, bytes]:
        """One request; returns (HTTP status, body). Raises ApiError(status 0)
        only when no answer came back at all.

        timeout bounds the whole call, the rate limiter's wait and retries
        included: nothing is sent after it has passed. A binding relies on
        that: it must not be stored after the leader lease it was sent under
        could have passed to another replica (see scheduler/command.py)."""
        deadline = time.monotonic() + timeout
        self._limiter.acquire()
        payload = None if body is None else orjson.dumps(body)
        headers = self._headers(content_type if payload is not None else None)
        retries = _RETRIES
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApiError(method, path, 0, f"not sent: its {timeout:g} s were used up before")
            try:
                return self._send(method, path, query, payload, headers, left)
            except urllib3.exceptions.HTTPError as err:
                retries = _next_try(retries, method, path, err)

    def call(self, method: str, path: str, **kwargs) -> dict:
        """A request whose non-2xx answer is an ApiError; returns the JSON body."""
        status, data = self.request(method, path, **kwargs)
        if status >= 300:
            raise ApiError(method, path, status, data)
        return orjson.loads(data) if data else {}

    def get(self, path: str, query: dict[str, str] | None = None) -> dict:
        return self.call("GET", path, query=query)

    @contextmanager
    def stream(self, path: str, query: dict[str, str], read_timeout: float) -> Iterator[WatchStream]:
        """An open watch: yields a WatchStream, an iterator over the response's lines.

        read_timeout bounds each wait for data, not the whole watch: it must
        be longer than the gap between the apiserver's bookmarks, so a quiet
        but healthy watch is not cut, yet short enough to notice a dead
        connection soon.
        """
        try:
            response = self._open(
                "GET",
                path,
                query,
                headers=self._headers(None),
                timeout=urllib3.Timeout(connect=10.0, read=read_timeout),
                retries=False,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as err:
            raise ApiError("GET", path, 0, str(err)) from err
        try:
            if response.status != 200:
                raise ApiError("GET", path, response.status, response.read())
            yield WatchStream(response, path, decode_chunks=self._watch_decoder)
        finally:
            # Close before handing back: a half-read watch connection cannot
            # carry another request, so the pool must open a fresh one.
            response.close()
            response.release_conn()


def _next_try(retries: urllib3.Retry, method: str, path: str, err: urllib3.exceptions.HTTPError) -> urllib3.Retry:
    """The retry budget after this failure, once its backoff is slept; ApiError(status 0)
    when _RETRIES says the request must not (or may no longer) be sent again."""
    try:
        retries = retries.increment(method, path, error=err)
    except urllib3.exceptions.HTTPError:
        raise ApiError(method, path, 0, str(err)) from err
    retries.sleep()
    return retries


class WatchStream:
    """The lines of an open watch. A connection that breaks mid-stream (the
    apiserver restarting) ends in ApiError(status 0) like any other unanswered
    request, so callers handle one exception type for "reconnect"."""

    def __init__(self, response: urllib3.HTTPResponse, path: str, *, decode_chunks: bool = True) -> None:
        self._response = response
        self._path = path
        self._decode_chunks = decode_chunks
        self.interrupted = False

    def __iter__(self) -> Iterator[bytes]:
        body = _chunked_body(self._response) if self._decode_chunks else None
        try:
            yield from self._response if body is None else self._chunked_lines(body)
        except (urllib3.exceptions.HTTPError, OSError, ChunkError) as err:
            if self.interrupted:
                return
            raise ApiError("GET", self._path, 0, str(err)) from err

    def _chunked_lines(self, body: BinaryIO) -> Iterator[bytes]:
        """The lines of a chunked body, read from the connection's buffer (kube/chunked.py)."""
        decoder = ChunkedLines()
        while not decoder.finished:
            data = body.read1(WATCH_READ_SIZE)
            if not data:
                if self.interrupted:
                    return
                # What urllib3 says of a watch cut mid-stream, e.g. an apiserver restarting.
                raise urllib3.exceptions.ProtocolError("the connection closed before the watch's last chunk")
            yield from decoder.feed(data)
        yield from decoder.rest()

    def interrupt(self) -> None:
        """Ends the iteration now, from any thread (a read blocked on a quiet stream returns)."""
        self.interrupted = True
        self._response.shutdown()


def _chunked_body(response: urllib3.HTTPResponse) -> BinaryIO | None:
    """The connection's buffered reader under a chunked, unencoded body nothing has read
    yet; None when the response is anything else (urllib3 then reads it)."""
    if not response.chunked or response.headers.get("Content-Encoding", "identity") != "identity":
        return None
    body = getattr(getattr(response, "_fp", None), "fp", None)
    return body if hasattr(body, "read1") else None


def direct_transport(configuration: Configuration) -> DirectTransport | None:
    """Our own connections (kube/direct.py) with the TLS settings urllib3 would use, or None for the
    settings only urllib3 honours (socket options, a hostname to assert other than the
    server's name): those requests keep going through its pool."""
    if configuration.socket_options is not None or getattr(configuration, "keep_alive", False):
        return None
    if isinstance(configuration.assert_hostname, str):
        return None
    url = urllib3.util.parse_url(configuration.host)
    host = (url.host or "").strip("[]")
    port = url.port or (443 if url.scheme == "https" else 80)
    context = None
    if url.scheme == "https":
        context = tls_context(
            verify=bool(configuration.verify_ssl),
            ca_file=configuration.ssl_ca_cert,
            ca_data=getattr(configuration, "ca_cert_data", None),
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
            check_hostname=configuration.assert_hostname is not False,
        )
    return DirectTransport(url.scheme, host, port, context, getattr(configuration, "tls_server_name", None) or host)


def new_client(
    kubeconfig: str | None, *, pool_size: int, qps: float, burst: int, user_agent: str = USER_AGENT
) -> KubeClient:
    return KubeClient(load_configuration(kubeconfig), pool_size=pool_size, qps=qps, burst=burst, user_agent=user_agent)


class ClusterUnreadable(Exception):
    """A one-shot command could not read the cluster; the message says whether the configuration
    or the request failed, and why."""


def get_once(kubeconfig: str | None, *requests: tuple[str, dict[str, str] | None]) -> list[dict]:
    """The JSON answers to a one-shot command's GETs (`gpus`, `map generate`), in order, over a
    client of their own that is not rate limited. Raises ClusterUnreadable."""
    try:
        client = new_client(kubeconfig, pool_size=2, qps=0, burst=1)
    except (ConfigException, OSError, ValueError) as err:
        where = kubeconfig or "the in-cluster service account or ~/.kube/config"
        raise ClusterUnreadable(f"cannot load the cluster configuration ({where}): {err}") from err
    try:
        return [client.get(path, query) for path, query in requests]
    except ApiError as err:
        raise ClusterUnreadable(str(err)) from err

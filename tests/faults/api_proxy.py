"""A fault-injecting reverse proxy in front of the real kube-apiserver.

The scheduler under test talks to the proxy (a kubeconfig of its own: the test CA, a dummy
token); the proxy forwards every request to the real API server with the admin kubeconfig's
client certificate, and streams watch responses through line by line. Rules decide, per
request, what goes wrong: a delay before forwarding, an HTTP error instead of an answer, a
watch stream cut after some events, or one held open that forwards nothing more (a dead peer
that never closes). Everything the proxy forwarded is recorded, so a test can check what the
client asked for (which resourceVersion a watch resumed from, say).

Only what the tests need is implemented: HTTP/1.1 with Content-Length bodies in, JSON or
chunked watch streams out.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import urllib3
from e2e.cluster import current_cluster_and_user, write_kubeconfig


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("1", "true")

    @property
    def field_selector(self) -> str:
        return self.query.get("fieldSelector", "")


@dataclass(frozen=True)
class Delay:
    seconds: float


@dataclass(frozen=True)
class Fail:
    status: int
    reason: str = "ServiceUnavailable"
    message: str = "faults test: the API server is away"


@dataclass
class Stream:
    """A watch forwarded until `cut_after` events (then the connection is closed mid-stream) or
    `stall_after` events, or the first event `stall_at` says yes to (then nothing more is
    forwarded, that event neither; the connection stays open until the stall is released or
    the client gives up). Bookmarks count as events."""

    cut_after: int | None = None
    stall_after: int | None = None
    stall_at: Callable[[dict], bool] | None = None
    released: threading.Event = field(default_factory=threading.Event)


Action = Delay | Fail | Stream | None
Rule = Callable[[Request], Action]


@dataclass
class Forwarded:
    """One request the proxy handled: what it did and, for watches, the events it passed on."""

    request: Request
    action: Action
    status: int = 0
    events: list[dict] = field(default_factory=list)
    ended: str = ""  # for watches: "server", "cut", "client" or "stalled"
    connection: object = None  # the client's socket while a watch streams
    cut_asked: bool = False  # a cut asked for before the watch streamed: done when it starts
    finished: threading.Event = field(default_factory=threading.Event)  # the proxy is done with it
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cut(self) -> None:
        """Breaks a watch now, as a network failure would (the client sees the stream end
        without its last chunk). A watch still on its way upstream (not streaming yet) is
        broken as soon as it streams: left alone, it would stream normally and keep the
        client's cache current, which a test that cut it means to prevent (seen: /readyz
        rightly 200 for 45 s in the readyz fault test, the scheduler's log showing no break)."""
        with self._lock:
            if self.ended:
                return
            if self.connection is None:
                self.cut_asked = True
                return
            self.ended = "cut"
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def streaming(self, connection: object) -> None:
        """The watch starts streaming on this client socket; a cut asked for before happens now."""
        with self._lock:
            self.connection = connection
            cut_asked = self.cut_asked
        if cut_asked:
            self.cut()


def _admin_credentials(kubeconfig: str) -> tuple[str, str, str, str]:
    """(server, CA file, client cert file, client key file) of the kubeconfig's current context."""
    cluster, user = current_cluster_and_user(kubeconfig)
    server, ca_file = cluster["cluster"]["server"], cluster["cluster"]["certificate-authority"]
    return server, ca_file, user["user"]["client-certificate"], user["user"]["client-key"]


class TlsServer:
    """An HTTP server over TLS (the serving pair of `certs`) on a free port of 127.0.0.1,
    answering with `handler` in a thread for the length of a `with` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], certs) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certs.cert_file, certs.key_file)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._serving = threading.Thread(target=self.server.serve_forever, name=type(self).__name__, daemon=True)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self._serving.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class ApiProxy(TlsServer):
    def __init__(self, kubeconfig: str, certs) -> None:
        self.upstream, ca_file, cert_file, key_file = _admin_credentials(kubeconfig)
        self._pool = urllib3.PoolManager(
            cert_reqs="CERT_REQUIRED", ca_certs=ca_file, cert_file=cert_file, key_file=key_file, maxsize=64
        )
        self.rules: list[Rule] = []
        self.forwarded: list[Forwarded] = []
        self._lock = threading.Lock()
        self._certs = certs
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

            def log_message(self, *_args) -> None:
                pass

        super().__init__(Handler, certs)
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        return self.base_url

    def __exit__(self, *_exc) -> None:
        self._stopped.set()
        for record in self.watches():
            if isinstance(record.action, Stream):
                record.action.released.set()
        super().__exit__()
        self._pool.clear()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that reaches the API server through this proxy."""
        cluster = {"name": "proxy", "cluster": {"server": self.url, "certificate-authority": str(self._certs.ca_file)}}
        return write_kubeconfig(path, cluster, "proxy", "faults-proxy")

    def cut_watches(self, path: str = "", selector_part: str = "") -> int:
        """Breaks every open watch on `path` whose field selector contains `selector_part`."""
        open_ = [w for w in self.watches(selector_part) if w.request.path.startswith(path) and not w.ended]
        for record in open_:
            record.cut()
        return len(open_)

    def watches(self, selector_part: str = "") -> list[Forwarded]:
        with self._lock:
            return [f for f in self.forwarded if f.request.watch and selector_part in f.request.field_selector]

    def lists(self, selector_part: str = "") -> list[Forwarded]:
        with self._lock:
            return [
                f
                for f in self.forwarded
                if f.request.method == "GET" and not f.request.watch and selector_part in f.request.field_selector
            ]

    # -- handling ----------------------------------------------------------------------------

    def _action(self, request: Request) -> Action:
        for rule in list(self.rules):
            action = rule(request)
            if action is not None:
                return action
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        record = self._record(handler)
        try:
            self._forward(handler, record)
        finally:
            record.finished.set()

    def _record(self, handler: BaseHTTPRequestHandler) -> Forwarded:
        parts = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        request = Request(handler.command, parts.path, query)
        record = Forwarded(request, self._action(request))
        with self._lock:
            self.forwarded.append(record)
        return record

    def _forward(self, handler: BaseHTTPRequestHandler, record: Forwarded) -> None:
        request, action = record.request, record.action
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        if isinstance(action, Delay):
            time.sleep(action.seconds)
        if isinstance(action, Fail):
            self._reply_status(handler, record, action)
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() in ("content-type", "accept", "user-agent")}
        try:
            upstream = self._pool.request(
                request.method,
                self.upstream + handler.path,
                body=body,
                headers=headers,
                preload_content=False,
                retries=False,
                timeout=urllib3.Timeout(connect=10, read=None if request.watch else 60),
            )
        except urllib3.exceptions.HTTPError as err:
            self._reply_status(handler, record, Fail(502, "BadGateway", f"faults proxy: {err}"))
            return
        record.status = upstream.status
        try:
            if request.watch and upstream.status == 200:
                self._stream(handler, upstream, record, action if isinstance(action, Stream) else Stream())
            else:
                data = upstream.read()
                self._send(handler, upstream.status, upstream.headers.get("Content-Type", "application/json"), data)
        finally:
            if not upstream.closed:
                # Not read to its end (a watch cut before it streamed, say): kube-apiserver is still
                # sending it. Back in the pool, the connection would carry the next request into
                # the middle of that watch, to wait behind it and read a chunk size as its status
                # line (the /readyz fault test's nodes list, 65 s of 503s in CI).
                upstream.close()
            upstream.release_conn()

    def _reply_status(self, handler, record: Forwarded, fail: Fail) -> None:
        record.status = fail.status
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": fail.message,
                  "reason": fail.reason, "code": fail.status}  # fmt: skip
        self._send(handler, fail.status, "application/json", json.dumps(status).encode())

    @staticmethod
    def _send(handler, status: int, content_type: str, data: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _stream(self, handler, upstream, record: Forwarded, plan: Stream) -> None:
        record.streaming(handler.connection)
        if record.ended == "cut":
            handler.close_connection = True
            return  # cut before it streamed: the client sees the connection break
        handler.send_response(200)
        handler.send_header("Content-Type", upstream.headers.get("Content-Type", "application/json"))
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.close_connection = True
        buffer = b""
        try:
            for chunk in upstream.stream(4096):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    if plan.cut_after is not None and len(record.events) >= plan.cut_after:
                        record.ended = "cut"
                        return  # the connection closes without the final chunk: broken mid-stream
                    event = json.loads(line)
                    if (plan.stall_after is not None and len(record.events) >= plan.stall_after) or (
                        plan.stall_at is not None and plan.stall_at(event)
                    ):
                        record.ended = "stalled"
                        # Hold the connection, say nothing, until released or the proxy stops.
                        while not plan.released.wait(0.2) and not self._stopped.is_set():
                            pass
                        return
                    record.events.append(event)
                    data = line + b"\n"
                    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            record.ended = "server"
        except (OSError, urllib3.exceptions.HTTPError):
            record.ended = record.ended or "client"

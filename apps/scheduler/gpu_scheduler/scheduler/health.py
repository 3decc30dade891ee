"""Plain-HTTP endpoints for the kubelet and Prometheus: /metrics, /healthz, /readyz."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

# Returns None when fine, else what is wrong (shown in the response body).
Check = Callable[[], str | None]


class HealthServer:
    """Serves on a daemon thread; the checks run on each request."""

    def __init__(self, address: str, port: int, registry: CollectorRegistry, healthy: Check, ready: Check) -> None:
        handler = _handler_class(registry, healthy, ready)
        self._server = ThreadingHTTPServer((address, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health-http", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_class(registry: CollectorRegistry, healthy: Check, ready: Check) -> type:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/livez"):
                self._check(healthy, 500)
            elif path == "/readyz":
                self._check(ready, 503)
            else:
                self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _check(self, check: Check, failure_status: int) -> None:
            problem = check()
            if problem is None:
                self._reply(200, b"ok\n")
            else:
                self._reply(failure_status, problem.encode() + b"\n")

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:
            # Probes every few seconds would drown the decision log.
            log.debug("%s %s", self.address_string(), format % args)

    return Handler

"""A minimal JSON client for the apiserver: one keep-alive HTTPS connection per thread.

The benchmark's own clients (the pod creator, the watch that sees binds, the
ceiling binder) must cost as little CPU as possible, because they share two
cores with the apiserver and the scheduler under test. So they send bodies
serialised in advance over plain http.client connections instead of going
through a generated client or a connection pool.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from urllib.parse import urlencode, urlsplit

from kubernetes import config as kube_config
from kubernetes.client import Configuration

_RECONNECT_ERRORS = (
    http.client.RemoteDisconnected,
    http.client.CannotSendRequest,
    http.client.BadStatusLine,
    ConnectionError,
    BrokenPipeError,
)


class ApiError(Exception):
    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        self.status = status
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300].decode('utf-8', 'replace')}")


class KubeApi:
    """The cluster a kubeconfig names; safe to share between threads."""

    def __init__(self, kubeconfig: str) -> None:
        configuration = Configuration()
        kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        self.configuration = configuration  # for processes that need the same credentials as flags
        url = urlsplit(configuration.host)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 443
        self._context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if not configuration.verify_ssl:
            self._context.check_hostname = False
            self._context.verify_mode = ssl.CERT_NONE
        if configuration.cert_file:
            self._context.load_cert_chain(configuration.cert_file, configuration.key_file)
        self.headers = {"Accept": "application/json", "Content-Type": "application/json"}
        token = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            self.headers["Authorization"] = token
        self._local = threading.local()

    def connect(self, timeout: float = 60.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self._context, timeout=timeout)

    def _connection(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        return conn

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        """One request on this thread's connection; reconnects once if the server closed it."""
        headers = self.headers if content_type == "application/json" else {**self.headers, "Content-Type": content_type}
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            except _RECONNECT_ERRORS:
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        ok: tuple[int, ...] = (),
        content_type: str = "application/json",
    ) -> dict:
        """A JSON request whose answer must be 2xx (or one of `ok`); returns the JSON body."""
        payload = None if body is None else json.dumps(body).encode()
        status, data = self.request(method, path, payload, content_type)
        if status >= 300 and status not in ok:
            raise ApiError(method, path, status, data)
        return json.loads(data) if data else {}

    def get(self, path: str, **query: str) -> dict:
        return self.call("GET", path + ("?" + urlencode(query) if query else ""))

    def watch(
        self, conn: http.client.HTTPSConnection, path: str, resource_version: str, **query: str
    ) -> Iterator[dict]:
        """Watch events (each a dict with type and object) from resource_version
        until the server ends the watch; the caller re-lists on 410 Gone. conn
        is the caller's (from connect()), so that another thread can cut it."""
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
            **query,
        }
        try:
            conn.request("GET", f"{path}?{urlencode(query)}", headers=self.headers)
            response = conn.getresponse()
            if response.status != 200:
                raise ApiError("GET", path, response.status, response.read())
            while line := response.readline():
                yield json.loads(line)
        finally:
            conn.close()

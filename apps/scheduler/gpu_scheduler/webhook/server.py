"""gunicorn serving the webhook over TLS 1.2+, following certificate rotation.

gunicorn's gevent worker asks its `ssl_context` hook for a context once, when
the worker starts, and wraps every connection with it. Ours carries no
certificate itself: its SNI callback, which OpenSSL calls on every handshake
whether or not the client names a server, hands that handshake the context of
the pair on disk (ReloadingTLS.context()), cached and rebuilt first when the
certificate or key file has changed. A pair that fails to load (the new
certificate written but not yet its key, a Secret volume mid-update) keeps the
previous context serving, so rotation never costs a failed handshake, and
connections already open keep the certificate they started with.

Why gevent and not gthread: the same Flask app over the same TLS costs 0.59 CPU
ms per request under the gevent worker against 0.90 under gthread (make bench,
stack floor of 2026-11-27 08:29), and the whole webhook 0.75 against 0.90 at
600 requests/s (docs/benchmarks.md); gthread hands every request from its
poller to a thread pool and back, and touches its heartbeat file per request.
`gpu-scheduler webhook` has gevent patch the process before anything else is
imported (cli._cooperative_stdlib).
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from flask import Flask
from gunicorn import glogging
from gunicorn.app.base import BaseApplication

from ..gc_tuning import tune_for_service
from ..logs import start_writer

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE = 1.0  # seconds


class TLSLoadError(Exception):
    """The serving certificate or key cannot be loaded; str() says which and why."""


def _file_identity(path: str) -> tuple[int, int, int, int]:
    # os.stat follows symlinks: a Secret volume swaps its ..data symlink to a
    # new directory, which changes the inode of the file the name resolves to
    # even when the new file has the same size and modification time.
    info = os.stat(path)
    return info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size


def build_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context for the pair: TLS 1.2 or newer, Python's default ciphers."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # Also checks that the key belongs to the certificate.
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as err:
        raise TLSLoadError(f"cannot load certificate {cert_file} with key {key_file}: {err}") from None
    return context


def read_expiry(cert_file: str) -> datetime.datetime | None:
    """When the first certificate in the file expires; None if it cannot be read."""
    try:
        with open(cert_file, "rb") as pem:
            return x509.load_pem_x509_certificate(pem.read()).not_valid_after_utc
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class CertificateStatus:
    """How long the serving certificate has left: true while it has not expired."""

    not_after: datetime.datetime | None
    now: datetime.datetime

    @property
    def remaining_seconds(self) -> float | None:
        return None if self.not_after is None else (self.not_after - self.now).total_seconds()

    def __bool__(self) -> bool:
        return self.not_after is not None and self.now < self.not_after

    def __str__(self) -> str:
        if self.not_after is None:
            return "the serving certificate's expiry cannot be read"
        until = self.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
        if self:
            return f"serving certificate valid until {until} ({int(self.remaining_seconds)} s left)"
        return f"serving certificate expired at {until}; renew it (gpu-scheduler certs, or the chart's CronJob)"


class ReloadingTLS:
    """The SSLContext for a certificate/key pair on disk, rebuilt when they change.

    Checking costs two stat calls per handshake; the API server keeps its
    connections alive, so that is rare. Thread-safe, for servers that shake
    hands on several threads.
    """

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._tried = self._identity()
        # Raises: without a pair there is nothing to serve.
        self._context = build_context(cert_file, key_file)
        self._not_after = read_expiry(cert_file)
        self._failed_at: float | None = None
        self._serving: ssl.SSLContext | None = None  # serving_context(), one per worker process
        log.info("serving certificate %s, valid until %s", cert_file, self._not_after)
        if not self._unexpired():
            log.warning("the serving certificate %s has expired: /readyz fails until it is renewed", cert_file)

    def _unexpired(self) -> bool:
        return self._not_after is not None and datetime.datetime.now(datetime.UTC) < self._not_after

    def _identity(self) -> tuple | None:
        try:
            return _file_identity(self.cert_file), _file_identity(self.key_file)
        except OSError:
            return None  # mid-swap: a file is briefly missing

    def ready(self) -> bool:
        """Whether the certificate being served has not expired (rotation works)."""
        return bool(self.status())

    def status(self) -> CertificateStatus:
        """The certificate a new connection gets (the files are checked first), and its expiry."""
        self.context()
        return CertificateStatus(self._not_after, datetime.datetime.now(datetime.UTC))

    def not_after(self) -> datetime.datetime | None:
        """When the certificate a new connection gets expires; None if it cannot be read."""
        return self.status().not_after

    def context(self) -> ssl.SSLContext:
        with self._lock:
            identity = self._identity()
            changed = identity is not None and identity != self._tried
            # A file rewritten in place within one tick of the file system's
            # clock, at the same size, keeps its stat identity; so after a
            # failed load, try again once a second until one succeeds.
            retry = (
                identity is not None
                and self._failed_at is not None
                and time.monotonic() - self._failed_at >= RETRY_AFTER_FAILURE
            )
            if changed or retry:
                # Stat before loading: if the files change while we load, the
                # next connection sees a different identity and loads again.
                self._tried = identity
                self._load(log_failure=changed)
            return self._context

    def _load(self, log_failure: bool) -> None:
        try:
            self._context = build_context(self.cert_file, self.key_file)
        except TLSLoadError as err:
            self._failed_at = time.monotonic()
            if log_failure:
                log.warning("keeping the previous serving certificate: %s", err)
            return
        self._failed_at = None
        # Read after loading; should the file change in between, the identity
        # check reloads both on the next connection.
        self._not_after = read_expiry(self.cert_file)
        log.info(
            "loaded new serving certificate %s, valid until %s",
            self.cert_file,
            self._not_after,
        )

    def serving_context(self) -> ssl.SSLContext:
        """The context a server wraps connections with: no certificate of its own; each
        handshake gets context() from the SNI callback, which OpenSSL calls with the
        server name or None, before it picks a certificate.

        Made on first use in the process that serves (a gunicorn worker, once gevent
        has patched the ssl module: gevent's server wraps sockets only with gevent's
        SSLContext class), then kept. A context swapped in gives the handshake only its
        certificate and key, so it may be of either class."""
        if self._serving is None:
            serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            serving.minimum_version = ssl.TLSVersion.TLSv1_2
            serving.sni_callback = self._choose_certificate
            self._serving = serving
        return self._serving

    def _choose_certificate(self, connection, _server_name, _serving) -> None:
        connection.context = self.context()

    def gunicorn_hook(self, _config, _default_ssl_context_factory) -> ssl.SSLContext:
        """gunicorn's `ssl_context(config, default_ssl_context_factory)` server hook."""
        return self.serving_context()


class _RootLogger(glogging.Logger):
    """gunicorn's own messages go through the root handler gpu_scheduler.logs
    configured, so they share the webhook's format (text or JSON)."""

    def setup(self, cfg) -> None:
        super().setup(cfg)
        for handler in list(self.error_log.handlers):
            if getattr(handler, "_gunicorn", False):
                self.error_log.removeHandler(handler)
        self.error_log.propagate = True


@dataclass(frozen=True)
class ServerOptions:
    bind: str
    port: int
    workers: int
    connections: int  # per worker: the most it serves at once
    log_level: str
    metrics_dir: str  # removed by the master when it exits


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class WebhookServer(BaseApplication):
    """gunicorn, configured in code instead of from its command line."""

    def __init__(
        self,
        options: ServerOptions,
        tls: ReloadingTLS,
        app_factory: Callable[[], Flask],
    ) -> None:
        self.options = options
        self.tls = tls
        self.app_factory = app_factory
        super().__init__()

    def load_config(self) -> None:
        options = self.options
        settings = {
            "bind": [bind_address(options.bind, options.port)],
            "workers": options.workers,
            # gevent: every connection is a greenlet, so the API server's
            # pooled keep-alive connections cost no thread each, and the
            # cheapest stack per request measured (see the module's docstring).
            "worker_class": "gevent",
            "worker_connections": options.connections,
            # The API server pools its connections to a webhook; keeping them
            # open a while saves a TLS handshake on each reuse.
            "keepalive": 75,
            "timeout": 30,
            "graceful_timeout": 10,
            "certfile": self.tls.cert_file,
            "keyfile": self.tls.key_file,
            "ssl_context": self.tls.gunicorn_hook,
            "logger_class": _RootLogger,
            "loglevel": options.log_level,
            "accesslog": None,
            "on_exit": lambda _arbiter: shutil.rmtree(options.metrics_dir, ignore_errors=True),
            # A worker's log lines wait in its queue until this starts its writer
            # (logs.children_start_writer_later).
            "post_fork": lambda _arbiter, _worker: start_writer(),
        }
        for name, value in settings.items():
            self.cfg.set(name, value)
        # The control socket (gunicorn >= 25.1) would let anyone in the
        # container resize or stop the server, and wants a writable $HOME.
        if "control_socket_disable" in self.cfg.settings:
            self.cfg.set("control_socket_disable", True)

    def load(self) -> Flask:
        # Runs in each worker after the fork: every worker has its own app and
        # metrics objects (their values meet in the multiprocess directory).
        app = self.app_factory()
        tune_for_service()
        return app

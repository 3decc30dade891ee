"""granian serving the webhook over TLS 1.2+, following certificate rotation.

granian is an HTTP server written in Rust: it parses HTTP and speaks TLS (rustls)
outside the GIL and calls the Flask app in a pool of Python threads in each worker
process: it costs less CPU per admission than gunicorn's gevent worker, which the
webhook ran on before (the measurements: docs/logs/benchmarks.md, "Measurements
behind the code").

A granian worker loads the certificate and key from their files when it starts, so
a new pair needs new workers. The master watches the files (ReloadingTLS, checked by
CertificateWatcher) and, once a new pair has loaded whole in Python (the key belongs
to the certificate), sends itself SIGHUP; granian then starts a new worker before it
stops each old one, so the port is served throughout. A pair that fails to load (the
certificate written but not yet its key, a Secret volume mid-update) restarts
nothing: the workers keep serving the previous one. Each worker reports the
certificate it serves, read once when it starts (served_certificate), to /readyz and
/metrics.

HTTP/2 is offered first (ALPN h2, then http/1.1) for what a stopping worker does to
its connections: it closes the idle ones at once, and it closes an HTTP/1.1 one idle
for 30 s anyway (hyper's header read timeout). kube-apiserver keeps an idle
connection to the webhook for 90 s and reuses it; a POST it writes on an HTTP/1.1
connection the worker is closing fails (Go retries no POST it began to write), and
the admission is refused (tests/faults/test_rotation_under_admission_load.py saw it).
Over HTTP/2 a stopping worker first sends GOAWAY, naming the last request it will
answer: the API server sends the next ones down another connection and retries
those the GOAWAY turned away. The kubelet's
probes and Prometheus keep HTTP/1.1. A TLS handshake a worker has in progress when it
stops is still dropped with its listener; the API server dials only when every
connection it has is busy or gone, so it meets that only if it dials in the
millisecond a worker stops.

A connection takes H2_STREAMS_PER_CONNECTION requests at a time: a Go client with
more in flight opens another connection, which the kernel may give to another worker,
as over HTTP/1.1. With granian's default (200) a Go client sends everything down one
connection to one worker, and the tail latency grows many times over. HTTP/2 costs a
burst through the API server some throughput against HTTP/1.1: the price of
admissions that a rotation does not refuse (both measured: docs/logs/benchmarks.md).
"""

from __future__ import annotations

import datetime
import logging
import multiprocessing
import os
import shutil
import signal
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from flask import Flask

from ..gc_tuning import tune_for_service
from ..malloc_tuning import keep_large_blocks_mapped

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE = 1.0  # seconds
WATCH_INTERVAL = 1.0  # seconds between two checks of the certificate files
H2_STREAMS_PER_CONNECTION = 2  # HTTP/2 requests in flight on one connection (module docstring)


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
    """The certificate/key pair on disk, loaded again when the files change.

    `generation` counts the pairs loaded whole, so a watcher can tell a new one
    from a failed attempt. Checking costs two stat calls. Thread-safe.
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
        self.generation = 0
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
        self.generation += 1
        # Read after loading; should the file change in between, the identity
        # check reloads both on the next connection.
        self._not_after = read_expiry(self.cert_file)
        log.info(
            "loaded new serving certificate %s, valid until %s",
            self.cert_file,
            self._not_after,
        )


def served_certificate(cert_file: str) -> Callable[[], CertificateStatus]:
    """What /readyz and /metrics say in a worker: the expiry of the certificate it
    serves, which it loaded when it started, against the time of asking."""
    not_after = read_expiry(cert_file)
    return lambda: CertificateStatus(not_after, datetime.datetime.now(datetime.UTC))


class CertificateWatcher:
    """Checks the pair on disk every `interval` seconds in a thread of the master and
    calls `on_new_pair` when a new one has loaded whole."""

    def __init__(self, tls: ReloadingTLS, on_new_pair: Callable[[], None], interval: float = WATCH_INTERVAL) -> None:
        self.tls = tls
        self.on_new_pair = on_new_pair
        self.interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="certificate-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            loaded = self.tls.generation
            self.tls.context()
            if self.tls.generation != loaded:
                self.on_new_pair()


def _stop_signals_default() -> None:
    """In a worker just forked. It inherits the master's handlers for SIGTERM and SIGINT,
    which only set flags of the master's; until granian installs the worker's own (after
    the app is made), a stop signal would be lost and the master would wait
    workers_kill_timeout before killing it (seen: a SIGTERM 40 ms after the start took
    10 s). Until then the default: a worker still starting just ends."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def restart_workers() -> None:
    """granian's master starts new workers, one at a time, on SIGHUP."""
    log.info("new serving certificate: replacing the workers one at a time")
    os.kill(os.getpid(), signal.SIGHUP)


@dataclass(frozen=True)
class ServerOptions:
    bind: str
    port: int
    workers: int
    threads: int  # per worker: the Python threads that run the app
    log_level: str
    metrics_dir: str  # removed when the server exits


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _granian_logging(level: str) -> dict:
    """granian's loggers handing their records to the root handler gpu_scheduler.logs
    configured, so its messages share the webhook's format (text or JSON)."""
    return {
        "loggers": {
            "_granian": {"handlers": [], "level": level.upper(), "propagate": True},
            # One line per request would double the log's volume: our own line says more.
            "granian.access": {"handlers": [], "level": "WARNING", "propagate": False},
        }
    }


def serve(options: ServerOptions, tls: ReloadingTLS, app_factory: Callable[[], Flask]) -> int:
    """Serve `app_factory()`'s app (made in each worker) until SIGTERM or SIGINT; the exit code."""
    from granian.constants import HTTPModes, Interfaces, SSLProtocols
    from granian.http import HTTP2Settings
    from granian.log import LogLevels
    from granian.server import Server

    class _Server(Server):
        def build_ssl_context(self, cert, key, *args):
            super().build_ssl_context(cert, key, *args)
            # granian resolves symlinks once, at start. A Secret volume's files are
            # symlinks through ..data to a directory the kubelet deletes after the
            # next update, so the workers started for the new pair would look for
            # the old one. Keep the names as given.
            if self.ssl_ctx[0]:
                self.ssl_ctx = (self.ssl_ctx[0], os.path.abspath(cert), os.path.abspath(key), *self.ssl_ctx[3:])

    def load_app(*_args) -> Flask:
        # Runs in each worker after the fork: every worker has its own app and
        # metrics objects (their values meet in the multiprocess directory).
        app = app_factory()
        tune_for_service()
        keep_large_blocks_mapped()
        log.info("worker %d serving %s", os.getpid(), tls.cert_file)
        return app

    # The app factory is a closure; granian's workers get it by forking (Python
    # 3.14 would otherwise have them spawned, which cannot pass one).
    multiprocessing.set_start_method("fork", force=True)
    os.register_at_fork(after_in_child=_stop_signals_default)
    server = _Server(
        "gpu_scheduler.webhook",
        address=options.bind.strip("[]"),
        port=options.port,
        interface=Interfaces.WSGI,
        workers=options.workers,
        blocking_threads=options.threads,
        # h2 or http/1.1 by ALPN: HTTP/2's GOAWAY lets a worker stop without
        # failing a request of the API server (module docstring).
        http=HTTPModes.auto,
        http2_settings=HTTP2Settings(max_concurrent_streams=H2_STREAMS_PER_CONNECTION),
        ssl_cert=Path(tls.cert_file),
        ssl_key=Path(tls.key_file),
        ssl_protocol_min=SSLProtocols.tls12,
        log_level=LogLevels(options.log_level),
        log_dictconfig=_granian_logging(options.log_level),
        respawn_failed_workers=True,
        workers_kill_timeout=10,
    )
    watcher = CertificateWatcher(tls, restart_workers)
    watcher.start()
    try:
        server.serve(target_loader=load_app, wrap_loader=False)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    finally:
        watcher.stop()
        shutil.rmtree(options.metrics_dir, ignore_errors=True)
    return 0

"""Prometheus metrics of the webhook, summed over granian's worker processes.

Each worker is a process with its own counters; a scrape reaches one of them.
prometheus_client's multiprocess mode has every worker write its values to
files in one directory and sums them at scrape time, so any worker answers for
all of them.
"""

from __future__ import annotations

import datetime
import glob
import os
import time
from collections.abc import Callable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
OPERATIONS = ("mutate", "mutate-workloads", "validate")
RESULTS = ("allowed", "patched", "denied", "bad_request")
# Admission is parsing a small JSON document: milliseconds. The API server
# gives a webhook 10 s at most by default.
BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST


def enable_multiprocess(directory: str) -> None:
    """Make metrics created from now on (in this process and its forks) multiprocess.

    prometheus_client chooses how values are stored once, when it is first
    imported, from PROMETHEUS_MULTIPROC_DIR. `gpu-scheduler` imports every
    subcommand before knowing which one runs, so the library is already loaded
    when the webhook creates its directory; choosing again here is what the
    environment variable would have done at import time.
    """
    os.environ[MULTIPROC_DIR_ENV] = directory
    values.ValueClass = values.get_value_class()


class CertificateCollector:
    """The serving certificate's expiry, read at scrape time by the worker that answers.

    Not a multiprocess metric: every worker serves the same files, and the one
    answering checks them first, so its answer is the current certificate's.
    """

    def __init__(self, not_after: Callable[[], datetime.datetime | None]) -> None:
        self._not_after = not_after

    def collect(self) -> Iterator[Metric]:
        not_after = self._not_after()
        if not_after is None:
            return
        expiry = GaugeMetricFamily(
            "gpu_scheduler_webhook_certificate_expiry_timestamp_seconds",
            "When the serving certificate expires (Unix time).",
        )
        expiry.add_metric([], not_after.timestamp())
        remaining = GaugeMetricFamily(
            "gpu_scheduler_webhook_certificate_remaining_seconds",
            "Seconds until the serving certificate expires; negative once it has. "
            "The chart's CronJob renews it when a third of its lifetime is left.",
        )
        remaining.add_metric([], not_after.timestamp() - time.time())
        yield expiry
        yield remaining


# A worker's file starts with the 4-byte count of the bytes it uses (then 4 of padding).
FILE_HEADER_BYTES = 8


class WorkersCollector:
    """Every worker's values, summed: prometheus_client's MultiProcessCollector over the
    files that have been sized.

    prometheus_client creates a worker's file and sizes it a moment later. A scrape that
    reads it in between fails whole (struct.error: prometheus/client_python#1199), and a
    worker killed in between leaves it empty for good, failing every scrape after it.
    Seen here: the first scrape after a start, while the second worker was making its
    metrics. A file without its header holds no values yet, so it is left out.
    """

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def collect(self) -> Iterator[Metric]:
        files = []
        for path in glob.glob(os.path.join(self._directory, "*.db")):
            try:
                if os.path.getsize(path) >= FILE_HEADER_BYTES:
                    files.append(path)
            except FileNotFoundError:  # a live gauge's file, removed when its worker ended
                pass
        return MultiProcessCollector.merge(files, accumulate=True)


class WebhookMetrics:
    def __init__(self, certificate_not_after: Callable[[], datetime.datetime | None] | None = None) -> None:
        # A registry of our own: creating a second app (tests) must not clash
        # with the metrics of the first in the global registry.
        self.registry = CollectorRegistry()
        self._certificate = None if certificate_not_after is None else CertificateCollector(certificate_not_after)
        if self._certificate is not None:
            self.registry.register(self._certificate)
        self.duration = Histogram(
            "gpu_scheduler_webhook_admission_duration_seconds",
            "Time from receiving an AdmissionReview to having the answer, by operation.",
            ["operation"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "gpu_scheduler_webhook_admission_decisions",
            "Admission requests answered, by operation and result "
            "(allowed: unchanged, patched: placement injected, denied, bad_request: not an AdmissionReview).",
            ["operation", "result"],
            registry=self.registry,
        )
        # Every series exists from the start, so rate() and alerts see zeros, not gaps.
        for operation in OPERATIONS:
            self.duration.labels(operation)
            for result in RESULTS:
                self.decisions.labels(operation, result)

    def observe(self, operation: str, result: str, seconds: float) -> None:
        self.duration.labels(operation).observe(seconds)
        self.decisions.labels(operation, result).inc()

    def exposition(self) -> bytes:
        """The text a scrape gets: the sum over all workers in multiprocess mode."""
        directory = os.environ.get(MULTIPROC_DIR_ENV)
        if directory:
            registry = CollectorRegistry()
            registry.register(WorkersCollector(directory))
            if self._certificate is not None:
                registry.register(self._certificate)
            return generate_latest(registry)
        return generate_latest(self.registry)

"""Prometheus metrics of the webhook, summed over gunicorn's worker processes.

Each worker is a process with its own counters; a scrape reaches one of them.
prometheus_client's multiprocess mode has every worker write its values to
files in one directory and sums them at scrape time, so any worker answers for
all of them.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
OPERATIONS = ("mutate", "validate")
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


class WebhookMetrics:
    def __init__(self) -> None:
        # A registry of our own: creating a second app (tests) must not clash
        # with the metrics of the first in the global registry.
        self.registry = CollectorRegistry()
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
        if os.environ.get(MULTIPROC_DIR_ENV):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)

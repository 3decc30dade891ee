"""The webhook's scrape, summed over its workers' files (prometheus_client's multiprocess mode)."""

from pathlib import Path

import pytest
from gpu_scheduler.webhook import metrics as webhook_metrics
from gpu_scheduler.webhook.metrics import WebhookMetrics, enable_multiprocess
from prometheus_client import values
from prometheus_client.parser import text_string_to_metric_families

PATCHED = {"operation": "mutate", "result": "patched"}


@pytest.fixture
def multiprocess(tmp_path, monkeypatch) -> Path:
    """Multiprocess mode for this test only: the value class is process-wide."""
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)
    monkeypatch.delenv(webhook_metrics.MULTIPROC_DIR_ENV, raising=False)
    enable_multiprocess(str(tmp_path))
    return tmp_path


def patched_total(text: bytes) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if s.name == "gpu_scheduler_webhook_admission_decisions_total" and s.labels == PATCHED
    )


def test_a_scrape_sums_the_workers_and_skips_a_file_not_yet_sized(multiprocess):
    metrics = WebhookMetrics()
    metrics.observe("mutate", "patched", 0.001)
    metrics.observe("mutate", "patched", 0.002)
    # What prometheus_client leaves between creating a worker's file and sizing it, and for
    # good when the worker is killed in between: an empty file.
    (multiprocess / "counter_4242.db").touch()
    (multiprocess / "histogram_4242.db").touch()

    assert patched_total(metrics.exposition()) == 2

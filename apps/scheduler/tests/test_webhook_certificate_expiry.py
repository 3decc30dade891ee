"""How long the webhook's serving certificate has left, as /readyz and /metrics say it.

The real `gpu-scheduler webhook` (granian, two workers) serves certificates made by
`gpu-scheduler certs`; the expected expiry is read from the certificate file itself.
"""

import datetime
import time

import pytest
import requests
from cryptography import x509
from e2e.components import make_certs
from e2e.processes import child_pids
from gpu_scheduler.certs import generate_bundle
from gpu_scheduler.certs.files import write_bundle
from prometheus_client.parser import text_string_to_metric_families
from webhook_server import HOST, WebhookProcess

REMAINING = "gpu_scheduler_webhook_certificate_remaining_seconds"
EXPIRY = "gpu_scheduler_webhook_certificate_expiry_timestamp_seconds"


def not_after(directory):
    return x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes()).not_valid_after_utc


def gauges(server) -> dict[str, float]:
    text = requests.get(server.url("/metrics"), verify=str(server.trust_file), timeout=5).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in (REMAINING, EXPIRY)
    }


@pytest.fixture
def served(tmp_path):
    started = []

    def start(directory, wait=True):
        server = WebhookProcess(directory / "tls.crt", directory / "tls.key", directory / "ca.crt", tmp_path, wait=wait)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_readyz_and_metrics_say_when_the_certificate_expires(tmp_path, served):
    make_certs(tmp_path / "tls", "--days", "30")
    expiry = not_after(tmp_path / "tls")
    server = served(tmp_path / "tls")

    ready = requests.get(server.url("/readyz"), verify=str(server.trust_file), timeout=5)
    values = gauges(server)

    assert ready.status_code == 200
    assert f"valid until {expiry:%Y-%m-%dT%H:%M:%SZ}" in ready.text
    assert values[EXPIRY] == expiry.timestamp()
    assert abs(expiry.timestamp() - time.time() - values[REMAINING]) < 60


def test_every_worker_reports_the_renewed_certificate_after_the_files_change(tmp_path, served):
    make_certs(tmp_path / "tls", "--days", "30")
    trust = tmp_path / "trust.crt"
    server = served(tmp_path / "tls")
    renewed = generate_bundle(ips=[HOST], days=365)
    # Both CAs are trusted by the client, as the caBundle is during a renewal.
    trust.write_bytes((tmp_path / "tls" / "ca.crt").read_bytes() + renewed.ca_cert_pem)
    server.trust_file = trust
    assert gauges(server)[EXPIRY] == not_after(tmp_path / "tls").timestamp()

    workers = child_pids(server.process.pid)
    write_bundle(tmp_path / "tls", renewed)
    expiry = not_after(tmp_path / "tls")
    # Each worker reports the certificate it serves, and the master replaces them,
    # one at a time, once the new pair loads: wait until the old ones have exited.
    deadline = time.monotonic() + 40
    while len(child_pids(server.process.pid) - workers) < 2 or child_pids(server.process.pid) & workers:
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    # A scrape reaches one of the two workers.
    answers = [gauges(server)[EXPIRY] for _ in range(12)]
    ready = requests.get(server.url("/readyz"), verify=str(trust), timeout=5)

    assert answers == [expiry.timestamp()] * 12
    assert f"valid until {expiry:%Y-%m-%dT%H:%M:%SZ}" in ready.text


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_an_expired_certificate_shows_as_negative_time_left_and_not_ready(tmp_path, served):
    expired = generate_bundle(ips=[HOST], days=1, now=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3))
    write_bundle(tmp_path / "tls", expired)
    server = served(tmp_path / "tls", wait=False)
    # No client accepts an expired certificate; this one looks anyway.
    deadline = time.monotonic() + 20
    while True:
        try:
            ready = requests.get(server.url("/readyz"), verify=False, timeout=5)
            metrics = requests.get(server.url("/metrics"), verify=False, timeout=5).text
            break
        except requests.ConnectionError:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
    remaining = [s.value for f in text_string_to_metric_families(metrics) for s in f.samples if s.name == REMAINING]

    assert ready.status_code == 503
    assert "expired at" in ready.text and "renew it" in ready.text
    assert len(remaining) == 1 and -3 * 86400 < remaining[0] < -2 * 86400

"""The webhook as it runs in the cluster: the real CLI under granian, spoken to over TLS."""

import base64
import datetime
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import pytest
import requests
from cryptography import x509
from e2e.components import make_certs
from e2e.processes import child_pids
from gpu_scheduler.certs import generate_bundle
from gpu_scheduler.certs.files import write_bundle
from gpu_scheduler.webhook.server import WATCH_INTERVAL, build_context
from webhook_server import CLI, HOST, WebhookProcess, handshake

ADMISSION = Path(__file__).parent / "testdata" / "admission"


def golden(name):
    return json.loads((ADMISSION / f"{name}.input.json").read_text())


def serial(cert_file: Path) -> int:
    return x509.load_pem_x509_certificate(cert_file.read_bytes()).serial_number


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    make_certs(directory)
    return directory


@pytest.fixture(scope="module")
def server(certs, tmp_path_factory):
    process = WebhookProcess(
        certs / "tls.crt",
        certs / "tls.key",
        certs / "ca.crt",
        tmp_path_factory.mktemp("webhook"),
    )
    yield process
    process.stop()


@pytest.fixture
def start_webhook():
    """Start extra servers for one test; stopped afterwards even if it fails."""
    started = []

    def start(*args, **kwargs):
        started.append(WebhookProcess(*args, **kwargs))
        return started[-1]

    yield start
    for process in started:
        process.stop()


def post(server, path, body, **kwargs):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(
        server.url(path),
        data=data,
        verify=str(server.trust_file),
        timeout=10,
        headers={"Content-Type": "application/json"},
        **kwargs,
    )


def get(server, path):
    return requests.get(server.url(path), verify=str(server.trust_file), timeout=10)


def decision_count(server, operation, result):
    text = get(server, "/metrics").text
    pattern = rf'^gpu_scheduler_webhook_admission_decisions_total{{operation="{operation}",result="{result}"}} (\S+)$'
    match = re.search(pattern, text, re.MULTILINE)
    assert match, text
    return float(match.group(1))


# -- admission over TLS ----------------------------------------------------


def test_mutate_answers_with_the_bind_entries_patch(server):
    response = post(server, "/mutate", golden("mutate-statefulset-pod"))
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    answer = response.json()["response"]
    assert answer["allowed"] is True
    assert answer["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(answer["patch"]))
    assert {
        "op": "add",
        "path": "/spec/containers/1/env",
        "value": [
            {
                "name": "CUDA_VISIBLE_DEVICES",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['gpu-scheduler/cuda-visible-devices']"}},
            },
            {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"},
        ],
    } in operations


def test_validate_denies_an_invalid_map_with_its_line(server):
    response = post(server, "/validate", golden("validate-statefulset-invalid-map-denied"))
    assert response.status_code == 200
    answer = response.json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    assert answer["status"]["message"].startswith(
        "StatefulSet ml/train: gpu-scheduling-map in spec.template.metadata.annotations: line 3:"
    )


def test_a_map_index_too_long_for_int_is_denied_naming_the_line_not_a_500(server):
    review = golden("mutate-created-on-its-node")  # the webhook reads the map of such a pod only
    review["request"]["object"]["metadata"]["annotations"]["gpu-scheduling-map"] = "0=node1:0\n" + "7" * 5000 + "=n:0\n"
    response = post(server, "/mutate", review)
    assert response.status_code == 200, response.text[:500]
    answer = response.json()["response"]
    assert answer["allowed"] is False
    assert "gpu-scheduling-map: line 2: index 77777" in answer["status"]["message"]


def test_each_decision_is_logged_on_one_line(server):
    # A pod of another scheduler passes unexamined: not worth an info line.
    assert post(server, "/mutate", golden("mutate-other-scheduler")).status_code == 200
    assert post(server, "/mutate", golden("mutate-created-on-its-node")).status_code == 200
    deadline = time.monotonic() + 15
    # Other tests' pods were patched before, by the same server: wait for this one's line.
    while "node=node3" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [line for line in server.log().splitlines() if "mutate patched" in line and "node=node3" in line]
    assert lines, server.log()
    assert re.search(
        r" INFO +gpu_scheduler.webhook.app: mutate patched operation=mutate result=patched "
        r"pod=ml/train-2 index=2 node=node3 devices=0,1,2 duration_ms=[0-9.]+$",
        lines[-1],
    ), lines[-1]
    assert "ml/train-1" not in server.log()


def test_every_worker_that_runs_writes_its_log(server):
    """A worker forked while the master's log writer thread was busy wrote nothing,
    ever (its start line missing, so it looked as if it had never started).
    Read the workers from /proc, not from the log, and find each one's own line."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        workers = child_pids(server.process.pid)
        silent = [pid for pid in workers if f"worker {pid} serving" not in server.log()]
        if len(workers) == 2 and not silent:
            return
        time.sleep(0.1)
    pytest.fail(f"workers {sorted(workers)}; without a line in the log: {silent}\n{server.log()}")


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/mutate", b"not json at all", "the body is not JSON"),
        ("/mutate", b"", "the body is not JSON"),
        (
            "/validate",
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "\xff\xfe"}',
            "not UTF-8",
        ),
        ("/mutate", b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        ("/validate", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
        (
            "/mutate",
            {
                "apiVersion": "admission.k8s.io/v1beta1",
                "kind": "AdmissionReview",
                "request": {},
            },
            "admissionReviewVersions",
        ),
        (
            "/mutate",
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            "request must be an object",
        ),
        (
            "/validate",
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"kind": {}},
            },
            "request.uid",
        ),
        ("/mutate", [1, 2, 3], "the body must be an object"),
    ],
    ids=[
        "text",
        "empty",
        "invalid-utf8",
        "deep-arrays",
        "deep-objects",
        "v1beta1",
        "no-request",
        "no-uid",
        "array",
    ],
)
def test_malformed_requests_get_400_with_a_json_message(server, path, body, message):
    response = post(server, path, body)
    assert response.status_code == 400
    status = response.json()
    assert status["kind"] == "Status"
    assert status["code"] == 400
    assert message in status["message"]
    assert "Traceback" not in response.text
    assert server.process.poll() is None


def test_wrong_object_kind_is_a_bad_request(server):
    review = golden("validate-deployment-warned")
    response = post(server, "/mutate", review)
    assert response.status_code == 400
    assert "/mutate handles Pods, got 'Deployment'" in response.json()["message"]


def test_oversized_body_is_refused_before_it_is_sent(server):
    # Only the headers go out: the answer must come from Content-Length alone.
    # (Sending the body too would race the server closing the connection.)
    connection = http.client.HTTPSConnection(
        HOST,
        server.port,
        timeout=10,
        context=ssl.create_default_context(cafile=str(server.trust_file)),
    )
    try:
        connection.putrequest("POST", "/mutate")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(3 * 1024 * 1024 + 1))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413
        assert json.loads(response.read())["reason"] == "RequestEntityTooLarge"
    finally:
        connection.close()
    assert server.process.poll() is None


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [("GET", "/mutate", 405), ("POST", "/nothing-here", 404)],
)
def test_wrong_method_or_path_is_answered_in_json(server, method, path, code):
    response = requests.request(method, server.url(path), verify=str(server.trust_file), timeout=10)
    assert response.status_code == code
    assert response.json()["code"] == code


def test_health_and_readiness(server):
    assert get(server, "/healthz").status_code == 200
    assert get(server, "/readyz").status_code == 200


def test_a_pod_created_on_another_node_than_its_map_line_is_refused_over_tls_naming_both(server):
    # Issue 16, point 10. This webhook may not read nodes, so only a line's node too long to
    # be an alias label value is certainly another node; a shorter one gets a warning. (Placed
    # after the tests that read the log's last "mutate patched" line: this one logs another.)
    long_node = "gpu-worker-03.rack-17.frankfurt-2.training-cluster.example.internal"
    review = golden("mutate-statefulset-pod")
    pod = review["request"]["object"]
    pod["metadata"]["annotations"]["gpu-scheduling-map"] = f"2={long_node}:0,1\n"
    pod["spec"]["nodeName"] = "node1"
    answer = post(server, "/mutate", review).json()["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    message = answer["status"]["message"]
    assert "spec.nodeName is node1 but line 1 of its gpu-scheduling-map names node " + long_node in message

    pod["metadata"]["annotations"]["gpu-scheduling-map"] = "2=node3:0,1\n"
    answer = post(server, "/mutate", review).json()["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    assert answer["warnings"] == [
        "pod ml/train-2: spec.nodeName node1 is not node3, the node of line 1 of its map; "
        "unless node3 is node1's alias label, it gets another node's devices (0,1); "
        "not checked: the webhook may not read nodes"
    ]


def test_metrics_count_every_decision_across_all_workers(server):
    before = {result: decision_count(server, "mutate", result) for result in ("patched", "allowed", "bad_request")}
    # A new connection per request, so the requests spread over both worker
    # processes; the counter must still see all of them.
    for _ in range(10):
        assert post(server, "/mutate", golden("mutate-statefulset-pod")).status_code == 200
        assert post(server, "/mutate", golden("mutate-other-scheduler")).status_code == 200
        assert post(server, "/mutate", b"{").status_code == 400
    assert decision_count(server, "mutate", "patched") == before["patched"] + 10
    assert decision_count(server, "mutate", "allowed") == before["allowed"] + 10
    assert decision_count(server, "mutate", "bad_request") == before["bad_request"] + 10
    text = get(server, "/metrics").text
    assert 'gpu_scheduler_webhook_admission_duration_seconds_count{operation="mutate"}' in text
    assert 'gpu_scheduler_webhook_admission_decisions_total{operation="validate",result="denied"}' in text


# -- TLS -------------------------------------------------------------------


def test_tls_1_2_and_1_3_are_accepted(server, certs):
    expected = serial(certs / "tls.crt")
    assert handshake(server.port, certs / "ca.crt", maximum=ssl.TLSVersion.TLSv1_2) == expected
    assert handshake(server.port, certs / "ca.crt", minimum=ssl.TLSVersion.TLSv1_3) == expected


def negotiated_protocol(port: int, trust_file: Path, offered: list[str]) -> str | None:
    context = ssl.create_default_context(cafile=str(trust_file))
    context.set_alpn_protocols(offered)
    with (
        socket.create_connection((HOST, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        return tls.selected_alpn_protocol()


def test_http2_is_chosen_when_offered_and_http_1_1_still_served(server, certs):
    # kube-apiserver offers h2 first (Go's HTTP/2 transport): over HTTP/2 a worker stopped for a
    # new certificate sends GOAWAY instead of closing a connection under a request
    # (tests/faults/test_rotation_under_admission_load.py). Probes and scrapers speak HTTP/1.1.
    assert negotiated_protocol(server.port, certs / "ca.crt", ["h2", "http/1.1"]) == "h2"
    assert negotiated_protocol(server.port, certs / "ca.crt", ["http/1.1"]) == "http/1.1"
    assert get(server, "/healthz").status_code == 200  # requests: HTTP/1.1 without ALPN


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls_1_1_is_refused_by_the_server(server, certs):
    # SECLEVEL=0 lets this client offer TLS 1.1, so the refusal is the server's
    # alert and not the client's own policy. rustls (granian's TLS) knows no
    # version below 1.2 and answers handshake_failure; OpenSSL protocol_version.
    with pytest.raises(ssl.SSLError) as caught:
        handshake(
            server.port,
            certs / "ca.crt",
            minimum=ssl.TLSVersion.TLSv1,
            maximum=ssl.TLSVersion.TLSv1_1,
            ciphers="DEFAULT:@SECLEVEL=0",
        )
    assert caught.value.reason in ("SSLV3_ALERT_HANDSHAKE_FAILURE", "TLSV1_ALERT_PROTOCOL_VERSION")


def test_server_context_requires_tls_1_2(certs):
    assert build_context(str(certs / "tls.crt"), str(certs / "tls.key")).minimum_version == ssl.TLSVersion.TLSv1_2


class HandshakeLoop:
    """New TLS connections back to back in a thread, recording what each saw."""

    def __init__(self, port, trust_file):
        self.port, self.trust_file = port, trust_file
        self.serials, self.errors = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.serials.append(handshake(self.port, self.trust_file))
            except (OSError, ssl.SSLError) as err:
                self.errors.append(repr(err))

    def __enter__(self):
        self._thread.start()
        return self

    def after_replacing(self, server, workers, count=20, timeout=40.0):
        """The certificates of `count` handshakes made once every one of `workers` has
        exited (read from /proc, not from the log) and two new ones serve. A run of
        handshakes proves nothing alone: the kernel may hand a new worker every
        connection for a while, an old one still serving."""
        deadline = time.monotonic() + timeout
        while True:
            now = child_pids(server.process.pid)
            if len(now) == 2 and not now & workers:
                break
            assert time.monotonic() < deadline, f"workers {now}, old {workers}\n{server.log()}"
            time.sleep(0.05)
        start = len(self.serials)
        while len(self.serials) < start + count:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.02)
        return self.serials[start : start + count]

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)


# granian does a connection's TLS handshake inside the worker's listener, and a worker
# that stops (one is replaced on every new certificate) drops the listener with the
# handshakes it has in progress: their clients read EOF (SSLEOFError) or a reset. A
# CI run saw one (2026-11-29). The loop has one handshake in flight at a time, so each
# old worker can cut one at most; a refused connection, a certificate the client does
# not trust, or a timeout is never one of them.
CUT_HANDSHAKE = ("SSLEOFError(", "ConnectionResetError(")


def assert_no_failure_but_cut_handshakes(errors, workers):
    assert all(error.startswith(CUT_HANDSHAKE) for error in errors), errors
    assert len(errors) <= len(workers), errors


def assert_switched(serials, after, old, new):
    """The old certificate, then the new one, and nothing else. While granian replaces
    its workers one at a time, a handshake may reach an old worker or a new one; once
    the old workers have exited (`after`), only the new certificate is served."""
    assert serials and serials[0] == old
    assert after == [new] * len(after)
    assert set(serials) == {old, new}


def two_bundles(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    make_certs(old)
    make_certs(new)
    # Clients trust both CAs, as during a caBundle rollover.
    trust = tmp_path / "trust.pem"
    trust.write_bytes((old / "ca.crt").read_bytes() + (new / "ca.crt").read_bytes())
    return old, new, trust


def test_certificate_rewritten_in_place_is_served_once_whole(tmp_path, start_webhook):
    old, new, trust = two_bundles(tmp_path)
    live = tmp_path / "live"
    shutil.copytree(old, live)
    server = start_webhook(live / "tls.crt", live / "tls.key", trust, tmp_path)
    # Both workers hold the old pair before it is broken (a worker still starting would read
    # the half-written files, fail and be respawned: seen once under load).
    server.wait_until_workers_serve()
    with HandshakeLoop(server.port, trust) as loop:
        time.sleep(0.3)
        # Written in place, certificate first: for a while the key does not
        # match the certificate, and the server must keep the old pair and its
        # workers. The while lasts past two of the master's checks of the files.
        workers = child_pids(server.process.pid)
        (live / "tls.crt").write_bytes((new / "tls.crt").read_bytes())
        seen = set()
        deadline = time.monotonic() + 2.5 * WATCH_INTERVAL
        while time.monotonic() < deadline:
            seen |= child_pids(server.process.pid)
            time.sleep(0.05)
        # The server's log says why a process came or went (a reload, a worker respawned).
        assert len(workers) == 2 and seen == workers, f"workers {workers}, seen {seen}\n{server.log()}"
        (live / "tls.key").write_bytes((new / "tls.key").read_bytes())
        after = loop.after_replacing(server, workers)
    assert_no_failure_but_cut_handshakes(loop.errors, workers)
    assert_switched(loop.serials, after, serial(old / "tls.crt"), serial(new / "tls.crt"))
    assert "keeping the previous serving certificate" in server.log()
    assert "loaded new serving certificate" in server.log()
    assert server.stop() == 0


def test_secret_volume_symlink_swap_is_followed(tmp_path, start_webhook):
    old, new, trust = two_bundles(tmp_path)
    # The layout the kubelet gives a Secret volume: files behind ..data, a
    # symlink that is swapped atomically to a new timestamped directory.
    volume = tmp_path / "volume"
    volume.mkdir()
    shutil.copytree(old, volume / "..2025_01_01_00_00_00.000000001")
    (volume / "..data").symlink_to("..2025_01_01_00_00_00.000000001")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (volume / name).symlink_to(f"..data/{name}")
    server = start_webhook(volume / "tls.crt", volume / "tls.key", trust, tmp_path)
    with HandshakeLoop(server.port, trust) as loop:
        time.sleep(0.3)
        workers = child_pids(server.process.pid)
        shutil.copytree(new, volume / "..2025_06_01_00_00_00.000000002")
        (volume / "..data_tmp").symlink_to("..2025_06_01_00_00_00.000000002")
        os.rename(volume / "..data_tmp", volume / "..data")
        shutil.rmtree(volume / "..2025_01_01_00_00_00.000000001")
        after = loop.after_replacing(server, workers)
    assert_no_failure_but_cut_handshakes(loop.errors, workers)
    assert_switched(loop.serials, after, serial(old / "tls.crt"), serial(new / "tls.crt"))
    assert server.stop() == 0


def test_readiness_fails_while_the_served_certificate_is_expired(tmp_path, start_webhook):
    expired = generate_bundle(
        ips=[HOST],
        days=1,
        now=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3),
    )
    write_bundle(tmp_path / "tls", expired)
    server = start_webhook(
        tmp_path / "tls" / "tls.crt",
        tmp_path / "tls" / "tls.key",
        tmp_path / "tls" / "ca.crt",
        tmp_path,
        wait=False,
    )
    # No client accepts an expired certificate; this one looks anyway.
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + 20
    while True:
        connection = http.client.HTTPSConnection(HOST, server.port, timeout=5, context=unverified)
        try:
            connection.request("GET", "/readyz")
            response = connection.getresponse()
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
        finally:
            connection.close()
    assert response.status == 503
    assert "has expired: /readyz fails until it is renewed" in server.log()


# -- process lifecycle -----------------------------------------------------


def test_sigterm_stops_cleanly_and_removes_the_metrics_directory(certs, tmp_path, start_webhook):
    server = start_webhook(certs / "tls.crt", certs / "tls.key", certs / "ca.crt", tmp_path)
    assert post(server, "/mutate", golden("mutate-statefulset-pod")).status_code == 200
    metrics_dirs = list(server.tmp_dir.glob("gpu-scheduler-webhook-metrics-*"))
    assert len(metrics_dirs) == 1 and any(metrics_dirs[0].iterdir())
    assert server.stop() == 0
    assert list(server.tmp_dir.iterdir()) == []
    # gevent patched late leaves MonkeyPatchWarning at each worker's start, and a log
    # writer thread started before the patch dies with a traceback at each worker's exit.
    log = server.log()
    for sign in ("Traceback", "Exception ignored", "Warning:"):
        assert sign not in log, log


def test_sigterm_while_a_worker_is_still_starting_stops_at_once(certs, tmp_path, start_webhook):
    # Stopped as soon as the first worker answers, while the second may still be
    # starting: it must not lose the signal and be killed after granian's timeout.
    server = start_webhook(certs / "tls.crt", certs / "tls.key", certs / "ca.crt", tmp_path)
    started = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - started < 5, server.log()
    assert "refused to gracefully stop" not in server.log()


def test_missing_certificate_stops_the_start_with_a_hint(tmp_path):
    result = subprocess.run(
        [
            CLI,
            "webhook",
            "--tls-cert-file",
            str(tmp_path / "nope.crt"),
            "--tls-private-key-file",
            str(tmp_path / "nope.key"),
            "--bind",
            HOST,
            "--port",
            "1",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "cannot load certificate" in result.stderr
    assert "gpu-scheduler certs" in result.stderr
    assert "Traceback" not in result.stderr


def cancelled_http2_requests(port: int, trust_file: Path, body: bytes, count: int) -> None:
    """`count` POSTs to /mutate over HTTP/2, each reset by the client (RST_STREAM CANCEL) after
    half its body, as kube-apiserver resets a webhook call it gives up on (its timeout, a
    create whose client went away)."""
    context = ssl.create_default_context(cafile=str(trust_file))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((HOST, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        assert tls.selected_alpn_protocol() == "h2"
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        connection.initiate_connection()
        tls.sendall(connection.data_to_send())
        for _ in range(count):
            stream = connection.get_next_available_stream_id()
            headers = [
                (":method", "POST"),
                (":scheme", "https"),
                (":authority", f"{HOST}:{port}"),
                (":path", "/mutate"),
                ("content-type", "application/json"),
                ("content-length", str(len(body))),
            ]
            connection.send_headers(stream, headers)
            connection.send_data(stream, body[: len(body) // 2])
            tls.sendall(connection.data_to_send())
            time.sleep(0.02)  # the request reaches a Python thread, which waits for the rest
            connection.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
            tls.sendall(connection.data_to_send())


def process_cpu_seconds(pids) -> float:
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def test_requests_reset_by_their_client_leave_the_webhook_idle(certs, start_webhook, tmp_path):
    # Bug 6 (docs/logs/faults.md): werkzeug read the body in pieces, and granian's piecewise read of
    # a request its client had reset kept a Rust thread spinning for minutes: 0.9-1.2 cores
    # busy after 300 requests cancelled by vegeta (3 runs of 3), 1.6 cores after an overload.
    webhook = start_webhook(certs / "tls.crt", certs / "tls.key", certs / "ca.crt", tmp_path)
    body = json.dumps(golden("mutate-statefulset-pod")).encode()
    cancelled_http2_requests(webhook.port, certs / "ca.crt", body, count=20)
    time.sleep(1)  # the resets reach the workers
    pids = [webhook.process.pid, *child_pids(webhook.process.pid)]
    before, started = process_cpu_seconds(pids), time.monotonic()
    time.sleep(3)
    cores = (process_cpu_seconds(pids) - before) / (time.monotonic() - started)
    assert cores < 0.1, f"the webhook kept {cores:.2f} cores busy after its requests were reset"
    assert post(webhook, "/mutate", golden("mutate-statefulset-pod")).status_code == 200

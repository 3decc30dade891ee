"""Webhook certificates that expire, renewed by the chart's CronJob, on the real local control plane.

Set-up, as a release runs it, minus the kubelet:
  - the CronJob's ServiceAccount and RBAC, rendered by `helm template` (its standing Role,
    ClusterRole and bindings), applied into a release namespace of this test;
  - the Secret <release>-webhook-tls holding a certificate about to expire, or expired;
  - `gpu-scheduler webhook` on 127.0.0.1 serving that Secret through a SecretVolume (the
    kubelet's volume layout, refreshed every 0.2 s instead of every minute);
  - the chart's webhook configurations named like the release (the names its ClusterRole
    allows), failurePolicy Fail, pointed at that webhook, with the Secret's CA as caBundle;
  - the CronJob's container command, run on this host as the CronJob's ServiceAccount (a
    token of it). Its one deviation: `--ip 127.0.0.1` added, since the API server here calls
    the webhook at that address (the certificate carries it from the start, so only its
    expiry makes it due).
Oracles that do not trust our logs: the API server's own admission of pods through the
webhook (failurePolicy Fail: any handshake it cannot verify refuses the pod); new TLS
connections from this test, each verified against the caBundle stored in the API server at
that moment; and the order in which etcd stored the caBundle and the Secret (watch events'
resourceVersions: on etcd3 storage these are etcd's global revision, so they order writes
to different objects).
"""

from __future__ import annotations

import base64
import datetime
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from e2e import webhook_registration
from e2e.charts import KUBECTL, SCHEDULER_CHART, helm_template
from e2e.cluster import admission_problem, delete_cluster_rbac, kubectl_apply, service_account_kubeconfig
from e2e.components import GPU_SCHEDULER, Certs, WebhookProcess
from e2e.isolation import delete_namespace
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod
from gpu_scheduler.certs import generate_bundle, service_dns_names
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families
from urllib3.exceptions import ProtocolError

from .background import Background
from .conftest import track, untrack
from .secret_volume import SecretVolume

pytestmark = pytest.mark.faults

HOST = "127.0.0.1"
YEAR = datetime.timedelta(days=365)
REMAINING = "gpu_scheduler_webhook_certificate_remaining_seconds"


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    probe_namespace: str  # served by this test's webhook only
    cronjob: dict
    rbac: tuple[dict, ...]

    @property
    def secret(self) -> str:
        return f"{self.name}-webhook-tls"

    @property
    def service(self) -> str:
        return f"{self.name}-webhook"

    @property
    def account(self) -> str:
        return self.cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"]

    def command(self) -> list[str]:
        (container,) = self.cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        return [str(GPU_SCHEDULER), *container["args"], "--ip", HOST]


@pytest.fixture
def release(api_client, kubectl_path, kubeconfig):
    suffix = uuid.uuid4().hex[:6]
    name = f"gpu-scheduler-renewal-{suffix}"
    namespace, probe = f"gs-renewal-{suffix}", f"renewal-probe-{suffix}"
    # The CronJob's command runs on this host: its image (any registry) is never pulled.
    documents = helm_template(name, SCHEDULER_CHART, namespace)
    (cronjob,) = [d for d in documents if d["kind"] == "CronJob"]
    account = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"]
    rbac = tuple(
        d
        for d in documents
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
        and d["metadata"]["name"] == account
    )
    assert sorted(d["kind"] for d in rbac) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": namespace, "labels": {"gpu-scheduler-test": "true"}}})
    core.create_namespace(
        {"metadata": {"name": probe, "labels": {"gpu-scheduler-test": "true", "gpu-scheduler-renewal": suffix}}}
    )
    kubectl_apply(kubectl_path, kubeconfig, rbac)
    yield Release(name, namespace, probe, cronjob, rbac)
    webhook_registration.delete(api_client, name)
    delete_cluster_rbac(api_client, rbac)
    delete_namespace(api_client, probe)
    delete_namespace(api_client, namespace)


@pytest.fixture
def kubectl_path():
    assert KUBECTL.exists(), "run `make tools`"
    return KUBECTL


def store_secret(api_client, release: Release, bundle) -> None:
    data = {"tls.crt": bundle.tls_cert_pem, "tls.key": bundle.tls_key_pem, "ca.crt": bundle.ca_cert_pem}
    client.CoreV1Api(api_client).create_namespaced_secret(
        release.namespace,
        {
            "metadata": {"name": release.secret},
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        },
    )


def bundle_issued(release: Release, issued: datetime.datetime, days: int):
    """A certificate for exactly the names the CronJob asks for (the Service's, and 127.0.0.1)."""
    return generate_bundle(release.service, release.namespace, ips=[HOST], days=days, now=issued)


def register(api_client, release: Release, port: int, ca_pem: bytes) -> None:
    configurations = webhook_registration.render(
        release.name,
        f"https://{HOST}:{port}",
        base64.b64encode(ca_pem).decode(),
        namespace_label=("gpu-scheduler-renewal", release.name.rsplit("-", 1)[1]),
    )
    assert {c["metadata"]["name"] for c in configurations} == {release.name}  # what the ClusterRole names
    webhook_registration.apply(api_client, configurations)


def probe_pod(index: int) -> dict:
    # Created on its line's node: the webhook writes its devices, which a dry run then shows.
    return bare_pod(f"renewal-probe-{index}", f"{index}=node1:0\n", node_name="node1")


def admit(api_client, namespace: str, index: int = 0) -> str | None:
    """None when a dry-run create of our pod was admitted with CUDA_VISIBLE_DEVICES=0; else why not."""
    return admission_problem(api_client, namespace, probe_pod(index))


def stored_ca_bundle(api_client, name: str) -> bytes:
    config = client.AdmissionregistrationV1Api(api_client).read_mutating_webhook_configuration(name)
    (ca,) = {w.client_config.ca_bundle for w in config.webhooks}
    return base64.b64decode(ca)


def certificates(pem_bundle: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, normalized, in order."""
    return [c.public_bytes(Encoding.PEM) for c in x509.load_pem_x509_certificates(pem_bundle)]


@dataclass
class Traffic(Background):
    """Admission through the API server and new TLS connections, in background threads, until stopped."""

    api_client: object
    release: Release
    port: int
    admissions: int = 0
    admission_errors: list[str] = field(default_factory=list)
    handshakes: int = 0
    handshake_errors: list[str] = field(default_factory=list)
    serials: list[int] = field(default_factory=list)  # served certificate per handshake, in order

    def loops(self):
        return [self._admit, self._handshake]

    def _admit(self) -> None:
        while not self._stop.wait(0.1):
            self.admissions += 1
            problem = admit(self.api_client, self.release.probe_namespace, self.admissions % 1000)
            if problem:
                self.admission_errors.append(f"{time.monotonic():.2f}: {problem}")

    def _handshake(self) -> None:
        # Each a new connection, verified against the caBundle the API server holds right then.
        while not self._stop.wait(0.05):
            self.handshakes += 1
            try:
                trusted = stored_ca_bundle(self.api_client, self.release.name)
                with tempfile.NamedTemporaryFile(suffix=".pem") as bundle:
                    bundle.write(trusted)
                    bundle.flush()
                    context = ssl.create_default_context(cafile=bundle.name)
                with (
                    socket.create_connection((HOST, self.port), timeout=5) as raw,
                    context.wrap_socket(raw, server_hostname=HOST) as tls,
                ):
                    served = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
                self.serials.append(served.serial_number)
            except (OSError, ssl.SSLError, ApiException) as err:
                self.handshake_errors.append(f"{time.monotonic():.2f}: {type(err).__name__}: {err}")


class Recorder:
    """Every stored version of the webhook configuration and the Secret, from watches."""

    def __init__(self, api_client, release: Release) -> None:
        self.events: list[tuple[int, str, object]] = []  # (resourceVersion, kind, what it held)
        self._watches = []
        self._stopping = False
        admission, core = client.AdmissionregistrationV1Api(api_client), client.CoreV1Api(api_client)
        self._targets = [
            ("config", admission.list_mutating_webhook_configuration, {}, f"metadata.name={release.name}"),
            (
                "secret",
                core.list_namespaced_secret,
                {"namespace": release.namespace},
                f"metadata.name={release.secret}",
            ),
        ]

    def __enter__(self) -> Recorder:
        self._threads = []
        for kind, list_call, kwargs, selector in self._targets:
            start = list_call(field_selector=selector, **kwargs).metadata.resource_version
            stream = watch.Watch()
            self._watches.append(stream)
            thread = threading.Thread(target=self._follow, args=(stream, kind, list_call, kwargs, selector, start))
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        return self

    def _follow(self, stream, kind, list_call, kwargs, selector, start) -> None:
        try:
            for event in stream.stream(
                list_call, field_selector=selector, resource_version=start, timeout_seconds=120, **kwargs
            ):
                obj = event["object"]
                if kind == "config":
                    held = {base64.b64decode(w.client_config.ca_bundle or "") for w in obj.webhooks}
                else:
                    held = x509.load_pem_x509_certificate(base64.b64decode(obj.data["tls.crt"])).serial_number
                self.events.append((int(obj.metadata.resource_version), kind, held))
        except ProtocolError:
            if not self._stopping:
                raise  # a watch cut before the test stopped it: its events would be missing

    def __exit__(self, *_exc) -> None:
        time.sleep(1)  # the last events still on their way
        self._stopping = True
        for stream in self._watches:
            stream.stop()


def start_webhook(volume: SecretVolume, directory: Path, ca_file: Path) -> WebhookProcess:
    certs = Certs(ca_file, volume.file("tls.crt"), volume.file("tls.key"), "")
    return track(WebhookProcess(certs, directory / "webhook.log"))


def webhook_get(webhook: WebhookProcess, path: str) -> requests.Response:
    # Served before and after a renewal: the test looks at what it says, whoever signed it.
    return requests.get(f"{webhook.base_url}{path}", verify=False, timeout=5)  # noqa: S501


def remaining_seconds(webhook: WebhookProcess) -> float:
    text = webhook_get(webhook, "/metrics").text
    (value,) = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == REMAINING]
    return value


def renew_as_the_cronjob(release: Release, kubeconfig: str, directory: Path):
    identity = service_account_kubeconfig(KUBECTL, kubeconfig, release.namespace, release.account, directory / "kc")
    started = time.monotonic()
    result = subprocess.run(
        release.command(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KUBECONFIG": str(identity)},
    )
    return result, time.monotonic() - started


def served_serial(port: int) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((HOST, port), timeout=5) as raw, context.wrap_socket(raw) as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_a_certificate_near_expiry_is_renewed_without_a_failed_admission(api_client, kubeconfig, release, tmp_path):
    now = datetime.datetime.now(datetime.UTC)
    # Ten minutes left of a one-day certificate: long past the renewal point (a third left).
    old = bundle_issued(release, now - datetime.timedelta(hours=23, minutes=50), days=1)
    store_secret(api_client, release, old)
    (tmp_path / "ca.crt").write_bytes(old.ca_cert_pem)
    volume = SecretVolume(api_client, release.namespace, release.secret, tmp_path / "volume")
    with volume:
        webhook = start_webhook(volume, tmp_path, tmp_path / "ca.crt")
        try:
            webhook.start_and_wait()
            register(api_client, release, webhook.port, old.ca_cert_pem)
            wait_for("the API server to call the webhook", lambda: _admitted(api_client, release), 30)
            before = remaining_seconds(webhook)
            old_serial = x509.load_pem_x509_certificate(old.tls_cert_pem).serial_number

            old_workers = webhook.workers()
            with Recorder(api_client, release) as recorder, Traffic(api_client, release, webhook.port) as traffic:
                time.sleep(1)
                result, seconds = renew_as_the_cronjob(release, kubeconfig, tmp_path)
                assert result.returncode == 0, result.stderr
                new_serial = wait_for(
                    "the webhook to serve the renewed certificate", lambda: _new(webhook.port, old_serial), 30
                )
                webhook.wait_workers_replaced(old_workers)
                replaced = len(traffic.serials)
                time.sleep(2)  # traffic on the renewed certificate too

            after = remaining_seconds(webhook)
            readyz = webhook_get(webhook, "/readyz")
        finally:
            webhook.stop()
            untrack(webhook)
    secret = client.CoreV1Api(api_client).read_namespaced_secret(release.secret, release.namespace)
    new_cert = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    new_ca = base64.b64decode(secret.data["ca.crt"])
    print(
        f"\nrenewal took {seconds:.1f} s; {traffic.admissions} admissions and {traffic.handshakes} new "
        f"connections meanwhile; time left {before:.0f} s -> {after:.0f} s"
    )

    assert f"Secret {release.namespace}/{release.secret} replaced because it expires soon" in result.stderr
    assert "PRIVATE KEY" not in result.stdout + result.stderr
    assert traffic.admission_errors == [] and traffic.admissions > 20
    # granian handshakes inside a worker's listener and drops the handshakes in progress
    # with it when the worker stops (docs/faults.md): one in flight at a time here, so one
    # cut per old worker at most, read as EOF or a reset. Nothing else may fail.
    cut = [e for e in traffic.handshake_errors if e.split(": ")[1] in ("SSLEOFError", "ConnectionResetError")]
    assert cut == traffic.handshake_errors and len(cut) <= len(old_workers), traffic.handshake_errors
    assert traffic.handshakes > 20
    assert volume.errors == [] and len(volume.swaps) == 2
    # Served: the old certificate, then the new one. While the workers are replaced one at
    # a time a connection may get either (both CAs are trusted by then, as checked per
    # handshake); once the old workers have exited, only the new one.
    assert traffic.serials[0] == old_serial and set(traffic.serials) == {old_serial, new_serial}
    assert len(traffic.serials) > replaced and set(traffic.serials[replaced:]) == {new_serial}
    # etcd stored a caBundle trusting the new CA before the Secret holding its certificate.
    trusted_new = [rv for rv, kind, held in recorder.events if kind == "config" and all(new_ca in b for b in held)]
    secret_new = [rv for rv, kind, held in recorder.events if kind == "secret" and held == new_serial]
    assert trusted_new and secret_new and min(trusted_new) < min(secret_new), recorder.events
    # Afterwards: the new CA first, the old one still trusted (pods may serve it for a while).
    assert certificates(stored_ca_bundle(api_client, release.name)) == certificates(new_ca + old.ca_cert_pem)
    # The renewed certificate: same names, a year, from the new CA; the webhook says so.
    assert new_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    ) == service_dns_names(release.service, release.namespace)
    assert new_cert.not_valid_after_utc - new_cert.not_valid_before_utc == YEAR + datetime.timedelta(minutes=5)
    new_cert.verify_directly_issued_by(x509.load_pem_x509_certificate(new_ca))
    assert before < 600 and after > YEAR.total_seconds() - 600
    assert readyz.status_code == 200 and f"valid until {new_cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}" in readyz.text

    # The next day's run changes nothing.
    version = secret.metadata.resource_version
    again, _ = renew_as_the_cronjob(release, kubeconfig, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "kept" in again.stderr
    assert (
        client.CoreV1Api(api_client).read_namespaced_secret(release.secret, release.namespace).metadata.resource_version
        == version
    )


def _admitted(api_client, release: Release) -> None:
    problem = admit(api_client, release.probe_namespace)
    if problem:
        raise NotYet(problem)


def _new(port: int, old_serial: int) -> int:
    serial = served_serial(port)
    if serial == old_serial:
        raise NotYet("still the old certificate")
    return serial


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_an_expired_certificate_refuses_our_pods_until_the_cronjob_renews_it(api_client, kubeconfig, release, tmp_path):
    now = datetime.datetime.now(datetime.UTC)
    expired = bundle_issued(release, now - datetime.timedelta(days=3), days=1)
    store_secret(api_client, release, expired)
    (tmp_path / "ca.crt").write_bytes(expired.ca_cert_pem)
    with SecretVolume(api_client, release.namespace, release.secret, tmp_path / "volume") as volume:
        webhook = start_webhook(volume, tmp_path, tmp_path / "ca.crt")
        try:
            webhook.start()
            wait_for("the webhook to listen", lambda: _listening(webhook), 30)
            register(api_client, release, webhook.port, expired.ca_cert_pem)
            refused = wait_for("the API server to call the webhook", lambda: _refused(api_client, release), 30)
            not_ready = webhook_get(webhook, "/readyz")
            before = remaining_seconds(webhook)
            old_workers = webhook.workers()

            result, _ = renew_as_the_cronjob(release, kubeconfig, tmp_path)
            assert result.returncode == 0, result.stderr
            recovered = time.monotonic()
            wait_for("our pods to be admitted again", lambda: _admitted(api_client, release), 30)
            print(f"\nadmitted again {time.monotonic() - recovered:.1f} s after the CronJob's command ended")
            # Each worker reports the certificate it serves: ask once both are new.
            webhook.wait_workers_replaced(old_workers)
            ready = webhook_get(webhook, "/readyz")
            after = remaining_seconds(webhook)
        finally:
            webhook.stop()
            untrack(webhook)

    assert "certificate has expired" in refused, refused
    assert not_ready.status_code == 503 and "expired at" in not_ready.text
    assert -3 * 86400 < before < -86400
    assert "replaced because it expires soon" in result.stderr
    assert ready.status_code == 200 and after > YEAR.total_seconds() - 600


def _listening(webhook: WebhookProcess) -> None:
    try:
        webhook_get(webhook, "/healthz")
    except requests.ConnectionError as err:
        raise NotYet(str(err)) from None


def _refused(api_client, release: Release) -> str:
    problem = admit(api_client, release.probe_namespace)
    if problem is None or "refused" not in problem:
        raise NotYet(f"not refused yet ({problem})")
    return problem

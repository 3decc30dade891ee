"""What the certificate renewal test on KinD needs: an ageing certificate, the serials the webhook
pods serve, and a stream of admissions that must all pass while the certificate changes.

The renewal itself is the product's, for real: the chart's CronJob run as a Job, `gpu-scheduler
certs` replacing the Secret after trusting its new CA, the kubelet refreshing the Secret volume
of each webhook pod, the webhook reloading it. Only the ageing is the test's: a certificate
that still has most of a year to go would be kept (a third of its lifetime must be left), so
the test first swaps in one that expires tomorrow, signed by a CA of its own that the webhook
configurations are taught to trust first, in the order the product itself uses.
"""

from __future__ import annotations

import base64
import datetime
import subprocess
import threading
import time
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from e2e.cluster import admission_problem, node_aliases, served_certificate
from e2e.workloads import bare_pod
from gpu_scheduler.certs.bundle import CertBundle
from gpu_scheduler.certs.cluster import bundle_from_secret
from gpu_scheduler.certs.files import CA_FILE, CERT_FILE, KEY_FILE
from kubernetes import config
from urllib3.exceptions import HTTPError

NAMESPACE = "gpu-scheduler-system"
RELEASE = "gpu-scheduler"
SECRET = f"{RELEASE}-webhook-tls"
CRONJOB = f"{RELEASE}-certs-renewal"
WEBHOOK_SERVICE = f"{RELEASE}-webhook"
CONFIGURATIONS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def serial_of(bundle: CertBundle) -> int:
    return x509.load_pem_x509_certificate(bundle.tls_cert_pem).serial_number


def _key_pem(key) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


def expiring_bundle(like_cert_pem: bytes, days_left: float = 1.0, lifetime_days: float = 30.0) -> CertBundle:
    """A CA of the test's and a serving certificate for the same names as `like_cert_pem`,
    valid for `lifetime_days` of which `days_left` are left: less than a third, so the
    renewal must replace it."""
    names = x509.load_pem_x509_certificate(like_cert_pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kind renewal test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now() - datetime.timedelta(days=lifetime_days))
        .not_valid_after(now() + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    end = now() + datetime.timedelta(days=days_left)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, WEBHOOK_SERVICE)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(end - datetime.timedelta(days=lifetime_days))
        .not_valid_after(end)
        .add_extension(names.value, critical=names.critical)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return CertBundle(
        ca.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)
    )


def secret_bundle(secret: dict) -> CertBundle:
    """What the Secret holds, read as `gpu-scheduler certs` reads it."""
    bundle = bundle_from_secret(secret)
    assert bundle is not None, f"Secret {SECRET} lacks ca.crt, tls.crt or tls.key"
    return bundle


def secret_with(secret: dict, bundle: CertBundle) -> dict:
    """The Secret object with its data replaced by `bundle` (resourceVersion kept: a conflict fails)."""
    pems = {CA_FILE: bundle.ca_cert_pem, CERT_FILE: bundle.tls_cert_pem, KEY_FILE: bundle.tls_key_pem}
    return {**secret, "data": {key: base64.b64encode(pem).decode() for key, pem in pems.items()}}


def ca_bundles(configurations: list[dict]) -> list[list[x509.Certificate]]:
    """The CAs each webhook of these configurations trusts."""
    return [
        x509.load_pem_x509_certificates(base64.b64decode(webhook["clientConfig"]["caBundle"]))
        for configuration in configurations
        for webhook in configuration["webhooks"]
    ]


def trust_patch(configuration: dict, extra_ca_pem: bytes) -> list[dict]:
    """A JSON patch adding a CA to every webhook's caBundle of one configuration."""
    ops = []
    for i, webhook in enumerate(configuration["webhooks"]):
        current = base64.b64decode(webhook["clientConfig"]["caBundle"])
        value = base64.b64encode(current.rstrip(b"\n") + b"\n" + extra_ca_pem).decode()
        ops.append({"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value})
    return ops


def served_serial(kubectl: list[str], pod: str, port: int, ca_pem: bytes) -> int:
    """The serial of the certificate one webhook pod serves (through `kubectl port-forward`),
    verified against `ca_pem` for the name the API server uses."""
    hostname = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
    served = served_certificate(kubectl, NAMESPACE, f"pod/{pod}", port, ca_pem, hostname)
    return x509.load_der_x509_certificate(served).serial_number


@dataclass
class Admissions:
    """Server-side dry-run creates of a pod of gpu-scheduler, one every INTERVAL, in the
    background: each goes through the API server's call to our webhook over TLS (failurePolicy
    Fail), so a handshake that fails, or a pod without its CUDA_VISIBLE_DEVICES, is a failure.
    The pod is created on the node its map names (spec.nodeName): a pod to be bound needs no
    webhook, but such a pod goes to the webhook."""

    kubeconfig: str
    namespace: str
    interval: float = 0.25
    passed: int = 0
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="admissions", daemon=True)

    def start(self) -> Admissions:
        self._thread.start()
        return self

    def stop(self) -> Admissions:
        self._stop.set()
        self._thread.join(timeout=30)
        return self

    def _loop(self) -> None:
        api = config.new_client_from_config(config_file=self.kubeconfig)
        pod = bare_pod("renewal-probe-0", "0=node1:0\n")
        pod["spec"]["nodeName"] = next(name for name, alias in node_aliases(api).items() if alias == "node1")
        try:
            while not self._stop.is_set():
                at = time.strftime("%H:%M:%S")
                try:
                    problem = admission_problem(api, self.namespace, pod, _request_timeout=15)
                except (HTTPError, OSError) as err:
                    problem = f"{err.__class__.__name__}: {err}"
                if problem:
                    self.failures.append(f"{at} {problem}")
                else:
                    self.passed += 1
                self._stop.wait(self.interval)
        finally:
            api.close()


def job_log(kubectl: list[str], job: str) -> str:
    found = subprocess.run(
        [*kubectl, "-n", NAMESPACE, "logs", f"job/{job}"], capture_output=True, text=True, timeout=60, check=False
    )
    return found.stdout + found.stderr

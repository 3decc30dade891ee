"""The KinD renewal test's ageing certificate, judged by the product's own rule (no cluster).

The renewal test on KinD only proves a renewal if `gpu-scheduler certs` replaces the certificate
the test swapped in because it expires soon, not because of something else about it (its
names, its CA): reuse_problem, which the renewal Job runs, must say exactly that.
"""

from __future__ import annotations

from cryptography import x509
from e2e.cluster import status_message
from gpu_scheduler.certs.bundle import CertBundle, certificate_sans, generate_bundle, reuse_problem

from . import renewal

SERVICE, NAMESPACE = renewal.WEBHOOK_SERVICE, renewal.NAMESPACE


def judged(bundle: CertBundle) -> str | None:
    names, ips = certificate_sans(x509.load_pem_x509_certificate(bundle.tls_cert_pem))
    return reuse_problem(bundle, names, ips)


def test_the_ageing_certificate_is_renewed_only_because_it_expires_soon():
    installed = generate_bundle(SERVICE, NAMESPACE)
    ageing = renewal.expiring_bundle(installed.tls_cert_pem)

    assert (judged(ageing) or "").startswith("it expires soon"), judged(ageing)
    names = certificate_sans(x509.load_pem_x509_certificate(ageing.tls_cert_pem))
    assert names == certificate_sans(x509.load_pem_x509_certificate(installed.tls_cert_pem))


def test_the_same_certificate_with_most_of_its_lifetime_left_would_be_kept():
    installed = generate_bundle(SERVICE, NAMESPACE)
    young = renewal.expiring_bundle(installed.tls_cert_pem, days_left=25, lifetime_days=30)

    assert judged(young) is None


# A refused admission's Status as kube-apiserver 1.34 answered it (recorded 2026-11-29 from
# tests/faults/test_rotation_under_admission_load.py against an HTTP/1.1-only webhook). The KinD
# renewal test kept the first 300 characters of such a body, which cut the webhook's error off
# at "write tcp 172.19.0.6:36978-" in a fresh-clone CI run the same day. kube-apiserver 1.37.2
# answers a failed webhook call in the same shape (checked 2026-12-06 with a webhook at a closed
# port: kind Status, reason InternalError, the message again in details.causes, code 500).
REFUSED = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error occurred: '
    'failed calling webhook \\"pods.mutate.gpu-scheduler\\": failed to call webhook: Post '
    '\\"https://127.0.0.1:39547/mutate?timeout=5s\\": write tcp 127.0.0.1:39036-\\u003e127.0.0.1:39547: '
    'write: broken pipe","reason":"InternalError","details":{"causes":[{"message":"failed calling webhook '
    '\\"pods.mutate.gpu-scheduler\\": failed to call webhook: Post \\"https://127.0.0.1:39547/mutate?timeout=5s'
    '\\": write tcp 127.0.0.1:39036-\\u003e127.0.0.1:39547: write: broken pipe"}]},"code":500}'
)


def test_a_refused_admission_is_reported_with_its_whole_message():
    message = status_message(REFUSED)

    assert message.startswith("Internal error occurred: failed calling webhook")
    assert message.endswith("write tcp 127.0.0.1:39036->127.0.0.1:39547: write: broken pipe")
    assert status_message("upstream connect error") == "upstream connect error"
    assert status_message(None) == "None"

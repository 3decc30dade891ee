"""The API client's own TLS (kube/direct.py) against the real kube-apiserver: it honours the
kubeconfig's CA, client certificate, server name and verification switch as urllib3 did, and a
server it must not trust is an error that says so, sent once."""

from __future__ import annotations

import datetime
import time

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from gpu_scheduler.kube.client import ApiError, KubeClient, load_configuration
from prerequisites import missing

pytestmark = pytest.mark.cluster

WHO_AM_I = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def who_am_i(client: KubeClient) -> dict:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    return client.call("POST", WHO_AM_I, body=review)["status"]["userInfo"]


def direct_client(kubeconfig: str, **settings) -> KubeClient:
    configuration = load_configuration(kubeconfig)
    if not configuration.host.startswith("https://"):
        # The local control plane (scripts/local-up.sh), which CI's cluster tests use, serves
        # TLS only; another kubeconfig may reach its apiserver over plain HTTP (kubectl proxy).
        missing(
            f"{kubeconfig} reaches its apiserver at {configuration.host}, not over TLS: these tests need a "
            "kubeconfig whose server is https:// (the local control plane's: make local-up)"
        )
    for name, value in settings.items():
        setattr(configuration, name, value)
    client = KubeClient(configuration)
    assert client._direct is not None, "these settings should not need urllib3's pool"
    return client


def a_ca_that_signed_nothing(tmp_path) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "a CA that signed nothing")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "ca.crt"
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return str(path)


def test_the_kubeconfigs_identity_is_the_one_the_apiserver_sees(kubeconfig, api_client):
    from kubernetes import client

    expected = client.AuthenticationV1Api(api_client).create_self_subject_review({}).status.user_info.username
    assert who_am_i(direct_client(kubeconfig))["username"] == expected


def test_a_server_certificate_the_ca_did_not_sign_is_refused_at_once(kubeconfig, tmp_path):
    client = direct_client(kubeconfig, ssl_ca_cert=a_ca_that_signed_nothing(tmp_path), ca_cert_data=None)
    started = time.monotonic()
    with pytest.raises(ApiError) as raised:
        who_am_i(client)
    assert raised.value.status == 0
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    assert time.monotonic() - started < 2, "a TLS failure is not a reason to try again"


def test_verification_turned_off_trusts_any_server_certificate(kubeconfig, tmp_path):
    client = direct_client(
        kubeconfig, ssl_ca_cert=a_ca_that_signed_nothing(tmp_path), ca_cert_data=None, verify_ssl=False
    )
    assert who_am_i(client)["username"]


def test_the_server_name_is_checked_against_tls_server_name_when_one_is_set(kubeconfig):
    # "kubernetes" is in every kube-apiserver certificate's names; the host dialled stays the same.
    assert who_am_i(direct_client(kubeconfig, tls_server_name="kubernetes"))["username"]
    with pytest.raises(ApiError) as raised:
        who_am_i(direct_client(kubeconfig, tls_server_name="not-the-apiserver.invalid"))
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    assert "not-the-apiserver.invalid" in str(raised.value)


@pytest.mark.compat
def test_our_http_reads_the_apiservers_answers_as_urllib3_does_with_a_length_and_chunked(kubeconfig, monkeypatch):
    # Recorded from kube-apiserver (v1.34, 2026-11-27; v1.37.2 the same): an answer it has whole under about 2 KB
    # comes with Content-Length, a longer one (a list of nodes, 15 KB) in chunked coding.
    from gpu_scheduler.kube import direct

    ours = direct_client(kubeconfig)
    theirs = KubeClient(load_configuration(kubeconfig), direct=False)
    chunked = []
    decode = direct._Answer.chunked
    monkeypatch.setattr(direct._Answer, "chunked", lambda self: chunked.append(1) or decode(self))
    short = ours.request("GET", "/api")
    assert not chunked
    assert short == theirs.request("GET", "/api")
    # Long enough to be chunked on any cluster: the apiserver's own discovery of every group.
    long = ours.request("GET", "/apis")
    assert chunked, "kube-apiserver no longer sends a long answer chunked: see kube/direct.py"
    assert long[0] == 200
    assert orjson.loads(long[1]) == orjson.loads(theirs.request("GET", "/apis")[1])

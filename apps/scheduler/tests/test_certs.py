"""The webhook's certificates: what `generate_bundle` makes, when a pair may be kept,
and the real `gpu-scheduler certs --out-dir` command."""

import base64
import datetime
import ipaddress
import os
import stat
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID
from gpu_scheduler.certs import (
    CertBundle,
    generate_bundle,
    reuse_problem,
    subject_alt_names,
)
from webhook_server import CLI

NOW = datetime.datetime(2025, 3, 1, tzinfo=datetime.UTC)
SERVICE_NAMES = [
    "gpu-scheduler-webhook",
    "gpu-scheduler-webhook.gpu-system",
    "gpu-scheduler-webhook.gpu-system.svc",
    "gpu-scheduler-webhook.gpu-system.svc.cluster.local",
]


def certificate(pem):
    return x509.load_pem_x509_certificate(pem)


@pytest.fixture(scope="module")
def bundle():
    return generate_bundle(
        "gpu-scheduler-webhook",
        "gpu-system",
        dns=["webhook.example.com"],
        ips=["127.0.0.1", "::1"],
        now=NOW,
    )


def test_serving_certificate_names_the_service_extra_names_and_ips(bundle):
    sans = certificate(bundle.tls_cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        *SERVICE_NAMES,
        "webhook.example.com",
    ]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]


def test_serving_certificate_is_for_server_auth_and_signed_by_the_ca(bundle):
    ca, cert = certificate(bundle.ca_cert_pem), certificate(bundle.tls_cert_pem)
    cert.verify_directly_issued_by(ca)
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(days=365, minutes=5)


def test_ca_can_sign_certificates_and_lives_ten_years(bundle):
    ca = certificate(bundle.ca_cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    assert ca.not_valid_after_utc - NOW == datetime.timedelta(days=3650)


def test_keys_are_ecdsa_p256(bundle):
    key = load_pem_private_key(bundle.tls_key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
    assert isinstance(certificate(bundle.ca_cert_pem).public_key().curve, ec.SECP256R1)


def test_bundle_repr_never_shows_the_key(bundle):
    assert "PRIVATE" not in repr(bundle)
    assert bundle.tls_key_pem.decode() not in repr(bundle)


def test_days_sets_the_serving_certificate_lifetime():
    short = generate_bundle(ips=["10.0.0.1"], days=7, now=NOW)
    assert certificate(short.tls_cert_pem).not_valid_after_utc == NOW + datetime.timedelta(days=7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a name"),
        ({"service": "svc"}, "needs its namespace"),
        ({"ips": ["300.1.1.1"]}, "'300.1.1.1' is not an IPv4 or IPv6 address"),
        ({"ips": ["127.0.0.1"], "days": 0}, "positive number of days"),
    ],
)
def test_impossible_requests_say_what_to_give(kwargs, message):
    with pytest.raises(ValueError, match=None) as caught:
        generate_bundle(**kwargs)
    assert message in str(caught.value)


def wanted_names():
    return subject_alt_names(
        "gpu-scheduler-webhook",
        "gpu-system",
        ["webhook.example.com"],
        ["127.0.0.1", "::1"],
    )


def test_a_fresh_bundle_can_be_kept(bundle):
    assert reuse_problem(bundle, *wanted_names(), now=NOW + datetime.timedelta(days=30)) is None


def test_a_bundle_for_other_names_is_replaced(bundle):
    dns, ips = subject_alt_names("other", "gpu-system")
    assert reuse_problem(bundle, dns, ips, now=NOW) == "its names differ from the requested ones"


def test_a_bundle_with_a_third_of_its_life_left_is_renewed(bundle):
    assert reuse_problem(bundle, *wanted_names(), now=NOW + datetime.timedelta(days=240)) is None
    assert reuse_problem(bundle, *wanted_names(), now=NOW + datetime.timedelta(days=250)).startswith("it expires soon")


def test_a_key_of_another_certificate_is_detected(bundle):
    other = generate_bundle(ips=["127.0.0.1"], now=NOW)
    mixed = CertBundle(bundle.ca_cert_pem, bundle.tls_cert_pem, other.tls_key_pem)
    assert reuse_problem(mixed, *wanted_names(), now=NOW) == "tls.key does not belong to tls.crt"


def test_a_certificate_of_another_ca_is_detected(bundle):
    other = generate_bundle(ips=["127.0.0.1"], now=NOW)
    mixed = CertBundle(other.ca_cert_pem, bundle.tls_cert_pem, bundle.tls_key_pem)
    assert reuse_problem(mixed, *wanted_names(), now=NOW) == "tls.crt is not signed by ca.crt"


def test_garbage_is_replaced(bundle):
    broken = CertBundle(bundle.ca_cert_pem, b"-----BEGIN CERTIFICATE-----\nnope\n", bundle.tls_key_pem)
    assert reuse_problem(broken, *wanted_names(), now=NOW).startswith("it does not parse")


# -- the command -----------------------------------------------------------


def run_certs(*args):
    return subprocess.run([CLI, "certs", *args], check=False, capture_output=True, text=True, timeout=60)


def test_out_dir_gets_the_three_files_with_a_private_key_only_the_owner_reads(tmp_path):
    out = tmp_path / "tls"
    result = run_certs(
        "--out-dir",
        str(out),
        "--service",
        "svc",
        "--namespace",
        "ns",
        "--ip",
        "127.0.0.1",
        "--days",
        "30",
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "tls.crt").stat().st_mode) == 0o644
    assert stat.S_IMODE((out / "ca.crt").stat().st_mode) == 0o644
    cert = certificate((out / "tls.crt").read_bytes())
    cert.verify_directly_issued_by(certificate((out / "ca.crt").read_bytes()))
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(days=30, minutes=5)


def test_stdout_is_only_the_ca_bundle_and_no_key_is_printed(tmp_path):
    result = run_certs("--out-dir", str(tmp_path), "--ip", "127.0.0.1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()]
    key = (tmp_path / "tls.key").read_text()
    key_body = "".join(key.splitlines()[1:-1])
    for output in (result.stdout, result.stderr):
        assert "PRIVATE KEY" not in output
        assert key_body not in output.replace("\n", "")


def test_rewriting_narrows_a_world_readable_key_file(tmp_path):
    (tmp_path / "tls.key").write_text("old")
    os.chmod(tmp_path / "tls.key", 0o644)
    assert run_certs("--out-dir", str(tmp_path), "--ip", "127.0.0.1").returncode == 0
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ca.crt",
        "tls.crt",
        "tls.key",
    ]  # no temp files left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ip", "127.0.0.1"], "--out-dir DIR, --secret NAME, or both"),
        (
            ["--out-dir", "x", "--ip", "localhost"],
            "--ip 'localhost' is not an IPv4 or IPv6 address",
        ),
        (["--out-dir", "x", "--service", "svc"], "needs its namespace"),
        (["--secret", "s", "--ip", "127.0.0.1"], "--secret needs --namespace"),
    ],
)
def test_usage_mistakes_exit_2_with_a_message(tmp_path, args, message):
    env_free = {k: v for k, v in os.environ.items() if k != "POD_NAMESPACE"}
    result = subprocess.run(
        [CLI, "certs", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env_free,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "x").exists()

"""Generate the webhook's CA and serving certificate, and judge an existing pair.

Keys are ECDSA P-256: generating one takes about a millisecond (RSA 2048 takes
tens to hundreds), certificates and handshakes are smaller, and the API server
(Go crypto/tls) and every current TLS stack accept them.

The CA's private key lives only in memory for as long as it takes to sign the
serving certificate: nothing here can return it, so it cannot end up on disk or
in a Secret. Renewal makes a new CA and a new serving certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
DEFAULT_DAYS = 365
CA_COMMON_NAME = "gpu-scheduler webhook CA"
# Certificates start a little in the past so a node whose clock lags still accepts them.
CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes of the CA certificate, the serving certificate and its key."""

    ca_cert_pem: bytes
    tls_cert_pem: bytes
    tls_key_pem: bytes = field(repr=False)  # never in a log line or a traceback


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach a Service."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _unique(items: Iterable) -> list:
    return list(dict.fromkeys(items))


def _certificate(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    lifetime: datetime.timedelta,
    now: datetime.datetime,
    is_ca: bool,
) -> x509.CertificateBuilder:
    """What the CA and the serving certificate share: validity, basic
    constraints, key usage and key identifiers."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + lifetime)
        .add_extension(
            x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None),
            critical=True,
        )
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,  # ECDSA keys sign; they never encrypt
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )


def _common_name(name: str) -> x509.Name:
    # X.509 limits a common name to 64 characters; the SANs carry the names.
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])])


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: datetime.datetime) -> x509.Certificate:
    name = _common_name(CA_COMMON_NAME)
    lifetime = datetime.timedelta(days=CA_DAYS)
    builder = _certificate(name, key.public_key(), name, key, lifetime, now, True)
    return builder.sign(key, hashes.SHA256())


def _serving_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    dns_names: Sequence[str],
    ips: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address],
    days: int,
    now: datetime.datetime,
) -> x509.Certificate:
    subject = _common_name(dns_names[0] if dns_names else str(ips[0]))
    lifetime = datetime.timedelta(days=days)
    sans = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]
    builder = (
        _certificate(subject, key.public_key(), ca.subject, ca_key, lifetime, now, False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
    )
    return builder.sign(ca_key, hashes.SHA256())


def subject_alt_names(
    service: str | None = None,
    namespace: str | None = None,
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
) -> tuple[list[str], list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """The DNS and IP SANs a serving certificate needs; ValueError when there are none
    or an IP is malformed."""
    if service and not namespace:
        raise ValueError("a Service name needs its namespace (--namespace) to form its DNS names")
    dns_names = _unique([*(service_dns_names(service, namespace) if service else []), *dns])
    addresses = []
    for text in ips:
        try:
            addresses.append(ipaddress.ip_address(text))
        except ValueError:
            raise ValueError(f"--ip {text!r} is not an IPv4 or IPv6 address") from None
    addresses = _unique(addresses)
    if not dns_names and not addresses:
        raise ValueError("the certificate needs a name: give --service (with --namespace), --dns or --ip")
    return dns_names, addresses


def generate_bundle(
    service: str | None = None,
    namespace: str | None = None,
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    days: int = DEFAULT_DAYS,
    now: datetime.datetime | None = None,
) -> CertBundle:
    """A fresh CA and a serving certificate for the given names, signed by it."""
    if days <= 0:
        raise ValueError(f"validity must be a positive number of days, got {days}")
    dns_names, addresses = subject_alt_names(service, namespace, dns, ips)
    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _ca_certificate(ca_key, now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _serving_certificate(key, ca, ca_key, dns_names, addresses, days, now)
    return CertBundle(
        ca_cert_pem=ca.public_bytes(serialization.Encoding.PEM),
        tls_cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        tls_key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def certificate_sans(
    cert: x509.Certificate,
) -> tuple[set[str], set[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(sans.get_values_for_type(x509.DNSName)), set(sans.get_values_for_type(x509.IPAddress))


def reuse_problem(
    bundle: CertBundle,
    dns_names: Iterable[str],
    ips: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address],
    now: datetime.datetime | None = None,
) -> str | None:
    """Why an existing bundle must be replaced, or None when it can be kept.

    Kept means: it parses, the key belongs to the certificate, the CA signed it,
    it names exactly these SANs, is for serverAuth, and has more than a third of
    its lifetime left (so a yearly certificate is renewed after about 8 months,
    long before any client sees it expire).
    """
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_cert_pem)
        cert = x509.load_pem_x509_certificate(bundle.tls_cert_pem)
        key = serialization.load_pem_private_key(bundle.tls_key_pem, password=None)
    except (ValueError, TypeError) as err:
        return f"it does not parse ({err})"
    if key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        return "tls.key does not belong to tls.crt"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "tls.crt is not signed by ca.crt"
    if certificate_sans(cert) != (set(dns_names), set(ips)):
        return "its names differ from the requested ones"
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = []
    if ExtendedKeyUsageOID.SERVER_AUTH not in usages:
        return "it is not for serverAuth"
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < start:
        return "it is not valid yet"
    if end - now < (end - start) / 3 or ca.not_valid_after_utc < end:
        return f"it expires soon ({end:%Y-%m-%d})"
    return None

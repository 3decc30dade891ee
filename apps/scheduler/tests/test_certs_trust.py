"""The caBundle during a certificate rollover (certs/trust.py): pure functions on real certificates."""

import datetime

from gpu_scheduler.certs import generate_bundle
from gpu_scheduler.certs.trust import PREVIOUS_CA_GRACE, settled, split_pem, with_added

NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
OLD = generate_bundle("svc", "ns", now=NOW - datetime.timedelta(days=300))
NEW = generate_bundle("svc", "ns", now=NOW)


def test_split_pem_returns_each_certificate_once_and_ignores_the_rest():
    crlf = NEW.ca_cert_pem.replace(b"\n", b"\r\n")
    bundle = b"garbage\n" + OLD.ca_cert_pem + crlf + OLD.ca_cert_pem.rstrip(b"\n")
    assert split_pem(bundle) == [OLD.ca_cert_pem, NEW.ca_cert_pem]
    assert split_pem(b"") == []


def test_the_new_ca_is_added_after_the_trusted_ones_once():
    added = with_added(OLD.ca_cert_pem, NEW.ca_cert_pem)
    assert added == OLD.ca_cert_pem + NEW.ca_cert_pem
    assert with_added(added, NEW.ca_cert_pem) == added
    assert with_added(b"", NEW.ca_cert_pem) == NEW.ca_cert_pem


def test_right_after_a_renewal_the_old_ca_stays_trusted_behind_the_new_one():
    trusted = OLD.ca_cert_pem + NEW.ca_cert_pem  # what with_added left before the Secret changed
    assert settled(NEW, trusted, NOW + datetime.timedelta(minutes=2)) == NEW.ca_cert_pem + OLD.ca_cert_pem


def test_after_the_grace_only_the_secrets_ca_is_trusted():
    later = NOW + PREVIOUS_CA_GRACE + datetime.timedelta(seconds=1)
    assert settled(NEW, OLD.ca_cert_pem + NEW.ca_cert_pem, later) == NEW.ca_cert_pem


def test_settling_twice_writes_the_same_bytes():
    first = settled(NEW, OLD.ca_cert_pem + NEW.ca_cert_pem, NOW)
    assert settled(NEW, first, NOW) == first


def test_an_expired_ca_is_never_kept():
    ancient = generate_bundle("svc", "ns", now=NOW - datetime.timedelta(days=3651))
    assert settled(NEW, ancient.ca_cert_pem, NOW) == NEW.ca_cert_pem


def test_a_fresh_install_trusts_the_secrets_ca_alone():
    assert settled(NEW, b"", NOW) == NEW.ca_cert_pem

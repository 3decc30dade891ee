"""What a webhook configuration's caBundle must hold while the serving certificate rolls over.

A renewal makes a new CA (the old CA's key was never kept, so it cannot sign
again). Webhook pods switch to the new certificate only when the kubelet
refreshes their Secret volume (within about a minute: its sync period), so for
a while some pods serve the old certificate and some the new one. The API
server must trust both meanwhile:

  1. before the Secret changes, the new CA is *added* to the caBundle
     (`with_added`): no pod can serve a certificate the API server does not
     trust yet;
  2. after it changed, the caBundle is *settled* (`settled`): the Secret's CA
     first, and the CAs it trusted before for PREVIOUS_CA_GRACE after the
     current certificate was issued; then the old ones are dropped.

Dropping an old CA is not urgent: its key is gone, so it can vouch only for the
one certificate it signed. Pure functions on PEM bytes; the cluster code reads
and writes the configurations.
"""

from __future__ import annotations

import datetime
import re

from cryptography import x509

from .bundle import CLOCK_SKEW, CertBundle

# Far longer than a kubelet takes to refresh a Secret volume; an hour-old
# renewal no longer has a pod serving the certificate it replaced.
PREVIOUS_CA_GRACE = datetime.timedelta(hours=1)
_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----\r?\n?", re.DOTALL)


def split_pem(bundle: bytes) -> list[bytes]:
    """The PEM certificates of a bundle, each ending with a newline, in order, each once."""
    found = []
    for match in _PEM_CERTIFICATE.finditer(bundle or b""):
        pem = match.group(0).replace(b"\r\n", b"\n")
        pem = pem if pem.endswith(b"\n") else pem + b"\n"
        if pem not in found:
            found.append(pem)
    return found


def _unexpired(pem: bytes, now: datetime.datetime) -> bool:
    try:
        return x509.load_pem_x509_certificate(pem).not_valid_after_utc > now
    except ValueError:
        return False  # not a certificate: nothing worth keeping


def with_added(trusted: bytes, ca_pem: bytes) -> bytes:
    """The caBundle `trusted` plus `ca_pem` (at the end), unchanged when it is there already."""
    cas = split_pem(trusted)
    for pem in split_pem(ca_pem):
        if pem not in cas:
            cas.append(pem)
    return b"".join(cas)


def settled(current: CertBundle, trusted: bytes, now: datetime.datetime) -> bytes:
    """The caBundle once the Secret holds `current`: its CA, followed, during the grace after
    its certificate was issued, by the other unexpired CAs `trusted` holds now."""
    cas = split_pem(current.ca_cert_pem)
    issued = x509.load_pem_x509_certificate(current.tls_cert_pem).not_valid_before_utc + CLOCK_SKEW
    if now - issued < PREVIOUS_CA_GRACE:
        cas += [pem for pem in split_pem(trusted) if pem not in cas and _unexpired(pem, now)]
    return b"".join(cas)

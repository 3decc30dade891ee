"""Keep the webhook's certificate in a Secret and its CA in the webhook configurations.

Both are idempotent, so the Helm hook Jobs and the renewal CronJob that call
them can run any number of times: an existing Secret that is still good is
kept, and a caBundle that is already right is not written again.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from cryptography import x509

from ..kube.client import ApiError, KubeClient
from .bundle import CertBundle, certificate_sans, reuse_problem
from .files import CA_FILE, CERT_FILE, KEY_FILE

TLS_SECRET_TYPE = "kubernetes.io/tls"
WEBHOOK_CONFIGURATION_KINDS = (
    ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
    ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
)
# Another writer (a second hook Job, a GitOps sync) may change the object
# between our read and our write; re-read and decide again a few times.
ATTEMPTS = 5


class ClusterCertsError(Exception):
    """The cluster is not in a state these functions can fix; str() says what to do."""


@dataclass(frozen=True)
class SecretOutcome:
    action: str  # "created", "kept" or "replaced"
    bundle: CertBundle  # what the Secret holds now
    # PEM CA certificates clients must trust. After a replacement it holds the
    # old CA too: webhook pods serve the old certificate until the kubelet
    # refreshes their volume, and those calls must keep working meanwhile.
    trust_pem: bytes
    reason: str = ""  # why an existing Secret was replaced


def _secret_path(namespace: str, name: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets"
    return f"{path}/{quote(name, safe='')}" if name else path


def _secret_body(namespace: str, name: str, bundle: CertBundle) -> dict:
    def encode(pem: bytes) -> str:
        return base64.b64encode(pem).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": TLS_SECRET_TYPE,
        "data": {
            CERT_FILE: encode(bundle.tls_cert_pem),
            KEY_FILE: encode(bundle.tls_key_pem),
            CA_FILE: encode(bundle.ca_cert_pem),
        },
    }


def bundle_from_secret(secret: dict) -> CertBundle | None:
    """The bundle a Secret holds, or None when a key is missing or not base64."""
    data = secret.get("data") or {}
    try:
        return CertBundle(
            ca_cert_pem=base64.b64decode(data[CA_FILE], validate=True),
            tls_cert_pem=base64.b64decode(data[CERT_FILE], validate=True),
            tls_key_pem=base64.b64decode(data[KEY_FILE], validate=True),
        )
    except (KeyError, TypeError, binascii.Error):
        return None


def _get_or_none(kube: KubeClient, path: str) -> dict | None:
    status, body = kube.request("GET", path)
    if status == 404:
        return None
    if status >= 300:
        raise ApiError("GET", path, status, body)
    return json.loads(body)


def _still_trusted(ca_pem: bytes, now: datetime.datetime) -> bool:
    try:
        return x509.load_pem_x509_certificate(ca_pem).not_valid_after_utc > now
    except ValueError:
        return False


def _write(kube: KubeClient, method: str, path: str, body: dict, before_write) -> None:
    """POST or PUT the Secret. With `before_write`, the write is first tried as a dry run
    (RBAC, validation, a conflicting resourceVersion), so before_write(...) runs only for a
    write the API server would accept."""
    if before_write is not None:
        kube.call(method, path, body=body, query={"dryRun": "All"})
        before_write()
    kube.call(method, path, body=body)


def ensure_secret(
    kube: KubeClient,
    namespace: str,
    name: str,
    bundle: CertBundle,
    now: datetime.datetime | None = None,
    before_write: Callable[[CertBundle], None] | None = None,
) -> SecretOutcome:
    """Make the kubernetes.io/tls Secret namespace/name hold a good certificate
    for the names in `bundle`: keep the existing one if it is still good,
    otherwise store `bundle`.

    before_write(bundle) runs just before `bundle` is written (after a dry run of
    the write succeeded): where the webhook configurations learn to trust its CA
    before any webhook pod can serve its certificate."""
    hook = None if before_write is None else (lambda: before_write(bundle))
    now = now or datetime.datetime.now(datetime.UTC)
    wanted_dns, wanted_ips = certificate_sans(x509.load_pem_x509_certificate(bundle.tls_cert_pem))
    fresh = _secret_body(namespace, name, bundle)
    for _ in range(ATTEMPTS):
        existing = _get_or_none(kube, _secret_path(namespace, name))
        if existing is None:
            try:
                _write(kube, "POST", _secret_path(namespace), fresh, hook)
            except ApiError as err:
                if err.status == 409:  # created meanwhile: judge that one
                    continue
                raise
            return SecretOutcome("created", bundle, bundle.ca_cert_pem)
        if existing.get("type") != TLS_SECRET_TYPE:
            raise ClusterCertsError(
                f"Secret {namespace}/{name} exists with type {existing.get('type')!r}, not "
                f"{TLS_SECRET_TYPE!r}, and a Secret's type cannot change: delete it or use another --secret name"
            )
        old = bundle_from_secret(existing)
        problem = (
            "it lacks tls.crt, tls.key or ca.crt" if old is None else reuse_problem(old, wanted_dns, wanted_ips, now)
        )
        if problem is None:
            return SecretOutcome("kept", old, old.ca_cert_pem)
        replacement = dict(existing, type=TLS_SECRET_TYPE, data=fresh["data"])
        try:
            _write(kube, "PUT", _secret_path(namespace, name), replacement, hook)
        except ApiError as err:
            if err.status == 409:  # changed since our read
                continue
            raise
        trust = bundle.ca_cert_pem
        if old is not None and old.ca_cert_pem != bundle.ca_cert_pem and _still_trusted(old.ca_cert_pem, now):
            trust += old.ca_cert_pem
        return SecretOutcome("replaced", bundle, trust, reason=problem)
    raise ClusterCertsError(
        f"Secret {namespace}/{name} kept changing while it was being written; "
        "is another certs job running? Run it again when that one is done"
    )


@dataclass(frozen=True)
class BundleUpdate:
    """What happened to the caBundles of one webhook configuration."""

    kind: str
    name: str
    webhooks: int
    changed: int  # webhooks whose caBundle was written

    def __str__(self) -> str:
        if not self.changed:
            return f"{self.kind} {self.name}: caBundle already current ({self.webhooks} webhooks)"
        return f"{self.kind} {self.name}: caBundle set on {self.changed} of {self.webhooks} webhooks"


def patch_ca_bundle(kube: KubeClient, name: str, ca_pem: bytes) -> list[str]:
    """Set clientConfig.caBundle of every webhook in the Mutating- and
    ValidatingWebhookConfiguration called `name` (whichever exist) to `ca_pem`.

    Returns one line per configuration saying what happened; raises
    ClusterCertsError when neither exists.
    """
    return [str(update) for update in update_ca_bundles(kube, name, lambda _current: ca_pem)]


def update_ca_bundles(
    kube: KubeClient,
    name: str,
    decide: Callable[[bytes], bytes],
    allow_missing: bool = False,
) -> list[BundleUpdate]:
    """Set each webhook's caBundle in the configurations called `name` to
    decide(its current caBundle as PEM bytes, empty when unset).

    Returns what happened, per configuration. When neither configuration
    exists: ClusterCertsError, or an empty list with `allow_missing` (a
    pre-install hook runs before the chart creates them).
    """
    outcomes = []
    for kind, resource in WEBHOOK_CONFIGURATION_KINDS:
        path = f"/apis/admissionregistration.k8s.io/v1/{resource}/{quote(name, safe='')}"
        outcome = _patch_configuration(kube, kind, path, decide)
        if outcome is not None:
            outcomes.append(outcome)
    if not outcomes and not allow_missing:
        raise ClusterCertsError(
            f"neither a MutatingWebhookConfiguration nor a ValidatingWebhookConfiguration named {name!r} "
            "exists; install the webhook configurations first, or fix --patch-webhook"
        )
    return outcomes


def _decoded(ca_bundle: str | None) -> bytes:
    try:
        return base64.b64decode(ca_bundle or "", validate=True)
    except (binascii.Error, ValueError):
        return b""  # not base64: nothing in it is trusted


def _patch_configuration(
    kube: KubeClient, kind: str, path: str, decide: Callable[[bytes], bytes]
) -> BundleUpdate | None:
    for _ in range(ATTEMPTS):
        # Raw JSON read-modify-write: no client model in between that could
        # drop fields it does not know; resourceVersion makes the write fail
        # (409) rather than overwrite a concurrent change.
        config = _get_or_none(kube, path)
        if config is None:
            return None
        webhooks = config.get("webhooks") or []
        stale = 0
        for webhook in webhooks:
            client_config = webhook.setdefault("clientConfig", {})
            wanted = base64.b64encode(decide(_decoded(client_config.get("caBundle")))).decode("ascii")
            if client_config.get("caBundle") != wanted:
                client_config["caBundle"] = wanted
                stale += 1
        update = BundleUpdate(kind, config["metadata"]["name"], len(webhooks), stale)
        if not stale:
            return update
        try:
            kube.call("PUT", path, body=config)
        except ApiError as err:
            if err.status == 409:
                continue
            raise
        return update
    raise ClusterCertsError(f"{kind} at {path} kept changing while its caBundle was being set; run again")

"""`gpu-scheduler certs`: the webhook's CA and serving certificate, as files or a Secret.

stdout carries only the caBundle (base64 of the CA PEM), so scripts can capture
it; everything else is logged to stderr, and no key is ever printed or logged.

With --secret and --patch-webhook a renewal never leaves a webhook pod serving
a certificate the API server does not trust (certs/trust.py): the new CA is
added to the caBundle before the Secret changes, and the old one stays beside
it for an hour. The chart's hook Jobs and its renewal CronJob run exactly this.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import logging
import time

from kubernetes.config.config_exception import ConfigException

from ..config import env, env_help, positive_int
from ..kube.client import ApiError, KubeClient, load_configuration
from .bundle import DEFAULT_DAYS, CertBundle, generate_bundle
from .cluster import ClusterCertsError, ensure_secret, update_ca_bundles
from .files import write_bundle
from .trust import settled, with_added

log = logging.getLogger(__name__)

# Every API server learns of a changed webhook configuration from its own
# watch, within a fraction of a second. Waiting a few seconds between trusting
# a new CA and writing the certificate it signed (once per renewal, months
# apart) keeps that ordering even for a kubelet that refreshes the Secret
# volume at once.
TRUST_PROPAGATION_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dir",
        help="write ca.crt, tls.crt and tls.key (mode 0600) to this directory",
    )
    parser.add_argument(
        "--service",
        help="the webhook's Service: adds the DNS names <service>, <service>.<ns>, "
        "<service>.<ns>.svc and <service>.<ns>.svc.cluster.local",
    )
    parser.add_argument(
        "--namespace",
        default=env("POD_NAMESPACE", ""),
        help=env_help("namespace of the Service and the Secret", "POD_NAMESPACE"),
    )
    parser.add_argument(
        "--dns",
        action="append",
        default=[],
        metavar="NAME",
        help="an extra DNS name for the certificate (repeatable)",
    )
    parser.add_argument(
        "--ip",
        action="append",
        default=[],
        metavar="IP",
        help="an IP address for the certificate, e.g. 127.0.0.1 (repeatable)",
    )
    parser.add_argument(
        "--days",
        type=positive_int,
        default=DEFAULT_DAYS,
        help="validity of the serving certificate in days (default: %(default)s; the CA gets 10 years)",
    )
    parser.add_argument(
        "--secret",
        help="create or update this kubernetes.io/tls Secret in --namespace; "
        "an existing one that is still good for the same names is kept",
    )
    parser.add_argument(
        "--patch-webhook",
        metavar="NAME",
        help="set caBundle in the Mutating- and ValidatingWebhookConfiguration called NAME; with --secret, "
        "a renewal adds the new CA there before the Secret changes and keeps the old one for an hour",
    )
    parser.add_argument(
        "--allow-missing-webhook",
        action="store_true",
        help="no error when neither configuration named by --patch-webhook exists yet "
        "(a pre-install hook runs before the chart creates them)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG", ""),
        help=env_help("kubeconfig file; in-cluster configuration when unset", "KUBECONFIG"),
    )


def _usage_problem(args: argparse.Namespace) -> str | None:
    if not (args.out_dir or args.secret):
        return "say where the certificate goes: --out-dir DIR, --secret NAME, or both"
    if args.secret and not args.namespace:
        return "--secret needs --namespace (or POD_NAMESPACE)"
    if args.allow_missing_webhook and not args.patch_webhook:
        return "--allow-missing-webhook needs --patch-webhook NAME"
    return None


def _trust_before_write(kube: KubeClient, webhook: str):
    """The before_write hook of ensure_secret: trust the new CA first, then give the API servers
    time to see it."""

    def trust(bundle: CertBundle) -> None:
        updates = update_ca_bundles(kube, webhook, lambda current: with_added(current, bundle.ca_cert_pem), True)
        for update in updates:
            log.info("before writing the Secret: %s", update)
        if any(update.changed for update in updates):
            time.sleep(TRUST_PROPAGATION_SECONDS)

    return trust


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem:
        log.error("certs: %s", problem)
        return 2
    try:
        bundle = generate_bundle(args.service, args.namespace or None, args.dns, args.ip, args.days)
    except ValueError as err:
        log.error("certs: %s", err)
        return 2
    trust_pem = bundle.ca_cert_pem
    try:
        kube = KubeClient(load_configuration(args.kubeconfig or None)) if (args.secret or args.patch_webhook) else None
        if args.secret:
            before_write = _trust_before_write(kube, args.patch_webhook) if args.patch_webhook else None
            outcome = ensure_secret(kube, args.namespace, args.secret, bundle, before_write=before_write)
            log.info(
                "Secret %s/%s %s%s",
                args.namespace,
                args.secret,
                outcome.action,
                f" because {outcome.reason}" if outcome.reason else "",
            )
            bundle, trust_pem = outcome.bundle, outcome.trust_pem
        if args.out_dir:
            write_bundle(args.out_dir, bundle)
            log.info("wrote ca.crt, tls.crt and tls.key to %s", args.out_dir)
        if args.patch_webhook:
            now = datetime.datetime.now(datetime.UTC)
            updates = update_ca_bundles(
                kube,
                args.patch_webhook,
                lambda current: settled(bundle, current, now),
                allow_missing=args.allow_missing_webhook,
            )
            for update in updates:
                log.info("%s", update)
            if not updates:
                log.info("no webhook configuration named %s yet: nothing to patch", args.patch_webhook)
    except (ClusterCertsError, ApiError, ConfigException, OSError) as err:
        log.error("certs: %s", err)
        return 1
    print(base64.b64encode(trust_pem).decode("ascii"))
    return 0

"""`gpu-scheduler certs`: the webhook's CA and serving certificate, as files or a Secret.

stdout carries only the caBundle (base64 of the CA PEM), so scripts can capture
it; everything else is logged to stderr, and no key is ever printed or logged.
"""

from __future__ import annotations

import argparse
import base64
import logging

from kubernetes.config.config_exception import ConfigException

from ..config import env, env_help, positive_int
from ..kube.client import ApiError, KubeClient, load_configuration
from .bundle import DEFAULT_DAYS, generate_bundle
from .cluster import ClusterCertsError, ensure_secret, patch_ca_bundle
from .files import write_bundle

log = logging.getLogger(__name__)


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
        help="set caBundle in the Mutating- and ValidatingWebhookConfiguration called NAME",
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
    return None


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
            outcome = ensure_secret(kube, args.namespace, args.secret, bundle)
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
            for line in patch_ca_bundle(kube, args.patch_webhook, trust_pem):
                log.info("%s", line)
    except (ClusterCertsError, ApiError, ConfigException, OSError) as err:
        log.error("certs: %s", err)
        return 1
    print(base64.b64encode(trust_pem).decode("ascii"))
    return 0

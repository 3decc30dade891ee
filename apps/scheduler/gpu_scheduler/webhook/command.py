"""`gpu-scheduler webhook`: serve /mutate and /validate over TLS with granian."""

from __future__ import annotations

import argparse
import logging
import tempfile

from ..config import DEFAULT_SCHEDULER_NAME, boolean, env, env_help, positive_int
from ..scheduling.nodes import DEFAULT_ALIAS_LABEL

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tls-cert-file",
        default=env("TLS_CERT_FILE", "/etc/gpu-scheduler/tls/tls.crt"),
        help=env_help("serving certificate (PEM); reloaded when it changes", "TLS_CERT_FILE"),
    )
    parser.add_argument(
        "--tls-private-key-file",
        default=env("TLS_PRIVATE_KEY_FILE", "/etc/gpu-scheduler/tls/tls.key"),
        help=env_help("private key of the serving certificate (PEM)", "TLS_PRIVATE_KEY_FILE"),
    )
    parser.add_argument(
        "--bind",
        default=env("WEBHOOK_BIND", "0.0.0.0"),
        help=env_help("address to listen on", "WEBHOOK_BIND"),
    )
    parser.add_argument(
        "--port",
        type=positive_int,
        default=env("WEBHOOK_PORT", "8443"),
        help=env_help("HTTPS port", "WEBHOOK_PORT"),
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=env("WEBHOOK_WORKERS", "2"),
        help=env_help("worker processes", "WEBHOOK_WORKERS"),
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        # Connections cost no thread (granian's Rust side holds them); a thread runs
        # one request at a time, and waits with it when --read-nodes asks the API.
        default=env("WEBHOOK_THREADS", "8"),
        help=env_help("Python threads per worker that run requests", "WEBHOOK_THREADS"),
    )
    parser.add_argument(
        "--scheduler-name",
        default=env("SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME),
        help=env_help("schedulerName of the pods to handle", "SCHEDULER_NAME"),
    )
    parser.add_argument(
        "--read-nodes",
        type=boolean,
        default=boolean(env("WEBHOOK_READ_NODES", "false")),
        help=env_help(
            "read the node a pod is created on (spec.nodeName) to refuse it when its map line names another "
            "node (true|false); needs get on nodes (the chart's webhook.readNodes). Without it such a pod "
            "only gets a warning",
            "WEBHOOK_READ_NODES",
        ),
    )
    parser.add_argument(
        "--alias-label",
        default=env("ALIAS_LABEL", DEFAULT_ALIAS_LABEL),
        help=env_help("node label whose value a map may use instead of the node name", "ALIAS_LABEL"),
    )
    parser.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG", None),
        help=env_help("kubeconfig for --read-nodes; in-cluster credentials when unset", "KUBECONFIG"),
    )


def run(args: argparse.Namespace) -> int:
    # Imported here: the other subcommands need neither granian nor Flask.
    from .app import create_app
    from .metrics import WebhookMetrics, enable_multiprocess
    from .server import (
        ReloadingTLS,
        ServerOptions,
        TLSLoadError,
        bind_address,
        serve,
        served_certificate,
    )

    try:
        tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file)
    except TLSLoadError as err:
        log.error(
            "webhook: %s; mount the Secret written by `gpu-scheduler certs` or fix "
            "--tls-cert-file/--tls-private-key-file",
            err,
        )
        return 1
    # Under the temp directory ($TMPDIR or /tmp), which the chart mounts as an
    # emptyDir so this works with a read-only root filesystem.
    metrics_dir = tempfile.mkdtemp(prefix="gpu-scheduler-webhook-metrics-")
    enable_multiprocess(metrics_dir)
    options = ServerOptions(
        bind=args.bind,
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        log_level=args.log_level,
        metrics_dir=metrics_dir,
    )
    log.info(
        "webhook for schedulerName %s on %s with %d workers of %d threads",
        args.scheduler_name,
        bind_address(args.bind, args.port),
        args.workers,
        args.threads,
    )

    configuration = None  # API credentials for --read-nodes
    if args.read_nodes:
        from kubernetes.config.config_exception import ConfigException

        from ..kube.client import load_configuration

        try:
            configuration = load_configuration(args.kubeconfig)
        except (ConfigException, OSError, ValueError) as err:
            log.error(
                "webhook: --read-nodes needs API credentials: %s; mount the service account token "
                "(the chart does with webhook.readNodes) or pass --kubeconfig",
                err,
            )
            return 1

    def app_factory():
        # Each worker its own client (connection pool), made after the fork.
        reader = None
        if configuration is not None:
            from ..kube.client import USER_AGENT, KubeClient
            from .gpu_nodes import PublishedGpus
            from .nodes import NodeReader

            # direct=False: the direct transport keeps a connection per thread, and a
            # worker has --threads of them; urllib3's pool shares 4 among them.
            client = KubeClient(configuration, pool_size=4, user_agent=USER_AGENT + "-webhook", direct=False)
            published = PublishedGpus(client)
            published.start()
            reader = NodeReader(client, args.alias_label, published=published)
        # The certificate this worker serves: the one on disk when it started.
        status = served_certificate(tls.cert_file)
        return create_app(
            args.scheduler_name,
            WebhookMetrics(lambda: status().not_after),
            ready=status,
            nodes=reader,
        )

    return serve(options, tls, app_factory)

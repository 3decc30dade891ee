"""`gpu-scheduler webhook`: serve /mutate and /validate over TLS with gunicorn (gevent worker)."""

from __future__ import annotations

import argparse
import logging
import tempfile

from ..config import boolean, env, env_help, positive_int
from ..logs import children_start_writer_later

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
        help=env_help("gunicorn worker processes", "WEBHOOK_WORKERS"),
    )
    parser.add_argument(
        "--connections",
        type=positive_int,
        # Each connection is a greenlet (gunicorn's gevent worker), so an idle
        # keep-alive connection costs little; the API server keeps up to 25 per
        # webhook (client-go's MaxIdleConnsPerHost) and opens spares under load.
        default=env("WEBHOOK_CONNECTIONS", "1000"),
        help=env_help("connections each worker serves at once", "WEBHOOK_CONNECTIONS"),
    )
    parser.add_argument(
        "--scheduler-name",
        default=env("SCHEDULER_NAME", "gpu-scheduler"),
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
        default=env("ALIAS_LABEL", "gpu-node-name"),
        help=env_help("node label whose value a map may use instead of the node name", "ALIAS_LABEL"),
    )
    parser.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG", None),
        help=env_help("kubeconfig for --read-nodes; in-cluster credentials when unset", "KUBECONFIG"),
    )


def run(args: argparse.Namespace) -> int:
    # Imported here: the other subcommands need neither gunicorn nor Flask.
    from .app import create_app
    from .metrics import WebhookMetrics, enable_multiprocess
    from .server import (
        ReloadingTLS,
        ServerOptions,
        TLSLoadError,
        WebhookServer,
        bind_address,
    )

    # The workers start their log writers after the fork (WebhookServer's post_fork):
    # the process is gevent's by now (cli._cooperative_stdlib).
    children_start_writer_later()
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
        connections=args.connections,
        log_level=args.log_level,
        metrics_dir=metrics_dir,
    )
    log.info(
        "webhook for schedulerName %s on %s with %d workers of %d connections",
        args.scheduler_name,
        bind_address(args.bind, args.port),
        args.workers,
        args.connections,
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
            from .nodes import NodeReader

            # direct=False: the direct transport keeps a connection per thread, and under
            # gevent every client connection's greenlet is a thread of its own; urllib3's
            # pool shares 4 among them.
            client = KubeClient(configuration, pool_size=4, user_agent=USER_AGENT + "-webhook", direct=False)
            reader = NodeReader(client, args.alias_label)
        return create_app(args.scheduler_name, WebhookMetrics(tls.not_after), ready=tls.status, nodes=reader)

    WebhookServer(options, tls, app_factory).run()
    return 0

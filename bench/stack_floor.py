"""What the webhook's stack costs before our code runs: the same answer with no admission,
under the webhook's server and under the other WSGI servers it could run on.

    python -m bench.stack_floor --server {granian,gevent,gthread} --app {gunicorn,flask} \
        --tls-cert-file F --tls-private-key-file F --port N

The app reads the request body and answers a fixed "allowed" AdmissionReview:
- gunicorn (the name is historical: a bare WSGI function): the server's and TLS's cost alone;
- flask: the same answer from a Flask route, so the difference is Flask's.
The servers, each with TLS from the same certificate and the webhook's worker count:
- granian: the webhook's own server as deployed (gpu_scheduler.webhook.server.serve:
  granian's WSGI interface, a Rust HTTP and TLS stack calling the app), since 2026-11-28;
- gevent: gunicorn's gevent worker, which the webhook ran on from 2026-11-27;
- gthread: gunicorn's gthread worker (32 threads a worker), which it ran on before.
The admission phase sends these the same load as the webhook, so the report
can say which part of the webhook's CPU per request is the stack's floor,
which part is ours (parsing, the map, the patch, logging, metrics), and what
another server would save.
"""

from __future__ import annotations

import argparse
import json
import ssl
import tempfile

from flask import Flask, Response
from gpu_scheduler.webhook.app import request_body
from gpu_scheduler.webhook.server import ReloadingTLS, ServerOptions, serve
from gunicorn.app.base import BaseApplication

APPS = ("gunicorn", "flask")
SERVERS = ("granian", "gevent", "gthread")  # the webhook's own first (bench/report.py)
GRACEFUL_TIMEOUT = 3  # seconds gunicorn waits for a worker to stop before it kills it
ANSWER = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "floor", "allowed": True},
    }
).encode()


def bare_app(environ, start_response):
    environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))])
    return [ANSWER]


def flask_app() -> Flask:
    app = Flask(__name__)

    @app.post("/mutate")
    def mutate() -> Response:
        request_body()  # as the webhook reads it (webhook/app.py)
        return Response(ANSWER, mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    return app


class GunicornServer(BaseApplication):
    """gunicorn with the settings the webhook had on it (keep-alive 75 s, TLS 1.2+)."""

    def __init__(self, worker_class: str, args: argparse.Namespace, app_factory) -> None:
        self.worker_class, self.args, self.app_factory = worker_class, args, app_factory
        super().__init__()

    def load_config(self) -> None:
        args = self.args
        settings = {
            "bind": [f"127.0.0.1:{args.port}"],
            "workers": args.workers,
            "worker_class": self.worker_class,
            "threads": args.threads,
            "worker_connections": 1000,
            "keepalive": 75,
            "certfile": args.tls_cert_file,
            "keyfile": args.tls_private_key_file,
            "ssl_version": ssl.PROTOCOL_TLS_SERVER,
            "loglevel": "warning",
            "accesslog": None,
            # A worker still booting when the stop signal comes loses it (its handlers are the
            # master's until it installs its own), and gunicorn then waits graceful_timeout (30 s)
            # before it kills it: seen in 1 stop of 8 right after the first answer. The floor
            # needs no graceful stop.
            "graceful_timeout": GRACEFUL_TIMEOUT,
        }
        for name, value in settings.items():
            self.cfg.set(name, value)
        if "control_socket_disable" in self.cfg.settings:
            self.cfg.set("control_socket_disable", True)

    def load(self):
        return self.app_factory()


def serve_webhook_server(app: str, args: argparse.Namespace) -> None:
    """The webhook's own serve(), as `gpu-scheduler webhook` calls it."""
    options = ServerOptions(
        bind="127.0.0.1",
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        log_level="warning",
        metrics_dir=tempfile.mkdtemp(prefix="bench-stack-floor-"),
    )
    tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file)
    serve(options, tls, (lambda: bare_app) if app == "gunicorn" else flask_app)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stack_floor", description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=SERVERS, default="granian")
    parser.add_argument("--app", choices=APPS, required=True)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-private-key-file", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, help="per worker; default the webhook's 8 under granian, 32 under gthread"
    )
    args = parser.parse_args(argv)
    if args.threads is None:
        args.threads = 8 if args.server == "granian" else 32
    if args.server == "granian":
        serve_webhook_server(args.app, args)
        return 0
    if args.server == "gevent":
        from gevent import monkey  # before anything else touches ssl and threads

        monkey.patch_all()
    app_factory = (lambda: bare_app) if args.app == "gunicorn" else flask_app
    GunicornServer(args.server, args, app_factory).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

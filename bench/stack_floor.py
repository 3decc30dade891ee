"""What the webhook's stack costs before our code runs: the same answer with no admission,
under the webhook's server and under the other WSGI servers it could run on.

    python -m bench.stack_floor --server {gevent,gthread,granian} --app {gunicorn,flask} \
        --tls-cert-file F --tls-private-key-file F --port N

The app reads the request body and answers a fixed "allowed" AdmissionReview:
- gunicorn (the name is historical: a bare WSGI function): the server's and TLS's cost alone;
- flask: the same answer from a Flask route, so the difference is Flask's.
The servers, each with TLS from the same certificate and the webhook's worker count:
- gevent: gpu-scheduler's own WebhookServer as deployed (gunicorn's gevent worker,
  keep-alive, certificate rotation);
- gthread: the same WebhookServer with gunicorn's gthread worker (32 threads a worker),
  which the webhook ran on until 2026-11-27;
- granian: granian's WSGI interface (a Rust HTTP and TLS stack calling the same app).
The admission phase sends these the same load as the webhook, so the report
can say which part of the webhook's CPU per request is the stack's floor,
which part is ours (parsing, the map, the patch, logging, metrics), and what
another server would save.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from flask import Flask, Response, request
from gpu_scheduler.webhook.server import ReloadingTLS, ServerOptions, WebhookServer

APPS = ("gunicorn", "flask")
SERVERS = ("gevent", "gthread", "granian")  # the webhook's own first (bench/report.py)
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
        request.get_data(cache=False)
        return Response(ANSWER, mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    return app


class GthreadWebhookServer(WebhookServer):
    """The webhook's gunicorn settings with gunicorn's gthread worker instead of gevent."""

    def __init__(self, options: ServerOptions, threads: int, *args) -> None:
        self.threads = threads
        super().__init__(options, *args)

    def load_config(self) -> None:
        super().load_config()
        self.cfg.set("worker_class", "gthread")
        self.cfg.set("threads", self.threads)


def serve_granian(app: str, args: argparse.Namespace) -> None:
    from granian import Granian
    from granian.constants import Interfaces, SSLProtocols
    from granian.log import LogLevels

    # flask: flask_app is called in each worker (factory), as WebhookServer.load does.
    target = "bench.stack_floor:bare_app" if app == "gunicorn" else "bench.stack_floor:flask_app"
    Granian(
        target,
        address="127.0.0.1",
        port=args.port,
        interface=Interfaces.WSGI,
        workers=args.workers,
        blocking_threads=args.threads,
        ssl_cert=Path(args.tls_cert_file),
        ssl_key=Path(args.tls_private_key_file),  # PKCS#8, as gpu-scheduler's certs writes it
        ssl_protocol_min=SSLProtocols.tls12,
        log_level=LogLevels.warning,
        factory=app == "flask",
    ).serve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stack_floor", description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=SERVERS, default="gevent")
    parser.add_argument("--app", choices=APPS, required=True)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-private-key-file", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32)
    args = parser.parse_args(argv)
    if args.server == "granian":
        serve_granian(args.app, args)
        return 0
    options = ServerOptions(
        bind="127.0.0.1",
        port=args.port,
        workers=args.workers,
        connections=1000,
        log_level="warning",
        metrics_dir=tempfile.mkdtemp(prefix="bench-stack-floor-"),
    )
    tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file)
    app_factory = (lambda: bare_app) if args.app == "gunicorn" else flask_app
    if args.server == "gthread":
        GthreadWebhookServer(options, args.threads, tls, app_factory).run()
    else:
        WebhookServer(options, tls, app_factory).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

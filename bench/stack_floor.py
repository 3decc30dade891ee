"""What the webhook's stack costs before our code runs: the same gunicorn without the admission.

    python -m bench.stack_floor --app {gunicorn,flask} --tls-cert-file F --tls-private-key-file F --port N

Runs gpu-scheduler's own WebhookServer (its gunicorn settings: gthread, 2
workers of 32 threads, keep-alive, TLS from the same certificate) around an
app that reads the request body and answers a fixed "allowed" AdmissionReview:
- gunicorn: a bare WSGI function, so the figure is gunicorn's and TLS's alone;
- flask: the same answer from a Flask route, so the difference is Flask's.
The admission phase sends these the same load as the webhook, so the report
can say which part of the webhook's CPU per request is the stack's floor and
which part is ours (parsing, the map, the patch, logging, metrics).
"""

from __future__ import annotations

import argparse
import json
import tempfile

from flask import Flask, Response, request
from gpu_scheduler.webhook.server import ReloadingTLS, ServerOptions, WebhookServer

APPS = ("gunicorn", "flask")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stack_floor", description=__doc__.splitlines()[0])
    parser.add_argument("--app", choices=APPS, required=True)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-private-key-file", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32)
    args = parser.parse_args(argv)
    options = ServerOptions(
        bind="127.0.0.1",
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        log_level="warning",
        metrics_dir=tempfile.mkdtemp(prefix="bench-stack-floor-"),
    )
    tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file)
    WebhookServer(options, tls, (lambda: bare_app) if args.app == "gunicorn" else flask_app).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The webhook's HTTP surface: Flask routes around the pure admission functions."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from . import admission
from .metrics import CONTENT_TYPE, WebhookMetrics
from .nodes import NodeReader

# The API server refuses request bodies over 3 MiB, so no real AdmissionReview
# is larger; anything bigger is turned away before it is read.
MAX_BODY = 3 * 1024 * 1024

log = logging.getLogger(__name__)


def _status(code: int, reason: str, message: str) -> Response:
    """An error answer, shaped like a Kubernetes metav1.Status."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    return Response(json.dumps(body), status=code, mimetype="application/json")


def request_body() -> bytes:
    """The request's body, read whole.

    werkzeug's get_data() reads wsgi.input in pieces (readinto), and in granian such a
    read of a request whose client has gone (an HTTP/2 stream reset, a connection closed
    while the request waited for a thread) keeps one of its Rust threads spinning for
    minutes after the load that left it: after a minute of 1,500 new maps a second,
    1.6-1.7 cores busy with no request to serve (docs/logs/faults.md, bug 6). Read with no
    size, granian collects the body once, and a body cut short is only short (then not
    JSON: a 400 no one reads). A body of unknown length, or over MAX_BODY, goes through
    werkzeug, which bounds it (413)."""
    length = request.content_length
    if length is not None and length <= MAX_BODY:
        return request.environ["wsgi.input"].read()
    return request.get_data(cache=False)


def parse_body(data: bytes) -> object:
    """The request body as JSON; BadRequest for anything that is not UTF-8 JSON.

    orjson, not json: the Flask app's CPU per admission fell from 152-162 to
    134-144 us (docs/benchmarks.md). Its one error type is told apart here, so
    the client still learns which of the three is wrong. orjson nests at most
    1,024 levels deep; no pod comes near."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise admission.BadRequest(f"the body is not UTF-8 ({bad.reason} at byte {bad.start})") from None
        if "depth limit" in str(err):
            raise admission.BadRequest("the body's JSON is nested too deeply") from None
        raise admission.BadRequest(f"the body is not JSON ({err})") from None


def create_app(
    scheduler_name: str,
    metrics: WebhookMetrics,
    ready: Callable[[], object],
    nodes: NodeReader | None = None,
) -> Flask:
    """The WSGI app. `ready()` tells /readyz whether a good serving certificate is loaded
    (truthy) and, as text, until when it is valid; `nodes`, when given, reads the
    node a pod is created on."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    def admit(operation: str, decide: Callable[[object, str], admission.Answer]) -> Response:
        started = time.perf_counter()
        try:
            # Reading the body here (not in Flask) makes an oversized one raise
            # RequestEntityTooLarge inside this try, so it is counted too.
            review = parse_body(request_body())
            decision = decide(review, scheduler_name)
        except (admission.BadRequest, RecursionError) as err:
            message = str(err) if isinstance(err, admission.BadRequest) else "the AdmissionReview is nested too deeply"
            return _reject(operation, started, 400, "BadRequest", message)
        except HTTPException as err:  # 413 from MAX_CONTENT_LENGTH
            return _reject(operation, started, err.code, err.name.replace(" ", ""), err.description)
        seconds = time.perf_counter() - started
        metrics.observe(operation, decision.result, seconds)
        log.log(
            logging.INFO if decision.examined else logging.DEBUG,
            "%s %s",
            operation,
            decision.result,
            extra={
                "fields": {
                    "operation": operation,
                    "result": decision.result,
                    **decision.fields,
                    "duration_ms": round(seconds * 1000, 3),
                }
            },
        )
        return Response(orjson.dumps(decision.review), mimetype="application/json")

    def _reject(operation: str, started: float, code: int, reason: str, message: str) -> Response:
        seconds = time.perf_counter() - started
        metrics.observe(operation, "bad_request", seconds)
        log.warning(
            "%s bad request",
            operation,
            extra={
                "fields": {
                    "operation": operation,
                    "result": "bad_request",
                    "code": code,
                    "remote": request.remote_addr,
                    "message": message,
                    "duration_ms": round(seconds * 1000, 3),
                }
            },
        )
        return _status(code, reason, message)

    @app.post("/mutate")
    def mutate() -> Response:
        return admit("mutate", functools.partial(admission.mutate, nodes=nodes))

    @app.post("/mutate-workloads")
    def mutate_workloads() -> Response:
        return admit("mutate-workloads", admission.mutate_workload)

    @app.post("/validate")
    def validate() -> Response:
        return admit("validate", admission.validate)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        # ready() is true while the serving certificate is valid; its str() says until when.
        status = ready()
        if status:
            return Response(f"ok: {status}\n", mimetype="text/plain")
        return Response(f"not ready: {status}\n", status=503, mimetype="text/plain")

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(metrics.exposition(), content_type=CONTENT_TYPE)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        # 404, 405 and the like as JSON, like every other answer.
        return _status(err.code or 500, err.name.replace(" ", ""), err.description or err.name)

    @app.errorhandler(Exception)
    def unexpected_error(err: Exception) -> Response:
        # A bug of ours: the traceback goes to the log, the client gets JSON.
        log.exception("unexpected error handling %s %s", request.method, request.path)
        return _status(
            500,
            "InternalError",
            f"internal error in the webhook ({type(err).__name__}); see its log",
        )

    return app

"""Logging as text for people or JSON for log pipelines; one line per event either way."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import os
import queue
import sys
import time

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{self.formatTime(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: object) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text or '"' in text) else text


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class _PreformattedQueueHandler(logging.handlers.QueueHandler):
    """Hands the record over as it is: the listener's handler formats it.

    The standard QueueHandler formats in the caller's thread and drops
    exc_info and our `fields`, which the listener's formatter needs.
    """

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


_listener: logging.handlers.QueueListener | None = None


def _flush_on_exit() -> None:
    if _listener is not None:
        _listener.stop()  # writes what is queued, then ends the thread


def _restart_in_child() -> None:
    # A forked process (a gunicorn worker) inherits the queue but not the
    # listener's thread: without a new one its records would never be written.
    global _listener
    if _listener is not None:
        _listener = logging.handlers.QueueListener(_listener.queue, *_listener.handlers)
        _listener.start()


atexit.register(_flush_on_exit)
os.register_at_fork(after_in_child=_restart_in_child)


def setup_logging(fmt: str = "text", level: str = "info") -> None:
    """Configure the root logger; safe to call again (replaces the handler)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    global _listener
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    if _listener is not None:
        _listener.stop()
    # Threads hand records to a queue and one listener thread formats and
    # writes them: with a plain StreamHandler the bind workers of the
    # scheduler queued on its lock (3-9% of samples in `make bench`).
    records: queue.SimpleQueue = queue.SimpleQueue()
    _listener = logging.handlers.QueueListener(records, handler)
    _listener.start()
    root = logging.getLogger()
    root.handlers[:] = [_PreformattedQueueHandler(records)]
    root.setLevel(level.upper())
    # The client logs every HTTP retry at WARNING; ours already says what matters.
    logging.getLogger("urllib3").setLevel(logging.ERROR)

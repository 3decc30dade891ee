"""Logging as text for people or JSON for log pipelines; one line per event either way."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import os
import queue
import sys
import threading
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


# Records waiting for the writer thread. A writer stuck on a full pipe must
# not turn the log into a memory leak; 10,000 records are a few megabytes.
QUEUE_CAPACITY = 10_000


class _BoundedQueueHandler(logging.handlers.QueueHandler):
    """Hands records to the writer thread and never waits for it.

    When QUEUE_CAPACITY records are already waiting, a record is dropped and
    counted instead; the writer reports the count once it moves again. The
    size check and the put are two steps, so threads logging at the same
    instant can pass the capacity by one record each: bounded all the same.

    Records go over as they are: the standard QueueHandler formats in the
    caller's thread and drops exc_info and our `fields`, which the writer's
    formatter needs.
    """

    def __init__(self, records: queue.SimpleQueue, capacity: int) -> None:
        super().__init__(records)
        self.capacity = capacity
        self.dropped = 0
        self._drop_lock = threading.Lock()  # only dropping takes it

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        if self.queue.qsize() >= self.capacity:
            with self._drop_lock:
                self.dropped += 1
            return
        self.queue.put_nowait(record)

    def start_afresh(self) -> None:
        """A new, empty queue and count: what a forked child starts with."""
        self.queue = queue.SimpleQueue()
        self.dropped = 0
        self._drop_lock = threading.Lock()


# The writer wakes at most this often while records keep coming: waking it for
# every record (a thread switch and a write per log line) cost a busy process
# more than formatting the lines (make bench: ~0.1 ms per request of the webhook).
BATCH_SECONDS = 0.05
# Records written per write() at most: what the writer holds besides the queue.
BATCH_RECORDS = 1000


class _Writer(logging.handlers.QueueListener):
    """The one thread that formats and writes records, and says how many were dropped.

    It writes in batches: woken by a record, it lets BATCH_SECONDS go by, then
    formats what has queued meanwhile (up to BATCH_RECORDS) and hands it to the
    stream in one write. A line reaches stderr at most that much later; flush()
    and a fork write everything first.
    """

    def __init__(self, source: _BoundedQueueHandler, handler: logging.StreamHandler) -> None:
        super().__init__(source.queue, handler)
        self.source = source
        self.reported = 0
        self.stream_handler = handler

    def _monitor(self) -> None:
        records = self.queue
        while True:
            batch = [records.get()]
            if batch[0] is not self._sentinel:
                time.sleep(BATCH_SECONDS)
            while batch[-1] is not self._sentinel and len(batch) < BATCH_RECORDS:
                try:
                    batch.append(records.get_nowait())
                except queue.Empty:
                    break
            stop = batch[-1] is self._sentinel
            self._write([record for record in batch if record is not self._sentinel])
            if stop:
                return

    def _write(self, records: list[logging.LogRecord]) -> None:
        lines = []
        for record in [*records, *self._drop_report()]:
            try:
                lines.append(self.stream_handler.format(record) + self.stream_handler.terminator)
            except Exception:  # noqa: BLE001 - as logging does: one bad record must not stop the writer
                self.stream_handler.handleError(record)
        if not lines:
            return
        try:
            stream = self.stream_handler.stream
            stream.write("".join(lines))
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's rule: a failed write is reported, never raised
            if records:
                self.stream_handler.handleError(records[0])

    def _drop_report(self) -> list[logging.LogRecord]:
        dropped = self.source.dropped
        if dropped <= self.reported:
            return []
        record = logging.LogRecord(
            __name__,
            logging.WARNING,
            __file__,
            0,
            "%d log records dropped: %d were waiting to be written (is the log output blocked?)",
            (dropped - self.reported, self.source.capacity),
            None,
        )
        record.fields = {"dropped": dropped - self.reported, "dropped_total": dropped}
        self.reported = dropped
        return [record]

    def report_drops(self) -> None:
        self._write([])

    @property
    def running(self) -> bool:
        return self._thread is not None

    def stop(self) -> None:
        if self.running:
            super().stop()  # writes what is queued, then ends the thread
        self.report_drops()


_writer: _Writer | None = None


def flush() -> None:
    """Write what is queued and end the writer thread (at exit)."""
    if _writer is not None:
        _writer.stop()


def dropped_records() -> int:
    """Records dropped since logging was set up in this process, because the queue was full."""
    return _writer.source.dropped if _writer is not None else 0


# Forking while the writer thread runs copies the queue mid-operation: a
# SimpleQueue hands its internal lock from put() to the waiting get(), and a
# fork between the two leaves the child's copy locked with no owner, so the
# child's writer waits for ever and every line of that process is lost
# (the webhook's forked workers, now and then: bug 8). So the writer stops before a fork
# (it writes what is queued first), the parent restarts it, and the child
# starts its own on an empty queue: the parent's queued records are not the
# child's to write.
_paused_for_fork = False


def _before_fork() -> None:
    global _paused_for_fork
    if _writer is not None and _writer.running and threading.current_thread() is not _writer._thread:
        _writer.stop()
        _paused_for_fork = True


def _after_fork_in_parent() -> None:
    global _paused_for_fork
    if _paused_for_fork and _writer is not None:
        _writer.start()
    _paused_for_fork = False


def _after_fork_in_child() -> None:
    global _writer, _paused_for_fork
    if _writer is not None:
        source = _writer.source
        source.start_afresh()
        _writer = _Writer(source, *_writer.handlers)
        _writer.start()
    _paused_for_fork = False


atexit.register(flush)
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


def setup_logging(fmt: str = "text", level: str = "info") -> None:
    """Configure the root logger; safe to call again (replaces the handler)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    global _writer
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    if _writer is not None:
        _writer.stop()
    # Threads hand records to a queue and one writer thread formats and
    # writes them: with a plain StreamHandler the bind workers of the
    # scheduler queued on its lock (3-9% of samples in `make bench`).
    source = _BoundedQueueHandler(queue.SimpleQueue(), QUEUE_CAPACITY)
    _writer = _Writer(source, handler)
    _writer.start()
    root = logging.getLogger()
    root.handlers[:] = [source]
    root.setLevel(level.upper())
    # The client logs every HTTP retry at WARNING; ours already says what matters.
    logging.getLogger("urllib3").setLevel(logging.ERROR)

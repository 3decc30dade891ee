"""gpu_scheduler.logs: every line of every process arrives, and logging never waits.

Each case runs in a fresh interpreter: setup_logging replaces the root logger's
handler and starts a writer thread, and forking pytest itself would copy its
state into the children.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from gpu_scheduler import logs

FORKS = 150


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_forked_children_log_every_line_while_the_parent_is_logging():
    """The webhook's master forks its workers while its own writer thread is busy with
    its start-up lines. A child must get a working log, whatever that thread was
    doing at the fork: with a queue and a lock copied mid-handoff, the child's writer
    waited for ever and the worker logged nothing (bug 8)."""
    result = run_python(
        f"""
        import logging, os, sys, threading, time
        from gpu_scheduler import logs

        logs.setup_logging("text", "info")
        log = logging.getLogger("forks")
        done = threading.Event()

        def chatter():
            while not done.is_set():
                log.info("parent busy")
                time.sleep(0.0001)

        threading.Thread(target=chatter, daemon=True).start()
        hung = []
        for i in range({FORKS}):
            pid = os.fork()
            if pid == 0:
                log.info("child %d alive", i)
                # What atexit does at a worker's exit: write what is queued, end the writer.
                flush = threading.Thread(target=logs.flush, daemon=True)
                flush.start()
                flush.join(2)
                os._exit(3 if flush.is_alive() else 0)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) == 3:
                hung.append(i)
        done.set()
        log.info("parent done, children whose writer hung: %s", hung)
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    err = result.stderr
    assert "children whose writer hung: []" in err, err[-3000:]
    missing = [i for i in range(FORKS) if f"child {i} alive" not in err]
    assert missing == [], f"{len(missing)} of {FORKS} children's lines never arrived: {missing[:20]}"
    # Each child's line once: a child does not write the records its parent had queued.
    assert err.count("child 0 alive") == 1


def test_a_stuck_writer_makes_logging_drop_and_count_never_wait_or_grow():
    """With stderr blocked (a full pipe nobody reads), records used to pile up in an
    unbounded queue. Now the queue holds QUEUE_CAPACITY; the rest are dropped and
    counted, the caller never waits, and the count is written once the writer moves."""
    records = 3 * logs.QUEUE_CAPACITY
    result = run_python(
        f"""
        import io, logging, sys, threading, time
        from gpu_scheduler import logs

        class StuckStream(io.StringIO):
            def __init__(self):
                super().__init__()
                self.release = threading.Event()
            def write(self, text):
                self.release.wait()
                return super().write(text)

        stream = StuckStream()
        sys.stderr = stream
        logs.setup_logging("json", "info")
        log = logging.getLogger("flood")
        started = time.monotonic()
        for i in range({records}):
            log.info("record %d", i)
        seconds = time.monotonic() - started
        stream.release.set()
        logs.flush()
        sys.__stdout__.write(f"SECONDS {{seconds:.3f}} DROPPED {{logs.dropped_records()}}\\n")
        sys.__stdout__.write(stream.getvalue())
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    first, *lines = result.stdout.splitlines()
    _, seconds, _, dropped = first.split()
    written = [line for line in lines if '"msg": "record ' in line]
    assert float(seconds) < 10, "logging waited for the stuck writer"
    # At most the queue's capacity, plus the batch the writer held when it got stuck.
    assert len(written) <= logs.QUEUE_CAPACITY + logs.BATCH_RECORDS, len(written)
    assert int(dropped) == records - len(written)
    reports = [line for line in lines if "log records dropped" in line]
    assert reports, lines[-5:]
    assert f'"dropped": {dropped}' in reports[-1] or sum(
        int(line.split('"dropped": ')[1].split(",")[0].rstrip("}")) for line in reports
    ) == int(dropped), reports

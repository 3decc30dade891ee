"""List+watch caches fed from the apiserver, on raw JSON.

An informer lists a resource once (in pages, so 10,000 pods never sit in
memory as one response), hands the trimmed objects to its handler, then
watches from the list's resourceVersion. Every event and bookmark moves the
informer's resourceVersion on, and a watch that ends, by the server's timeout
or broken mid-stream, is resumed from the last one it saw, so no event is
replayed or skipped. When the apiserver has compacted that version away it
answers 410 Gone, either as an HTTP status or as an ERROR event in the stream;
then the informer lists again and the handler reconciles with the complete new
set. A handler that raises on an event also makes it list again: the event
cannot be dropped silently, and a list brings the handler back in line.

A stream that goes quiet without closing (a dead peer, a stuck proxy) is cut
by the read timeout: the apiserver sends a bookmark about every minute on a
healthy watch (allowWatchBookmarks), so no read waits longer than that. A watch
counts as working once it delivers an event or a bookmark, not when it opens: a
peer that accepts watches and then says nothing is as broken as one that
refuses them. An informer whose list or watch keeps failing, or that has heard
nothing from the apiserver for too long, says so (current()), which /readyz
reports.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from gpu_scheduler.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
# client-go spreads watch lifetimes over 5-10 minutes so many clients don't
# reconnect in step.
WATCH_SECONDS_MIN = 300
WATCH_SECONDS_MAX = 600
# kube-apiserver's watch cache sends each watcher a bookmark every minute
# (and one just before timeoutSeconds); a read that waits longer than this
# has lost its peer, whatever timeoutSeconds says.
WATCH_READ_TIMEOUT = 90.0
# A cache whose list or watch has failed for this long is not being kept current.
STALE_AFTER_SECONDS = 20.0
# The read timeout of a watch resumed after a failure (see Informer.watch).
RECOVERY_READ_TIMEOUT = 5.0
# A cache that has had no list, event or bookmark for this long is not known to be
# current, even if no request has failed (a stream that trickles blank lines never
# reaches the read timeout). A healthy watch is silent for about a minute at most:
# kube-apiserver sends a bookmark every minute, and a new watch gets its first one
# about a minute after the previous watch's last. The read timeout plus the failure
# grace, nearly twice that, is also when the failure clock reports a watch that
# stays silent (cut at 90 s, failing 20 s later), so the two checks agree.
SILENT_AFTER_SECONDS = WATCH_READ_TIMEOUT + STALE_AFTER_SECONDS
ERROR_BACKOFF_INITIAL = 0.5
ERROR_BACKOFF_MAX = 30.0
# Lists asked for by the owner (request_resync) are merged and spaced: at least this long
# apart, doubling while requests keep coming (an apiserver or etcd brownout makes every
# binding's answer doubtful, and back-to-back cluster-wide LISTs then are exactly what hurts),
# back to the minimum after a quiet spell as long as the spacing.
RESYNC_SPACING_MIN = 1.0
RESYNC_SPACING_MAX = 60.0

EXPIRED = "expired"
HANDLER_ERROR = "handler-error"
REQUESTED = "requested"
QUIET = "quiet"
RELIST_REASONS = (EXPIRED, HANDLER_ERROR, REQUESTED, QUIET)


class ResourceGone(Exception):
    """The resourceVersion to resume from is too old (HTTP 410): list again."""


class QuietWatch(Exception):
    """The watch said nothing for its whole read timeout: list to tell a quiet resource from
    a dead apiserver (see Informer._run)."""


class Resync(Exception):
    """A handler failed on an object: list again, so the cache is whole again."""


class WatchHandler(Protocol):
    def replace(self, objects: list[Any], listed_at: float) -> None:
        """The complete current set after a list whose first page was asked for at
        listed_at (time.monotonic()); anything not in it is gone."""

    def upsert(self, obj: Any) -> None:
        """An object was added or modified."""

    def delete(self, obj: Any) -> None:
        """An object was deleted, or no longer matches the selector."""


Trim = Callable[[dict], Any]


class ResyncSchedule:
    """When the lists an informer's owner asks for start: merged and spaced.

    A request names the earliest time its list may start. One list answers every request
    due by its start; a request while a list is already due no later is merged into it.
    Requested lists start at least `spacing` apart; the spacing doubles (up to `maximum`)
    while requests keep coming, and is back to `minimum` after a quiet spell of twice the
    spacing. Pure: callers pass the time (monotonic).
    """

    def __init__(self, minimum: float = RESYNC_SPACING_MIN, maximum: float = RESYNC_SPACING_MAX) -> None:
        self._minimum = minimum
        self._maximum = maximum
        self.spacing = minimum
        self._last_start = float("-inf")
        self.due: float | None = None  # when the next requested list starts; None if none is asked for
        self._fired = False  # the due time came and its list has not started yet

    def request(self, at: float) -> float | None:
        """A list starting no earlier than `at` is needed. Returns the new due time when the
        timer must be (re)set, None when an earlier-or-equal list already answers it."""
        due = max(at, self._last_start + self.spacing)
        if self.due is not None and self.due <= due:
            return None
        self.due = due
        return due

    def fired(self) -> None:
        """The due time came. The list it asked for starts soon (started()); until then
        requests merge into it, since it will answer them (due stays where it was)."""
        self._fired = True

    def started(self, now: float) -> None:
        """A list starts now. If a requested list had fired, this is it: requests from now
        on need a list of their own. Any other list (the first, one after an error) leaves
        the schedule as it was."""
        if not self._fired:
            return
        quiet = now - self._last_start > 2 * self.spacing
        self.spacing = self._minimum if quiet else min(self.spacing * 2, self._maximum)
        self._last_start = now
        self.due = None
        self._fired = False


class Informer:
    """One resource's list+watch loop on a daemon thread."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        handler: WatchHandler,
        trim: Trim,
        *,
        name: str,
        field_selector: str = "",
        label_selector: str = "",
    ) -> None:
        self._client = client
        self._path = path
        self._handler = handler
        self._trim = trim
        self.name = name
        self._selectors = {}
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        self.synced = threading.Event()
        self.relists: Counter[str] = Counter()  # reason (RELIST_REASONS) -> lists after the first
        self.resource_version: str | None = None  # the last one seen in a list, event or bookmark
        self.read_timeout = WATCH_READ_TIMEOUT
        self._failing_since: float | None = None  # monotonic; None while lists and watches work
        self.last_event_at: float | None = None  # monotonic: the last complete list, event or bookmark
        self._delay = ERROR_BACKOFF_INITIAL  # the next pause after a failure; doubles while they go on
        self._last_error = ""
        self._resync = threading.Event()
        self._resync_lock = threading.Lock()
        self._resync_timer: threading.Timer | None = None
        self._resync_schedule = ResyncSchedule()
        self._stream = None  # the open watch, so that a resync can interrupt it
        self._watch_opened_at: float | None = None  # monotonic, of the last watch that opened
        self._watch_heard = False  # whether that watch delivered an event or bookmark
        self._watch_read_timeout = WATCH_READ_TIMEOUT  # the one that watch was opened with
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def request_resync(self, at: float | None = None) -> None:
        """Asks for a list started no earlier than `at` (monotonic; now if None): the owner
        needs the complete set as of then to settle a doubt. Requests are merged (one list
        answers every request due by its start) and spaced (RESYNC_SPACING_*). When it is due,
        an open watch is interrupted and the list follows at once."""
        now = time.monotonic()
        with self._resync_lock:
            due = self._resync_schedule.request(now if at is None else at)
            if due is None:
                return  # merged into a list already due no later
            if self._resync_timer is not None:
                self._resync_timer.cancel()
            self._resync_timer = threading.Timer(max(0.0, due - now), self._resync_now)
            self._resync_timer.daemon = True
            self._resync_timer.start()

    def _resync_now(self) -> None:
        # Under the lock with the flag: a list that starts clears both at once (_list_starts).
        with self._resync_lock:
            self._resync_schedule.fired()
            self._resync.set()
        stream = self._stream
        if stream is not None:
            stream.interrupt()

    def _list_starts(self, now: float) -> None:
        """A list starts: it answers every request made so far, and a requested list that
        fired is this one."""
        with self._resync_lock:
            self._resync.clear()
            self._resync_schedule.started(now)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._resync_lock:
            if self._resync_timer is not None:
                self._resync_timer.cancel()
        stream = self._stream
        if stream is not None:
            stream.interrupt()

    def alive(self) -> bool:
        """False only once its thread has started and ended (see Scheduler.dead_parts)."""
        return self._thread.ident is None or self._thread.is_alive()

    def current(self, now: float | None = None) -> str | None:
        """None while the cache is listed and its list+watch works (or failed only briefly);
        else what is wrong, for /readyz."""
        if not self.synced.is_set():
            return f"{self.name}: not listed yet" + (f" ({self._last_error})" if self._last_error else "")
        failing_since = self._failing_since
        now = time.monotonic() if now is None else now
        if failing_since is not None and now - failing_since > STALE_AFTER_SECONDS:
            return f"{self.name}: list/watch failing for {now - failing_since:.0f}s ({self._last_error})"
        silent = self.seconds_since_last_event(now)
        if silent is not None and silent > SILENT_AFTER_SECONDS:
            return f"{self.name}: no list, event or bookmark for {silent:.0f}s"
        return None

    def seconds_since_last_event(self, now: float | None = None) -> float | None:
        """How long the apiserver has said nothing to this cache; None before its first list."""
        last_event_at = self.last_event_at
        if last_event_at is None:
            return None
        return (time.monotonic() if now is None else now) - last_event_at

    def _working(self) -> None:
        """A list completed, or the watch delivered an event or bookmark: only the
        apiserver's words prove the cache current, an open connection does not."""
        self.last_event_at = time.monotonic()
        self._failing_since = None
        self._delay = ERROR_BACKOFF_INITIAL

    def _failing(self, error: str) -> None:
        self._last_error = error[:300]
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._resync.is_set() and self.resource_version is not None:
                self.relists[REQUESTED] += 1
                self.resource_version = None
            listing = self.resource_version is None
            if listing:
                self._list_starts(time.monotonic())
            try:
                if listing:
                    self.resource_version = self.list()
                    self.synced.set()
                self.watch()
            except ResourceGone:
                log.info("%s: resourceVersion %s expired, listing again", self.name, self.resource_version)
                self.relists[EXPIRED] += 1
                self.resource_version = None
            except Resync as err:
                # A failed event: list again at once. A failed list: after a
                # pause, so a handler that keeps failing cannot spin.
                self.relists[HANDLER_ERROR] += 1
                self.resource_version = None
                if listing:
                    self._pause(str(err))
                else:
                    log.error("%s: %s; listing again", self.name, err)
            except QuietWatch:
                # Nothing for the whole read timeout: a dead peer, or a resource that
                # did not change. kube-apiserver sends a bookmark only once its watch
                # cache has moved past the watch's version, and on a quiet resource
                # that needs etcd's progress notifications, which not every cluster's
                # etcd sends (kwokctl's does not). A list tells them apart: it works
                # (the cache is current) or it fails (the failure clock runs).
                log.info("%s: no event for %.0fs, listing to check the cache", self.name, self._watch_read_timeout)
                self.relists[QUIET] += 1
                self.resource_version = None
            except (ApiError, OSError, ValueError) as err:
                # Network trouble, an apiserver restart, a stream cut: resume from the
                # last version seen after a pause, so a flapping apiserver isn't hammered.
                self._pause(str(err))

    def _watch_was_quiet_to_the_read_timeout(self) -> bool:
        opened_at = self._watch_opened_at
        if opened_at is None or self._watch_heard or self._stop.is_set():
            return False
        # The read timeout cut it (a little slack: the clock is read after the cut).
        return time.monotonic() - opened_at >= 0.9 * self._watch_read_timeout

    def _pause(self, error: str) -> None:
        self._failing(error)
        log.warning("%s: list/watch failed, retrying in %.1fs: %s", self.name, self._delay, error)
        self._stop.wait(self._delay * random.uniform(0.8, 1.2))
        self._delay = min(self._delay * 2, ERROR_BACKOFF_MAX)

    def list(self) -> str:
        """Lists every page; hands the handler the complete set; returns its resourceVersion."""
        objects: list[Any] = []
        listed_at = time.monotonic()
        query = dict(self._selectors, limit=str(LIST_PAGE_SIZE))
        while True:
            try:
                page = self._client.get(self._path, query)
            except ApiError as err:
                if err.status == 410 and "continue" in query:
                    # The continue token expired mid-list: start over.
                    objects.clear()
                    query.pop("continue")
                    continue
                raise
            try:
                objects.extend(self._trim(item) for item in page.get("items") or ())
            except Exception as err:
                log.exception("%s: reading a listed object failed", self.name)
                raise Resync(f"reading a listed object failed: {err!r}") from err
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                try:
                    self._handler.replace(objects, listed_at)
                except Exception as err:
                    log.exception("%s: handling the list failed", self.name)
                    raise Resync(f"handling the list failed: {err!r}") from err
                self._working()
                return metadata["resourceVersion"]
            query["continue"] = token

    def watch(self, seconds: int | None = None) -> None:
        """Follows one watch from self.resource_version until the server ends it, moving
        self.resource_version on with every event and bookmark.

        Raises ResourceGone when that version is too old to resume from, Resync when the
        handler failed on an event, ApiError when the stream breaks or stays silent longer
        than the read timeout.
        """
        seconds = seconds or random.randint(WATCH_SECONDS_MIN, WATCH_SECONDS_MAX)
        query = dict(
            self._selectors,
            watch="1",
            resourceVersion=self.resource_version or "",
            allowWatchBookmarks="true",
            timeoutSeconds=str(seconds),
        )
        self._watch_opened_at = None
        # A watch resumed after a failure must speak soon: it proves nothing until it does,
        # and a quiet resource may say nothing for the whole read timeout, which would keep
        # /readyz false that long after the apiserver is back. Quiet that long, it is
        # followed by a list, which proves the cache current (or fails).
        self._watch_read_timeout = (
            min(self.read_timeout, RECOVERY_READ_TIMEOUT) if self._failing_since is not None else self.read_timeout
        )
        try:
            with self._client.stream(self._path, query, self._watch_read_timeout) as lines:
                self._stream = lines
                self._watch_opened_at = time.monotonic()
                self._watch_heard = False
                if self._resync.is_set():
                    return  # asked for while connecting
                for line in lines:
                    if self._stop.is_set() or self._resync.is_set():
                        break
                    if line.strip():
                        self._dispatch(orjson.loads(line))
        except ApiError as err:
            if err.status == 410:
                raise ResourceGone() from err
            if self._watch_was_quiet_to_the_read_timeout():
                raise QuietWatch() from err
            raise
        finally:
            self._stream = None

    def _dispatch(self, event: dict) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise ResourceGone()
            raise ApiError("WATCH", self._path, int(obj.get("code") or 0), json.dumps(obj))
        new_version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            try:
                if kind == "DELETED":
                    self._handler.delete(self._trim(obj))
                elif kind in ("ADDED", "MODIFIED"):
                    self._handler.upsert(self._trim(obj))
            except Exception as err:
                # The cache may now be wrong about this object: list again rather
                # than drop the event. (The version stays where it was: a list
                # replaces it anyway.)
                log.exception("%s: handling a %s event failed", self.name, kind)
                raise Resync(f"handling a {kind} event failed: {err!r}") from err
        if new_version:
            self.resource_version = new_version
        self._watch_heard = True
        self._working()

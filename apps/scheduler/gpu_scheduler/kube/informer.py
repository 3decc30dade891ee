"""List+watch caches fed from the apiserver, on raw JSON.

An informer lists a resource once (in pages, so 10,000 pods never sit in
memory as one response), hands the trimmed objects to its handler, then
watches from the list's resourceVersion. A watch that ends is resumed from the
last resourceVersion it saw (bookmarks keep that fresh on quiet streams). When
the apiserver has compacted that version away it answers 410 Gone, either as
an HTTP status or as an ERROR event in the stream; then the informer lists
again and the handler reconciles with the complete new set.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from typing import Protocol

from gpu_scheduler.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
# client-go spreads watch lifetimes over 5-10 minutes so many clients don't
# reconnect in step; a watch's read timeout leaves room past the server's end.
WATCH_SECONDS_MIN = 300
WATCH_SECONDS_MAX = 600
WATCH_READ_GRACE = 30.0
ERROR_BACKOFF_INITIAL = 0.5
ERROR_BACKOFF_MAX = 30.0


class ResourceGone(Exception):
    """The resourceVersion to resume from is too old (HTTP 410): list again."""


class WatchHandler(Protocol):
    def replace(self, objects: list[dict]) -> None:
        """The complete current set after a list; anything not in it is gone."""

    def upsert(self, obj: dict) -> None:
        """An object was added or modified."""

    def delete(self, obj: dict) -> None:
        """An object was deleted, or no longer matches the selector."""


Trim = Callable[[dict], dict]


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
        self.relists = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        resource_version: str | None = None
        delay = ERROR_BACKOFF_INITIAL
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self.list()
                    self.synced.set()
                resource_version = self.watch(resource_version)
                delay = ERROR_BACKOFF_INITIAL
            except ResourceGone:
                log.info("%s: resourceVersion %s expired, listing again", self.name, resource_version)
                self.relists += 1
                resource_version = None
            except (ApiError, OSError, ValueError) as err:
                # Network trouble or an apiserver restart: resume from where we
                # were after a pause, so a flapping apiserver isn't hammered.
                log.warning("%s: watch failed, retrying in %.1fs: %s", self.name, delay, err)
                self._stop.wait(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, ERROR_BACKOFF_MAX)

    def list(self) -> str:
        """Lists every page; hands the handler the complete set; returns its resourceVersion."""
        objects: list[dict] = []
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
            objects.extend(self._trim(item) for item in page.get("items") or ())
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                self._handler.replace(objects)
                return metadata["resourceVersion"]
            query["continue"] = token

    def watch(self, resource_version: str, seconds: int | None = None) -> str:
        """Follows one watch until the server ends it; returns the last resourceVersion.

        Raises ResourceGone when resource_version is too old to resume from.
        """
        seconds = seconds or random.randint(WATCH_SECONDS_MIN, WATCH_SECONDS_MAX)
        query = dict(
            self._selectors,
            watch="1",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(seconds),
        )
        try:
            with self._client.stream(self._path, query, seconds + WATCH_READ_GRACE) as lines:
                for line in lines:
                    if self._stop.is_set():
                        break
                    if line.strip():
                        resource_version = self._dispatch(json.loads(line), resource_version)
        except ApiError as err:
            if err.status == 410:
                raise ResourceGone() from err
            raise
        return resource_version

    def _dispatch(self, event: dict, resource_version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise ResourceGone()
            raise ApiError("WATCH", self._path, int(obj.get("code") or 0), json.dumps(obj))
        new_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
        if kind == "BOOKMARK":
            return new_version
        try:
            if kind == "DELETED":
                self._handler.delete(self._trim(obj))
            elif kind in ("ADDED", "MODIFIED"):
                self._handler.upsert(self._trim(obj))
        except Exception:  # a bug in one handler call must not kill the cache
            log.exception("%s: handling %s event failed", self.name, kind)
        return new_version

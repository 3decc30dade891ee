"""The scheduling queue: which pending pod to try next, and when to try again.

Pure and single-threaded (the runner wraps it in a lock and a condition);
every time-dependent call takes `now`, so tests drive time explicitly.

A pod is in exactly one state:
  active         waiting for a worker, in arrival order
  in flight      a worker is deciding or binding it
  backoff        failed for a reason time or a node change can cure; retried
                 when its delay expires or at once when a node it waits on
                 appears, becomes Ready or is uncordoned, or frees GPUs
  unschedulable  failed for a reason only a change to the pod can cure (an
                 invalid map, no index); retried when the pod changes
A change to a pod's scheduling inputs (its map, its index) makes it active at
once, whatever its state; a change that lands while it is in flight is
remembered and sends it straight back to active when the attempt ends.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

ACTIVE = "active"
IN_FLIGHT = "in-flight"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"

INITIAL_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
JITTER = 0.2  # delays spread over +-10%, so pods that failed together don't retry in step


def backoff_delay(
    attempts: int, jitter: float, initial: float = INITIAL_BACKOFF_SECONDS, maximum: float = MAX_BACKOFF_SECONDS
) -> float:
    """Delay before retry number `attempts` (1-based): doubling, capped, jittered.

    jitter is a number in [0, 1) (a random draw) that scales the delay within
    +-JITTER/2.
    """
    base = min(initial * 2 ** max(0, attempts - 1), maximum)
    return min(maximum, base * (1 - JITTER / 2 + JITTER * jitter))


def pod_uid(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("uid") or ""


def scheduling_inputs(pod: dict) -> tuple:
    """What decide() reads of a pod; a change in it can change the decision."""
    metadata = pod.get("metadata") or {}
    return (
        metadata.get("uid"),
        metadata.get("annotations"),
        metadata.get("labels"),
        metadata.get("ownerReferences"),
        metadata.get("deletionTimestamp"),
    )


@dataclass
class _Entry:
    pod: dict
    state: str = ACTIVE
    attempts: int = 0
    ready_at: float = 0.0
    waiting_on: tuple[str, ...] = ()
    changed_in_flight: bool = False
    # Bumped at every state change; stale heap items carry an old one.
    generation: int = 0


@dataclass
class SchedulingQueue:
    initial_backoff: float = INITIAL_BACKOFF_SECONDS
    max_backoff: float = MAX_BACKOFF_SECONDS
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _active: deque = field(default_factory=deque)
    _backoff: list = field(default_factory=list)  # heap of (ready_at, seq, key, generation)
    _waiting: dict[str, set[str]] = field(default_factory=dict)  # node name/alias -> keys
    _seq: int = 0

    # -- feeding from the watch ------------------------------------------------

    def upsert(self, key: str, pod: dict) -> bool:
        """A pending pod was added or changed; True if it was made active."""
        entry = self._entries.get(key)
        if entry is None or pod_uid(entry.pod) != pod_uid(pod):
            if entry is not None:
                self._leave(key, entry)
            self._entries[key] = _Entry(pod)
            self._active.append(key)
            return True
        changed = scheduling_inputs(entry.pod) != scheduling_inputs(pod)
        entry.pod = pod
        if not changed:
            return False
        if entry.state == IN_FLIGHT:
            entry.changed_in_flight = True
            return False
        if entry.state == ACTIVE:
            return False
        entry.attempts = 0
        self._activate(key, entry)
        return True

    def delete(self, key: str) -> None:
        """The pod is gone, or bound (it left the pending selector)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._leave(key, entry)

    def replace(self, pods: dict[str, dict]) -> None:
        """A re-list: the complete pending set. Pods not in it are dropped."""
        for key in [k for k in self._entries if k not in pods]:
            self.delete(key)
        for key, pod in pods.items():
            self.upsert(key, pod)

    # -- taking work -------------------------------------------------------------

    def pop(self, now: float) -> tuple[str, dict] | None:
        """The next pod to try, marked in flight; None when none is due."""
        self._promote_due(now)
        while self._active:
            key = self._active.popleft()
            entry = self._entries.get(key)
            if entry is None or entry.state != ACTIVE:
                continue  # deleted, or moved on since it was queued
            entry.state = IN_FLIGHT
            entry.generation += 1
            return key, entry.pod
        return None

    def next_due(self) -> float | None:
        """When the earliest backoff expires, or None if nothing waits on time."""
        while self._backoff:
            ready_at, _, key, generation = self._backoff[0]
            entry = self._entries.get(key)
            if entry is not None and entry.state == BACKOFF and entry.generation == generation:
                return ready_at
            heapq.heappop(self._backoff)
        return None

    def has_active(self) -> bool:
        return bool(self._active)

    # -- outcomes of an attempt ------------------------------------------------------

    def done(self, key: str, uid: str) -> None:
        """Bound (or found bound): forget it, unless a newer same-named pod replaced it."""
        entry = self._entries.get(key)
        if entry is not None and pod_uid(entry.pod) == uid:
            self.delete(key)

    def retry_later(self, key: str, now: float, jitter: float, waiting_on: Iterable[str] = ()) -> float | None:
        """Failed for a reason time or a node event can cure; returns the delay."""
        entry = self._in_flight(key)
        if entry is None:
            return None
        if entry.changed_in_flight:
            self._activate(key, entry)
            return 0.0
        entry.attempts += 1
        delay = backoff_delay(entry.attempts, jitter, self.initial_backoff, self.max_backoff)
        entry.state = BACKOFF
        entry.generation += 1
        entry.ready_at = now + delay
        self._seq += 1
        heapq.heappush(self._backoff, (entry.ready_at, self._seq, key, entry.generation))
        self._wait_on(key, entry, waiting_on)
        return delay

    def give_up_until_changed(self, key: str) -> None:
        """Failed for a reason only a change to the pod can cure."""
        entry = self._in_flight(key)
        if entry is None:
            return
        if entry.changed_in_flight:
            self._activate(key, entry)
            return
        entry.attempts += 1
        entry.state = UNSCHEDULABLE
        entry.generation += 1

    def wake(self, names: Iterable[str]) -> int:
        """Nodes changed for the better: retry the pods waiting on them now."""
        woken = 0
        for name in names:
            for key in self._waiting.pop(name, ()):
                entry = self._entries.get(key)
                if entry is not None and entry.state == BACKOFF:
                    self._activate(key, entry)
                    woken += 1
        return woken

    # -- introspection ---------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        counts = {ACTIVE: 0, IN_FLIGHT: 0, BACKOFF: 0, UNSCHEDULABLE: 0}
        for entry in self._entries.values():
            counts[entry.state] += 1
        return counts

    def state_of(self, key: str) -> str | None:
        entry = self._entries.get(key)
        return entry.state if entry else None

    def attempts_of(self, key: str) -> int:
        entry = self._entries.get(key)
        return entry.attempts if entry else 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    # -- internals ---------------------------------------------------------------------

    def _in_flight(self, key: str) -> _Entry | None:
        entry = self._entries.get(key)
        return entry if entry is not None and entry.state == IN_FLIGHT else None

    def _activate(self, key: str, entry: _Entry) -> None:
        self._unwait(key, entry)
        entry.state = ACTIVE
        entry.changed_in_flight = False
        entry.generation += 1
        self._active.append(key)

    def _promote_due(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, _, key, generation = heapq.heappop(self._backoff)
            entry = self._entries.get(key)
            if entry is not None and entry.state == BACKOFF and entry.generation == generation:
                self._activate(key, entry)

    def _wait_on(self, key: str, entry: _Entry, names: Iterable[str]) -> None:
        entry.waiting_on = tuple(dict.fromkeys(n for n in names if n))
        for name in entry.waiting_on:
            self._waiting.setdefault(name, set()).add(key)

    def _unwait(self, key: str, entry: _Entry) -> None:
        for name in entry.waiting_on:
            keys = self._waiting.get(name)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._waiting[name]
        entry.waiting_on = ()

    def _leave(self, key: str, entry: _Entry) -> None:
        # Heap and deque items die lazily: their generation no longer matches.
        self._unwait(key, entry)
        entry.state = "gone"
        entry.generation += 1

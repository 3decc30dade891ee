"""The scheduling queue: which pending pod to try next, and when to try again.

Pure and single-threaded (state.py owns it, behind its lock);
every time-dependent call takes `now`, so tests drive time explicitly.

Pods are keyed by UID: a pod deleted and recreated under the same name is a
new pod, and the outcome of an attempt on the old one can never land on it.
Nothing outlives its pod: a deleted pod leaves the active order and the
waiting sets at once, and stale backoff timers are swept as soon as they
outnumber the live ones, so a standby replica, which never takes pods off the
queue, holds no more than the pods pending now.

A pod is in exactly one state:
  active         waiting for a worker, in arrival order
  in flight      a worker is deciding or binding it
  backoff        failed for a reason time or a node change can cure; retried
                 when its delay expires or at once when a node it waits on
                 changes for the better (appears, becomes Ready, is
                 uncordoned, frees resources or GPUs)
  unschedulable  failed for a reason only a change to the pod can cure (an
                 invalid map, no index); retried when the pod changes
A change to a pod's scheduling inputs (its map, its index, its tolerations...)
makes it active at once, whatever its state; a change that lands while it is
in flight is remembered and sends it straight back to active when the attempt
ends.
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

ACTIVE = "active"
IN_FLIGHT = "in-flight"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
STATES = (ACTIVE, IN_FLIGHT, BACKOFF, UNSCHEDULABLE)

INITIAL_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
JITTER = 0.2  # delays spread over +-10%, so pods that failed together don't retry in step
# Below this many heap items a sweep is not worth its time.
SWEEP_MIN_ITEMS = 64


def backoff_delay(
    attempts: int, jitter: float, initial: float = INITIAL_BACKOFF_SECONDS, maximum: float = MAX_BACKOFF_SECONDS
) -> float:
    """Delay before retry number `attempts` (1-based): doubling, capped, jittered.

    jitter is a number in [0, 1) (a random draw) that scales the delay within
    +-JITTER/2.
    """
    base = min(initial * 2 ** max(0, attempts - 1), maximum)
    return min(maximum, base * (1 - JITTER / 2 + JITTER * jitter))


def scheduling_inputs(pod: dict) -> tuple:
    """What decide() reads of a pod; a change in it can change the decision."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return (
        metadata.get("uid"),
        metadata.get("annotations"),
        metadata.get("labels"),
        metadata.get("ownerReferences"),
        metadata.get("deletionTimestamp"),
        spec.get("nodeSelector"),
        spec.get("affinity"),
        spec.get("tolerations"),
        pod.get("requests"),
    )


@dataclass(slots=True)
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
    _entries: dict[str, _Entry] = field(default_factory=dict)  # uid -> entry
    _active: OrderedDict = field(default_factory=OrderedDict)  # uids in arrival order -> None
    _backoff: list = field(default_factory=list)  # heap of (ready_at, seq, uid, generation)
    _waiting: dict[str, set[str]] = field(default_factory=dict)  # node name/alias -> uids
    _counts: Counter = field(default_factory=Counter)  # state -> entries in it
    _seq: int = 0

    # -- feeding from the watch ------------------------------------------------

    def upsert(self, key: str, pod: dict) -> bool:
        """A pending pod (key: its UID) was added or changed; True if it was made active."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(pod, state="")
            self._activate(key, entry)
            return True
        changed = scheduling_inputs(entry.pod) != scheduling_inputs(pod)
        entry.pod = pod
        if not changed or entry.state == ACTIVE:
            return False
        if entry.state == IN_FLIGHT:
            entry.changed_in_flight = True
            return False
        entry.attempts = 0
        self._activate(key, entry)
        return True

    def delete(self, key: str) -> dict | None:
        """The pod is gone, or bound (it left the pending selector); returns it if it was queued."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        # Heap items die lazily (their generation no longer matches; see
        # _sweep_backoff); the active order and the waiting sets forget it now.
        self._unwait(key, entry)
        self._active.pop(key, None)
        self._set_state(entry, "")
        return entry.pod

    def replace(self, pods: dict[str, dict]) -> list[dict]:
        """A re-list: the complete pending set (uid -> pod). Pods not in it are dropped and returned."""
        gone = [key for key in self._entries if key not in pods]
        dropped = [pod for pod in (self.delete(key) for key in gone) if pod is not None]
        for key, pod in pods.items():
            self.upsert(key, pod)
        return dropped

    # -- taking work -------------------------------------------------------------

    def pop(self, now: float) -> tuple[str, dict] | None:
        """The next pod to try, marked in flight; None when none is due."""
        self._promote_due(now)
        if not self._active:
            return None
        key, _ = self._active.popitem(last=False)
        entry = self._entries[key]
        self._set_state(entry, IN_FLIGHT)
        return key, entry.pod

    def claim(self, key: str) -> dict | None:
        """Takes one pod, in whatever state it waits, into flight with the pod a worker popped:
        a gang's pods are bound together by one worker (scheduling.gangs). None when it is not
        waiting (another worker has it, or it is gone)."""
        entry = self._entries.get(key)
        if entry is None or entry.state in ("", IN_FLIGHT):
            return None
        self._unwait(key, entry)
        self._active.pop(key, None)
        self._set_state(entry, IN_FLIGHT)
        return entry.pod

    def nudge(self, key: str) -> None:
        """A pod in flight will be tried again as soon as its attempt ends, as if it had
        changed: a gang attempt found it busy, and what woke that attempt may be what it needs."""
        entry = self._in_flight(key)
        if entry is not None:
            entry.changed_in_flight = True

    def next_due(self) -> float | None:
        """When the earliest backoff expires, or None if nothing waits on time."""
        while self._backoff:
            ready_at, _, key, generation = self._backoff[0]
            if self._live(key, generation):
                return ready_at
            heapq.heappop(self._backoff)
        return None

    def has_active(self) -> bool:
        return bool(self._active)

    # -- outcomes of an attempt ------------------------------------------------------

    def done(self, key: str) -> None:
        """Bound, found bound, or gone: forget it."""
        self.delete(key)

    def retry_later(self, key: str, now: float, jitter: float, waiting_on: Iterable[str] = ()) -> float | None:
        """Failed for a reason time or a node event can cure; returns the delay (None when the
        pod is no longer in flight: deleted meanwhile)."""
        entry = self._in_flight(key)
        if entry is None:
            return None
        if entry.changed_in_flight:
            self._activate(key, entry)
            return 0.0
        entry.attempts += 1
        delay = backoff_delay(entry.attempts, jitter, self.initial_backoff, self.max_backoff)
        self._set_state(entry, BACKOFF)
        entry.ready_at = now + delay
        self._seq += 1
        heapq.heappush(self._backoff, (entry.ready_at, self._seq, key, entry.generation))
        self._sweep_backoff()
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
        self._set_state(entry, UNSCHEDULABLE)

    def wake(self, names: Iterable[str], sparing: Iterable[str] = ()) -> int:
        """Nodes changed for the better: retry the pods waiting on them now, except `sparing`
        (pods whose own hold was what left: that frees nothing for them)."""
        spared = set(sparing)
        woken = 0
        for name in names:
            waiting = self._waiting.get(name)
            if not waiting:
                continue
            for key in [k for k in waiting if k not in spared]:
                entry = self._entries.get(key)
                if entry is not None and entry.state == BACKOFF:
                    self._activate(key, entry)
                    woken += 1
        return woken

    # -- introspection ---------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return {state: self._counts[state] for state in STATES}

    def state_of(self, key: str) -> str | None:
        entry = self._entries.get(key)
        return entry.state if entry else None

    def attempts_of(self, key: str) -> int:
        entry = self._entries.get(key)
        return entry.attempts if entry else 0

    def pod_of(self, key: str) -> dict | None:
        entry = self._entries.get(key)
        return entry.pod if entry else None

    def waiting_on(self, key: str) -> tuple[str, ...]:
        entry = self._entries.get(key)
        return entry.waiting_on if entry else ()

    def keys(self) -> list[str]:
        return list(self._entries)

    def footprint(self) -> dict[str, int]:
        """How many items each internal structure holds: nothing may outlive its pod."""
        return {
            "entries": len(self._entries),
            "active": len(self._active),
            "backoff timers": len(self._backoff),
            "waiting": sum(len(keys) for keys in self._waiting.values()),
        }

    def check(self) -> None:
        """Asserts the internal structures agree (for tests): each pod in one state, the active
        order holding exactly the active pods, the waiting sets only pods in backoff."""
        states = Counter(entry.state for entry in self._entries.values())
        assert set(states) <= set(STATES), states
        assert {s: states[s] for s in STATES} == self.counts(), (states, self.counts())
        assert set(self._active) == {k for k, e in self._entries.items() if e.state == ACTIVE}
        for name, keys in self._waiting.items():
            for key in keys:
                entry = self._entries.get(key)
                assert entry is not None and entry.state == BACKOFF and name in entry.waiting_on, (name, key)
        live = {(k, e.generation) for k, e in self._entries.items() if e.state == BACKOFF}
        assert live <= {(item[2], item[3]) for item in self._backoff}, "a pod in backoff has no timer"

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    # -- internals ---------------------------------------------------------------------

    def _set_state(self, entry: _Entry, state: str) -> None:
        if entry.state:
            self._counts[entry.state] -= 1
        if state:
            self._counts[state] += 1
        entry.state = state
        entry.generation += 1

    def _live(self, key: str, generation: int) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.state == BACKOFF and entry.generation == generation

    def _in_flight(self, key: str) -> _Entry | None:
        entry = self._entries.get(key)
        return entry if entry is not None and entry.state == IN_FLIGHT else None

    def _activate(self, key: str, entry: _Entry) -> None:
        self._unwait(key, entry)
        self._set_state(entry, ACTIVE)
        entry.changed_in_flight = False
        self._active[key] = None

    def _promote_due(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, _, key, generation = heapq.heappop(self._backoff)
            if self._live(key, generation):
                self._activate(key, self._entries[key])

    def _sweep_backoff(self) -> None:
        # Timers of pods woken early or deleted die lazily; once they outnumber the
        # pods really in backoff, rebuild the heap without them (amortised O(1)).
        if len(self._backoff) > SWEEP_MIN_ITEMS and len(self._backoff) > 2 * self._counts[BACKOFF]:
            self._backoff = [item for item in self._backoff if self._live(item[2], item[3])]
            heapq.heapify(self._backoff)

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

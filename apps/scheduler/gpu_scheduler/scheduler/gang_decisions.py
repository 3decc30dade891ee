"""Deciding a gang all or none, when a worker takes one of its pods off the queue.

Any pod of a gang stands for all of it: the worker decides every pending pod of the gang,
each with the ones before it assumed (two ranks on one node must fit together), and either
takes them all into flight to bind them (a GangPlan), or assumes none and the pod it took
waits, with an Event saying what the gang lacks. Each pod of the gang is retried on its own
backoff and woken by a change on any node the gang's map names, so whichever comes first
places the whole gang.

Runs under the state's lock (SchedulerState.decide): nothing changes between deciding the
members and taking them off the queue. A gang that is partly bound (a binding failed, the
scheduler died mid-gang) is decided the same way over what is left: its bound pods stay,
the rest go all together once they can, and its GPUs stay reserved meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_scheduler.kube.objects import pod_key
from gpu_scheduler.placement import PlacementError, placement_for
from gpu_scheduler.scheduling import Decision, decide
from gpu_scheduler.scheduling.gangs import (
    GANG_PARTIAL,
    GANG_TIMEOUT,
    GANG_WAITING,
    GangPlan,
    GangView,
    listed,
)
from gpu_scheduler.scheduling.nodes import NodeResolutionError

from .queue import IN_FLIGHT

if TYPE_CHECKING:
    from .state import SchedulerState


def decide_gang(state: SchedulerState, uid: str, pod: dict, gang: str, wall: float) -> Decision | GangPlan:
    view = state.gang_view(gang)
    scheduling_map = view.scheduling_map()
    if isinstance(scheduling_map, str):
        return _wait(state, view, pod, f"waits: {scheduling_map}", (), wall)
    nodes = _nodes(state, scheduling_map)
    missing = view.missing(scheduling_map)
    if missing:
        why = (
            f"waits for its pods of index {listed(missing)}: its map names {len(scheduling_map)} "
            f"({len(view.pending)} pending, {len(view.placed)} bound)"
        )
        return _wait(state, view, pod, why, nodes, wall)
    members = view.by_index()
    if uid not in {m.uid for m in members.values()}:
        why = f"waits: another of its pods has index {_index(pod)}, and each index takes one pod"
        return _wait(state, view, pod, why, nodes, wall)
    busy = [m for m in members.values() if m.uid != uid and state.queue.state_of(m.uid) == IN_FLIGHT]
    if busy:
        # Another worker is deciding or binding one of them; it goes again as soon as it is
        # done, so that the change that woke this attempt is not lost.
        for m in busy:
            state.queue.nudge(m.uid)
        return _wait(state, view, pod, f"waits: its pod {busy[0].key} is being tried by another worker", nodes, wall)

    reserved = state.reservations(wall)
    decided: list[tuple[str, dict, Decision]] = []
    for index in sorted(members):
        m = members[index]
        decision = decide(m.pod, state.cache, state.policy, reserved, gang)
        if not decision.bind:
            for assumed_uid, _, _ in decided:
                state.cache.forget(assumed_uid)
            why = f"waits: its pod {m.key} (index {index}) cannot go yet: {decision.reason}"
            return _wait(state, view, pod, why, nodes, wall)
        state.assume(m.uid, m.pod, decision, gang)
        decided.append((m.uid, m.pod, decision))
    for member_uid, _, _ in decided:
        if member_uid != uid:
            state.queue.claim(member_uid)
    decided.sort(key=lambda d: d[0] != uid)  # the pod the worker took first
    return GangPlan(gang, tuple(decided), complete=True, newest=view.newest)


def _wait(
    state: SchedulerState,
    view: GangView,
    pod: dict,
    why: str,
    nodes: tuple[str, ...],
    wall: float,
) -> Decision:
    """The pod's refusal on behalf of its gang, always retried with backoff: even a refusal
    only a change can cure (a map the gang cannot use) may be cured by another of its pods
    changing or appearing, which this pod's own queue entry would not notice."""
    bound = ""
    event = GANG_WAITING
    if view.placed:
        event = GANG_PARTIAL
        bound = (
            f" is partly bound (index {listed(sorted(view.placed_indexes()))} bound: they stay bound, "
            "and the GPUs of the rest stay reserved for it until they are bound too) and"
        )
    message = f"gang {view.key}{bound} {why}; none of its waiting pods is bound until all of them can be"
    if view.timed_out(wall, state.gang_timeout):
        event = GANG_TIMEOUT
        message += (
            f"; it has waited more than {state.gang_timeout:g} s since its newest pod was created, so the GPUs "
            "it needs are no longer reserved for it (a change to its pods starts the clock again)"
        )
    entry = None
    try:
        entry = placement_for(pod)
    except PlacementError:
        pass
    return Decision(
        pod_key(pod), entry, None, bind=False, reason=message, retryable=True, event=event, waiting_on=nodes
    )


def _nodes(state: SchedulerState, scheduling_map) -> tuple[str, ...]:
    """Every node the gang's map names, as written and as resolved: a change to any of them
    may be what lets the whole gang on."""
    names: dict[str, None] = {}
    for entry in scheduling_map.values():
        names[entry.node] = None
        try:
            names[state.cache.nodes.resolve(entry.node).name] = None
        except NodeResolutionError:
            pass
    return tuple(names)


def _index(pod: dict) -> str:
    try:
        return str(placement_for(pod).index)
    except PlacementError:
        return "?"

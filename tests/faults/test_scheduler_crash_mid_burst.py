"""`kill -9` of the scheduler in the middle of a 500-pod burst, then a new scheduler process.

A pod's spec.nodeName can be set only once (the API server answers 409 to a second
binding), so "exactly once" is checked where a second bind would show: the schedulers' own
log lines (one per bind, with its outcome), the Scheduled Events (at most one per pod), and
the restarted scheduler's bind metric. The killed process's last log lines may be lost with it
(it writes them from a queue): those pods are bound, by it, and reported as such.
"""

from __future__ import annotations

import time

import pytest
from e2e.cluster import wait_for_pods
from e2e.waiting import NotYet, wait_for

from .bursts import (
    Burst,
    bind_outcomes,
    binds_per_pod,
    burst_pods,
    count_bound,
    misplaced,
    scheduled_events,
    wait_all_bound,
)

pytestmark = pytest.mark.faults

BURST = 500
KILL_AFTER_BOUND = 150


def test_kill_9_mid_burst_and_a_restart_bind_every_pod_once_where_its_map_says(
    api_client, ns, scheduler_name, start_scheduler
):
    first = start_scheduler("scheduler-1", "--gpu-sharing=allow", scheduler_name=scheduler_name)
    burst = Burst(api_client, ns, burst_pods("crash", BURST, scheduler_name)).start()

    def enough_bound() -> None:
        if first.pods_scheduled() < KILL_AFTER_BOUND:
            raise NotYet(f"{first.pods_scheduled()} bound")

    wait_for(f"the first scheduler to bind {KILL_AFTER_BOUND} pods", enough_bound, 60, interval=0.05)
    first.kill()
    killed = time.monotonic()
    created_at_kill, bound_at_kill = len(burst.report.created), count_bound(api_client, ns)
    assert created_at_kill < BURST, "the burst was over before the kill; nothing was in the middle"

    second = start_scheduler("scheduler-2", "--gpu-sharing=allow", scheduler_name=scheduler_name)
    report = burst.wait()
    assert report.unfinished == [] and len(report.created) == BURST, report
    pods = wait_all_bound(api_client, ns, BURST, timeout=120, scheduler=second)
    recovered = time.monotonic() - killed

    assert misplaced(pods) == {}
    running = wait_for_pods(api_client, ns, BURST, timeout=60, phases=("Running",))
    assert len(running) == BURST  # none left Pending
    by_first, by_second = bind_outcomes(first.log_path, ns), bind_outcomes(second.log_path, ns)
    binds = binds_per_pod(by_first, by_second)
    assert max(binds.values()) == 1, {pod: n for pod, n in binds.items() if n > 1}
    unlogged = BURST - len(binds)  # bound by the first process, its log line lost with it

    def second_accounted():
        # The log is written from a queue: wait until it shows what the metric counts.
        outcomes = bind_outcomes(second.log_path, ns)
        bound = {pod for (pod, outcome) in outcomes if outcome == "bound"}
        conflicts = sum(n for (_, outcome), n in outcomes.items() if outcome == "already-bound")
        if second.pods_scheduled() != len(bound) + conflicts:
            raise NotYet(f"metric {second.pods_scheduled()}, log {len(bound)} binds + {conflicts} 409s")
        return bound, conflicts

    second_bound, conflicts = wait_for("scheduler-2's log and metric to agree", second_accounted, 10)

    def every_second_bind_announced():
        events = scheduled_events(api_client, ns)
        missing = second_bound - set(events)
        if missing:
            raise NotYet(f"{len(missing)} pods bound by scheduler-2 have no Scheduled event yet")
        return events

    events = wait_for("Scheduled events for scheduler-2's binds", every_second_bind_announced, 60, interval=1)
    assert max(events.values()) == 1, {pod: n for pod, n in events.items() if n > 1}
    print(
        f"\nkill -9 after {bound_at_kill} of {BURST} bound ({created_at_kill} created); every pod bound "
        f"{recovered:.1f}s after the kill; binds logged: scheduler-1 {len(binds) - len(second_bound)}, "
        f"scheduler-2 {len(second_bound)}, log line lost with the killed process {unlogged}; 409s {conflicts}; "
        f"pods with a Scheduled event {len(events)}, with two 0; misplaced 0; lost 0"
    )

"""A leader frozen (SIGSTOP) past its lease while pods keep coming: the standby takes the Lease
and binds them; the old leader, thawed (SIGCONT) with pods still pending, must bind nothing.
It may not know yet that it lost the Lease, but its renew deadline has passed, so it may not
bind; it exits to restart as a standby.

The oracle is the API server's audit log (audit.py): every binding carries the User-Agent of
the process that sent it, which holds the identity it competes for the Lease with. Under
--gpu-sharing=deny, with pods competing for one GPU per node all along (contention.py): no GPU
held twice, read from the cluster's pod list, and the thawed leader bound no contender either.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime

import pytest
from e2e.components import LeaderElection, start_replicas
from e2e.waiting import NotYet, wait_for

from .audit import verdict
from .bursts import Burst, burst_map, burst_pods, misplaced, wait_all_bound

pytestmark = pytest.mark.faults

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
PHASE = 40  # pods before the freeze, during it, and at the thaw


def test_a_leader_paused_past_its_lease_binds_nothing_after_it_resumes(
    api_client, ns, scheduler_name, start_scheduler, audit_log, gpu_contention
):
    contention = gpu_contention(scheduler_name)
    election = LeaderElection(scheduler_name, ns, LEASE, RENEW, RETRY)
    leader, standby = start_replicas(start_scheduler, scheduler_name, election, "--gpu-sharing=deny")
    old_agent = leader.user_agent()
    scheduling_map = burst_map(3 * PHASE)
    pods = burst_pods("pause", 3 * PHASE, scheduler_name, scheduling_map)

    Burst(api_client, ns, pods[:PHASE]).start().wait()
    wait_all_bound(api_client, ns, PHASE, timeout=30, scheduler=leader)

    leader.signal(signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        Burst(api_client, ns, pods[PHASE : 2 * PHASE]).start().wait()

        standby.wait_leads(LEASE + 10, interval=0.1)
        took_over = time.monotonic() - frozen
        wait_all_bound(api_client, ns, 2 * PHASE, timeout=30, scheduler=standby)
        # Pods are pending when the old leader wakes up: it could bind them, and must not.
        Burst(api_client, ns, pods[2 * PHASE :]).start().wait()
    finally:
        resumed_at = datetime.now(UTC)
        leader.signal(signal.SIGCONT)
    placed = wait_all_bound(api_client, ns, 3 * PHASE, timeout=60, scheduler=standby)
    assert misplaced(placed) == {}

    def exited() -> int:
        if leader.alive():
            raise NotYet(f"{leader.name} still runs")
        return leader.exit_code()

    assert wait_for(f"{leader.name} to exit after losing the Lease", exited, 30) == 1
    gpus = contention.verify()

    found = verdict(audit_log, ns)
    assert found.twice() == {}, f"pods bound twice: {found.twice()}"
    late = [
        b
        for namespace in (ns, contention.namespace)
        for b in audit_log.bindings(namespace)
        if b.user_agent == old_agent and b.received > resumed_at
    ]
    stored_late = [b.pod for b in late if b.stored]
    assert stored_late == [], f"the old leader bound {stored_late} after it resumed"
    print(
        f"\nleader frozen; {standby.name} led {took_over:.1f}s later (lease {LEASE:g}s) and bound the rest; "
        f"after the thaw the old leader sent {len(late)} bindings ({len(late) - len(stored_late)} refused), "
        f"stored none, and exited 1; {sum(found.stored.values())} pods bound, none twice\n{gpus}"
    )

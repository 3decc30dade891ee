"""A leader frozen (SIGSTOP) past its lease while pods keep coming: the standby takes the Lease
and binds them; the old leader, thawed (SIGCONT) with pods still pending, must send no binding.
It may not know yet that it lost the Lease, but its renew deadline has passed, so it may not
bind; it exits to restart as a standby.

The oracle is the API server's audit log (audit.py): every binding request carries the
User-Agent of the process that sent it, which holds the identity it competes for the Lease
with. Any binding request of the old leader received after the thaw fails the test, whatever
its answer: a refused one (409, the standby was first) was still an attempt to bind without
the Lease. Who holds the Lease is read from the API server. Under --gpu-sharing=deny, with pods
competing for one GPU per node all along (contention.py): no GPU held twice, read from the
cluster's pod list, and the thawed leader sent no binding of a contender either.

LEADER_BROKEN=1 runs the same test against replicas that ignore their renew deadline and whose
first Lease request after the freeze hangs for 3 s (leader_hooks/sitecustomize.py): the thawed
leader then binds, and the test must fail.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e.components import LeaderElection, start_replicas, wait_holds_lease
from e2e.waiting import NotYet, wait_for

from .audit import one_sender_at_a_time, requests_per_pod, resent_after_settled
from .bursts import Burst, burst_map, burst_pods, misplaced, wait_all_bound

pytestmark = pytest.mark.faults

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
PHASE = 40  # pods before the freeze, during it, and at the thaw
HOOKS = Path(__file__).parent / "leader_hooks"
# Set to run the same test against replicas that bind past their renew deadline: it must fail.
BROKEN = os.environ.get("LEADER_BROKEN") == "1"


def test_a_leader_paused_past_its_lease_sends_no_binding_after_it_resumes(
    api_client, ns, scheduler_name, start_scheduler, audit_log, gpu_contention
):
    contention = gpu_contention(scheduler_name)
    election = LeaderElection(scheduler_name, ns, LEASE, RENEW, RETRY)
    broken = {"PYTHONPATH": str(HOOKS), "LEADER_HOOK_NO_RENEW_DEADLINE": "3"} if BROKEN else {}
    leader, standby = start_replicas(
        api_client, start_scheduler, scheduler_name, election, "--gpu-sharing=deny", extra_env=broken
    )
    old_identity = leader.identity()
    scheduling_map = burst_map(3 * PHASE)
    pods = burst_pods("pause", 3 * PHASE, scheduler_name, scheduling_map)

    Burst(api_client, ns, pods[:PHASE]).start().wait()
    wait_all_bound(api_client, ns, PHASE, timeout=30, scheduler=leader)

    leader.signal(signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        Burst(api_client, ns, pods[PHASE : 2 * PHASE]).start().wait()

        wait_holds_lease(api_client, election, standby, LEASE + 10, interval=0.1)
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

    exit_code = wait_for(f"{leader.name} to exit after losing the Lease", exited, 30)

    # Read after the old leader exited: nothing it sent can still be on its way.
    bindings = {namespace: audit_log.bindings(namespace) for namespace in (ns, contention.namespace)}
    before = [b for b in bindings[ns] if b.identity == old_identity and b.received < resumed_at]
    # The identity matched: the old leader's bindings before the freeze are in the log under it.
    assert len(before) >= PHASE, f"{len(before)} bindings with {old_identity}'s User-Agent before the freeze"
    late = [
        f"{b.namespace}/{b.pod} ({b.code} {b.message[:120]})".strip()
        for namespace in bindings
        for b in bindings[namespace]
        if b.identity == old_identity and b.received >= resumed_at
    ]
    assert late == [], f"the old leader sent {len(late)} binding requests after it resumed: {late[:10]}"
    turns = one_sender_at_a_time(bindings[ns])
    assert [t.identity for t in turns] == [old_identity, standby.identity()]
    resent = resent_after_settled(bindings[ns])
    assert resent == {}, f"binding requests after a settled answer: {dict(list(resent.items())[:10])}"
    assert exit_code == 1
    gpus = contention.verify()
    per_pod = requests_per_pod(bindings[ns])
    print(
        f"\nleader frozen; {standby.name} held the Lease {took_over:.1f}s later (lease {LEASE:g}s) and bound the "
        f"rest; after the thaw the old leader sent no binding request and exited 1; audit log: "
        f"{sum(per_pod.values())} binding requests for {len(per_pod)} pods, {turns[0].requests} from the old "
        f"leader then {turns[1].requests} from {standby.name}\n{gpus}"
    )

"""Two scheduler replicas: only the leader binds, each pod exactly once, and a standby takes over."""

from __future__ import annotations

import time
import uuid

import pytest

from .cluster import create, map_nodes, pod_events, wait_for_pods
from .components import LeaderElection, start_replicas
from .waiting import NotYet, wait_for
from .workloads import bare_pod

pytestmark = pytest.mark.e2e

# Short, so that a takeover is quick, but not so short that a loaded API
# server costs the leader its lease: each renewal may wait half the renew
# deadline for an answer. With 4/3/1 s (1.5 s per request), a leader lost its
# lease on KinD while the kubelets started the pods' containers on a shared
# 2-core machine, and exited as it must; this test is about who binds and the
# takeover, not about renewals under such load.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 8.0, 6.0, 1.0
MAP = "".join(f"{i}=node{i % 4 + 1}:{i % 4}\n" for i in range(12))


def scheduled_events(api_client, namespace: str, names: list[str]) -> dict[str, list[dict]]:
    return {name: [e for e in pod_events(api_client, namespace, name) if e["reason"] == "Scheduled"] for name in names}


def assert_scheduled_once(api_client, namespace: str, names: list[str]) -> None:
    """Each pod gets one Scheduled event, and no second one follows (a double bind would write two)."""

    def every_pod_has_one() -> None:
        events = scheduled_events(api_client, namespace, names)
        missing = [name for name, found in events.items() if not found]
        if missing:
            raise NotYet(f"no Scheduled event yet for {', '.join(missing)}")

    wait_for(f"a Scheduled event for each of {len(names)} pods", every_pod_has_one, 20)
    time.sleep(1)  # time for a second event, had there been a second bind
    counts = {
        name: [(e.get("series") or {}).get("count", 1) for e in found]
        for name, found in scheduled_events(api_client, namespace, names).items()
    }
    assert counts == {name: [1] for name in names}


@pytest.mark.compat
def test_two_replicas_bind_each_pod_once_and_the_standby_takes_over_when_the_leader_is_killed(
    api_client, ns, start_scheduler
):
    scheduler_name = f"gpu-scheduler-ha-{uuid.uuid4().hex[:6]}"
    election = LeaderElection(scheduler_name, ns, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
    leader, standby = start_replicas(start_scheduler, scheduler_name, election)

    first = [f"ha-{i}" for i in range(8)]
    create(api_client, ns, [bare_pod(name, MAP, scheduler_name=scheduler_name) for name in first])
    wait_for_pods(api_client, ns, 8, timeout=30, phases=None)
    assert_scheduled_once(api_client, ns, first)
    assert (leader.pods_scheduled(), standby.pods_scheduled()) == (8, 0)

    leader.kill()
    killed = time.monotonic()

    # The standby may take the lease LEASE_DURATION after it last saw it renewed,
    # and looks every RETRY_PERIOD (with jitter).
    standby.wait_leads(LEASE_DURATION + 2 * RETRY_PERIOD + 2)
    print(f"\n{standby.name} leads {time.monotonic() - killed:.1f}s after {leader.name} was killed")

    second = [f"ha-{i}" for i in range(8, 12)]
    create(api_client, ns, [bare_pod(name, MAP, scheduler_name=scheduler_name) for name in second])
    pods = wait_for_pods(api_client, ns, 12, timeout=30, phases=None)
    assert_scheduled_once(api_client, ns, second)
    assert standby.pods_scheduled() == 4
    assert map_nodes(api_client, pods) == {f"ha-{i}": f"node{i % 4 + 1}" for i in range(12)}

"""Two scheduler replicas: only the Lease holder binds, one binding request per pod, and a
standby takes over.

Who binds is read from the local control plane's kube-apiserver audit log (tests/faults/audit.py:
the identity in each binding request's User-Agent), who leads from the Lease in the API server;
so this runs on the local control plane only, not against KinD. LEADER_BROKEN=1 runs it against
replicas that both bind from the start (tests/faults/leader_hooks): it must fail.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from faults.audit import AuditLog, one_sender_at_a_time, requests_per_pod
from faults.control_plane import LocalControlPlane

from .cluster import create, map_nodes, pod_events, wait_for_pods
from .components import LeaderElection, start_replicas, wait_holds_lease
from .waiting import NotYet, wait_for
from .workloads import bare_pod

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

# Short, so that a takeover is quick, but not so short that a loaded API
# server costs the leader its lease: each renewal may wait half the renew
# deadline for an answer. With 4/3/1 s (1.5 s per request), a leader lost its
# lease on KinD while the kubelets started the pods' containers on a shared
# 2-core machine, and exited as it must; this test is about who binds and the
# takeover, not about renewals under such load.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 8.0, 6.0, 1.0
MAP = "".join(f"{i}=node{i % 4 + 1}:{i % 4}\n" for i in range(12))
HOOKS = Path(__file__).parent.parent / "faults" / "leader_hooks"
# Set to run the same test against replicas that both bind, whoever leads: it must fail.
BROKEN = os.environ.get("LEADER_BROKEN") == "1"


@pytest.fixture(scope="module")
def audit_log(kubeconfig) -> AuditLog:
    return AuditLog(LocalControlPlane(kubeconfig).log_file("audit"))


def audited(audit_log: AuditLog, namespace: str, names: list[str]) -> list:
    """The binding requests of `namespace` once the audit log has one of each of `names`."""

    def every_pod() -> list:
        bindings = audit_log.bindings(namespace)
        missing = set(names) - {b.pod for b in bindings}
        if missing:
            raise NotYet(f"no binding request in the audit log for {sorted(missing)}")
        return bindings

    return wait_for("a binding request of each pod in the audit log", every_pod, 10)


def scheduled_events(api_client, namespace: str, names: list[str]) -> dict[str, list[dict]]:
    return {name: [e for e in pod_events(api_client, namespace, name) if e["reason"] == "Scheduled"] for name in names}


def assert_scheduled_once(api_client, namespace: str, names: list[str]) -> None:
    """Each pod gets one Scheduled event from the replicas, and no second one follows: two replicas
    that both took the pod would both announce it (the API server refuses the second binding,
    not the second event)."""

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
def test_only_the_lease_holder_sends_bindings_one_per_pod_and_the_standby_takes_over_when_the_leader_is_killed(
    api_client, ns, start_scheduler, audit_log
):
    scheduler_name = f"gpu-scheduler-ha-{uuid.uuid4().hex[:6]}"
    election = LeaderElection(scheduler_name, ns, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
    broken = {"PYTHONPATH": str(HOOKS), "LEADER_HOOK_ALWAYS_LEADS": "1"} if BROKEN else {}
    leader, standby = start_replicas(api_client, start_scheduler, scheduler_name, election, extra_env=broken)

    first = [f"ha-{i}" for i in range(8)]
    create(api_client, ns, [bare_pod(name, MAP, scheduler_name=scheduler_name, bind_entries=True) for name in first])
    wait_for_pods(api_client, ns, 8, timeout=30, phases=None)
    assert_scheduled_once(api_client, ns, first)
    bindings = audited(audit_log, ns, first)
    # The Lease holder sent every binding request, one per pod, and each was stored.
    assert [(t.identity, t.requests) for t in one_sender_at_a_time(bindings)] == [(leader.identity(), 8)]
    assert requests_per_pod(bindings) == dict.fromkeys(first, 1)
    assert all(b.stored for b in bindings), [(b.pod, b.code) for b in bindings]

    leader.kill()
    killed = time.monotonic()

    # The standby may take the lease LEASE_DURATION after it last saw it renewed,
    # and looks every RETRY_PERIOD (with jitter).
    wait_holds_lease(api_client, election, standby, LEASE_DURATION + 2 * RETRY_PERIOD + 2)
    print(f"\n{standby.name} holds the Lease {time.monotonic() - killed:.1f}s after {leader.name} was killed")

    second = [f"ha-{i}" for i in range(8, 12)]
    create(api_client, ns, [bare_pod(name, MAP, scheduler_name=scheduler_name, bind_entries=True) for name in second])
    pods = wait_for_pods(api_client, ns, 12, timeout=30, phases=None)
    assert_scheduled_once(api_client, ns, second)
    bindings = audited(audit_log, ns, first + second)
    turns = one_sender_at_a_time(bindings)
    assert [(t.identity, t.requests) for t in turns] == [(leader.identity(), 8), (standby.identity(), 4)]
    assert requests_per_pod(bindings) == dict.fromkeys(first + second, 1)
    assert map_nodes(api_client, pods) == {f"ha-{i}": f"node{i % 4 + 1}" for i in range(12)}

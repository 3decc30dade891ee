"""The kube-apiserver audit log of the local control plane: every pods/binding request, as the
API server saw it and answered it. The oracle for "no pod was bound twice": it does not
trust anything the scheduler says about itself.

scripts/local-up.sh starts the cluster with cluster/local/audit-policy.yaml, which logs each
binding at level Metadata in two stages: RequestReceived (it arrived) and ResponseComplete
(with the response code). A binding whose API server was killed before it answered has
only the first. The log is <cluster dir>/logs/audit.log; a restarted API server appends to it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from e2e.waiting import NotYet, wait_for


@dataclass(frozen=True)
class Binding:
    """One pods/binding request."""

    audit_id: str
    namespace: str
    pod: str
    user_agent: str
    received: datetime  # requestReceivedTimestamp
    code: int | None  # None: no answer was logged (the API server died first)
    message: str = ""  # the answer's message, for errors

    @property
    def stored(self) -> bool:
        return self.code is not None and 200 <= self.code < 300

    @property
    def uncertain(self) -> bool:
        """No answer logged, a 5xx, or a 409 that is not "already assigned": the binding may have
        been stored all the same. Seen here: a client killed mid-request (kill -9 of a scheduler)
        leaves a 504 "context canceled" although the pod was bound; etcd killed mid-write leaves a
        409 "rpc error: code = Unavailable ... EOF" for a binding it had committed."""
        if self.code is None or self.code >= 500:
            return True
        return self.code == 409 and "is already assigned to node" not in self.message


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise AssertionError(
                f"no audit log at {self.path}: the local cluster must be created by scripts/local-up.sh "
                "with cluster/local/audit-policy.yaml (make local-down && make local-up)"
            )

    def bindings(self, namespace: str) -> list[Binding]:
        """Every binding request of pods in `namespace`, in arrival order, one per request."""
        received: dict[str, dict] = {}
        answered: dict[str, tuple[int, str]] = {}
        with self.path.open(errors="replace") as lines:
            for line in lines:
                if f'"{namespace}"' not in line or '"binding"' not in line:
                    continue  # cheap filter before parsing
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill -9 of the API server
                ref = event.get("objectRef") or {}
                if ref.get("subresource") != "binding" or ref.get("namespace") != namespace:
                    continue
                audit_id = event["auditID"]
                received.setdefault(audit_id, event)
                if event.get("stage") == "ResponseComplete":
                    status = event.get("responseStatus") or {}
                    answered[audit_id] = (int(status.get("code") or 0), str(status.get("message") or ""))
        found = [
            Binding(
                audit_id,
                namespace,
                event["objectRef"].get("name", ""),
                event.get("userAgent", ""),
                _time(event["requestReceivedTimestamp"]),
                *answered.get(audit_id, (None, "")),
            )
            for audit_id, event in received.items()
        ]
        return sorted(found, key=lambda b: b.received)

    def stored_per_pod(self, namespace: str) -> Counter:
        """pod -> bindings the API server answered with success (2xx)."""
        return Counter(b.pod for b in self.bindings(namespace) if b.stored)


@dataclass(frozen=True)
class BindingVerdict:
    stored: Counter  # pod -> successful bindings (2xx)
    refused: Counter  # pod -> bindings refused for sure (4xx), e.g. 409 "already assigned"
    uncertain: Counter  # pod -> bindings without an answer or with a 5xx: stored or not
    requests: int

    def twice(self) -> dict[str, int]:
        """Pods the API server answered two successful bindings for."""
        return {pod: n for pod, n in self.stored.items() if n > 1}

    def accounted(self) -> set[str]:
        """Pods with a binding that was, or may have been, stored."""
        return set(self.stored) | set(self.uncertain)

    def refused_after_bound(self) -> int:
        """Second attempts the API server refused: 4xx bindings of pods that had a binding stored."""
        return sum(n for pod, n in self.refused.items() if pod in self.accounted())


def verdict(log: AuditLog, namespace: str) -> BindingVerdict:
    bindings = log.bindings(namespace)
    stored, refused, uncertain = Counter(), Counter(), Counter()
    for binding in bindings:
        if binding.stored:
            stored[binding.pod] += 1
        elif binding.uncertain:
            uncertain[binding.pod] += 1
        else:
            refused[binding.pod] += 1
    return BindingVerdict(stored, refused, uncertain, len(bindings))


def bound_once(log: AuditLog, namespace: str, names: set[str], timeout: float = 10) -> BindingVerdict:
    """The verdict once the log has a binding of every pod in `names` that was, or may have been,
    stored; fails if any pod was bound twice."""

    def audited() -> BindingVerdict:
        # A binding stored while the API server died may have only its RequestReceived line.
        found = verdict(log, namespace)
        missing = names - found.accounted()
        if missing:
            raise NotYet(f"no binding in the audit log for {sorted(missing)[:10]}")
        return found

    found = wait_for("the audit log to show a binding of every pod", audited, timeout)
    assert found.twice() == {}, f"pods bound twice: {found.twice()}"
    return found

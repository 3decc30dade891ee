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


@dataclass(frozen=True)
class Binding:
    """One pods/binding request."""

    audit_id: str
    namespace: str
    pod: str
    user_agent: str
    received: datetime  # requestReceivedTimestamp
    code: int | None  # None: no answer was logged (the API server died first)

    @property
    def stored(self) -> bool:
        return self.code is not None and 200 <= self.code < 300


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
        answered: dict[str, int] = {}
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
                    answered[audit_id] = int((event.get("responseStatus") or {}).get("code") or 0)
        found = [
            Binding(
                audit_id,
                namespace,
                event["objectRef"].get("name", ""),
                event.get("userAgent", ""),
                _time(event["requestReceivedTimestamp"]),
                answered.get(audit_id),
            )
            for audit_id, event in received.items()
        ]
        return sorted(found, key=lambda b: b.received)

    def stored_per_pod(self, namespace: str) -> Counter:
        """pod -> bindings the API server answered with success (2xx)."""
        return Counter(b.pod for b in self.bindings(namespace) if b.stored)


@dataclass(frozen=True)
class BindingVerdict:
    stored: Counter  # pod -> successful bindings
    refused: Counter  # pod -> refused bindings (4xx/5xx), e.g. 409 "already assigned"
    unanswered: Counter  # pod -> bindings without a logged answer
    requests: int

    def twice(self) -> dict[str, int]:
        return {pod: n for pod, n in self.stored.items() if n > 1}

    def refused_after_bound(self) -> int:
        """Second attempts the API server refused: bindings refused for pods that were bound."""
        return sum(n for pod, n in self.refused.items() if self.stored.get(pod) or self.unanswered.get(pod))


def verdict(log: AuditLog, namespace: str) -> BindingVerdict:
    bindings = log.bindings(namespace)
    stored, refused, unanswered = Counter(), Counter(), Counter()
    for binding in bindings:
        if binding.code is None:
            unanswered[binding.pod] += 1
        elif binding.stored:
            stored[binding.pod] += 1
        else:
            refused[binding.pod] += 1
    return BindingVerdict(stored, refused, unanswered, len(bindings))

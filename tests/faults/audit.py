"""The kube-apiserver audit log of the local control plane: every pods/binding request, as the
API server saw it and answered it, and every request of a ServiceAccount with its answer. The
oracle for who sent which binding, and for what an identity was refused: it does not trust
anything the scheduler says about itself.

scripts/local-up.sh starts the cluster with cluster/local/audit-policy.yaml, which logs each
binding at level Metadata in two stages: RequestReceived (it arrived) and ResponseComplete
(with the response code). A binding whose API server was killed before it answered has
only the first. The log is <cluster dir>/logs/audit.log; a restarted API server appends to it.

An answer in the log is not always an answer the sender got: kube-apiserver writes a request's
ResponseComplete event in its audit filter's deferred call, before net/http flushes the
buffered response to the connection, so an API server killed in between has logged a 201 its
client never read (seen in CI: a binding logged 201 just before a kill -9 of the API server,
then the same scheduler's second request of it answered 409 "already assigned"). Answers
logged within UNSENT_WINDOW of a kill of the API server are therefore uncertain to the oracle.

kube-apiserver refuses a second binding of a pod by itself (409 "already assigned"), so "no pod
has two successful bindings" cannot fail whatever a scheduler does. What can: who sent the
binding requests (turns: one sender at a time) and whether a pod got a binding request after
one of its bindings had been answered for sure (resent_after_settled).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from e2e.waiting import NotYet, wait_for

# gpu-scheduler's User-Agent: "gpu-scheduler (<identity>)", the identity it holds the Lease with
# (gpu_scheduler/kube/client.py); what follows it (kubernetes' own suffix) is not ours.
AGENT = re.compile(r"^gpu-scheduler \((?P<identity>[^)]+)\)")
# How long before a kill of the API server an answer it logged may not have left it: the flush
# follows the audit write within the same request's handling, microseconds on a quiet machine; a
# second is room for a loaded one, and excuses no answer of a burst but those of its last second.
UNSENT_WINDOW = timedelta(seconds=1)


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
    answered: datetime | None = None  # the ResponseComplete event's stageTimestamp

    def maybe_unsent(self, kills: Iterable[datetime]) -> bool:
        """Whether the answer was logged so shortly before a kill of the API server (at `kills`,
        taken once the process had exited) that it may never have reached the sender."""
        return self.answered is not None and any(kill - UNSENT_WINDOW <= self.answered <= kill for kill in kills)

    @property
    def stored(self) -> bool:
        return self.code is not None and 200 <= self.code < 300

    @property
    def identity(self) -> str:
        """The sending scheduler's identity from its User-Agent; the whole User-Agent of any
        other client, so that no two senders share one."""
        match = AGENT.match(self.user_agent)
        return match.group("identity") if match else self.user_agent

    @property
    def settled(self) -> bool:
        """An answer that says for sure where the pod stands: stored (2xx), "already assigned"
        (409: it has a node) or 404 (it is gone). Another binding of it after one of these
        can only be a scheduler that ignored the answer or did not know the pod's state."""
        if self.stored or self.code == 404:
            return True
        return self.code == 409 and "is already assigned to node" in self.message

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
        answered: dict[str, tuple[int, str, datetime | None]] = {}
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
                    stamp = event.get("stageTimestamp")
                    answered[audit_id] = (
                        int(status.get("code") or 0),
                        str(status.get("message") or ""),
                        _time(stamp) if stamp else None,
                    )
        found = [
            Binding(
                audit_id,
                namespace,
                event["objectRef"].get("name", ""),
                event.get("userAgent", ""),
                _time(event["requestReceivedTimestamp"]),
                *answered.get(audit_id, (None, "", None)),
            )
            for audit_id, event in received.items()
        ]
        return sorted(found, key=lambda b: b.received)

    def stored_per_pod(self, namespace: str) -> Counter:
        """pod -> bindings the API server answered with success (2xx)."""
        return Counter(b.pod for b in self.bindings(namespace) if b.stored)

    def answers_to(self, username: str) -> list[Answer]:
        """Every request of `username` (a ServiceAccount: system:serviceaccount:<ns>:<name>) the
        API server answered, in arrival order: cluster/local/audit-policy.yaml logs each at
        ResponseComplete (a watch: when it ends) with its response code."""
        found = []
        with self.path.open(errors="replace") as lines:
            for line in lines:
                if f'"{username}"' not in line or '"ResponseComplete"' not in line:
                    continue  # cheap filter before parsing
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if (event.get("user") or {}).get("username") != username or event.get("stage") != "ResponseComplete":
                    continue
                status = event.get("responseStatus") or {}
                ref = event.get("objectRef") or {}
                resource = "/".join(part for part in (ref.get("resource"), ref.get("subresource")) if part)
                found.append(
                    Answer(
                        event["verb"],
                        resource,
                        event.get("requestURI", ""),
                        int(status.get("code") or 0),
                        event.get("userAgent", ""),
                        _time(event["requestReceivedTimestamp"]),
                    )
                )
        return sorted(found, key=lambda a: a.received)


@dataclass(frozen=True)
class Answer:
    """One request of an identity, and the response code the API server answered it with."""

    verb: str
    resource: str  # "pods", "pods/binding", "leases", ...
    uri: str
    code: int
    user_agent: str
    received: datetime

    @property
    def identity(self) -> str:
        """As Binding.identity: a gpu-scheduler's identity, else the whole User-Agent."""
        match = AGENT.match(self.user_agent)
        return match.group("identity") if match else self.user_agent

    def __str__(self) -> str:
        return f"{self.code} {self.verb} {self.uri} ({self.user_agent.split(' ')[0]})"


@dataclass(frozen=True)
class Turn:
    """A run of binding requests from one sender, with no other sender's request between."""

    identity: str
    first: datetime
    last: datetime
    requests: int


def turns(bindings: list[Binding]) -> list[Turn]:
    """The senders of `bindings` (in arrival order) as runs: A A B B is two turns, A B A three."""
    found: list[Turn] = []
    for binding in bindings:
        if found and found[-1].identity == binding.identity:
            last = found[-1]
            found[-1] = Turn(last.identity, last.first, binding.received, last.requests + 1)
        else:
            found.append(Turn(binding.identity, binding.received, binding.received, 1))
    return found


def one_sender_at_a_time(bindings: list[Binding]) -> list[Turn]:
    """The turns of `bindings`; fails if a sender had two, that is if two senders' binding
    requests interleave: two replicas binding at once (or a leader that bound again after its
    successor began). Fine-grained: one request of another sender inside a turn splits it."""
    found = turns(bindings)
    senders = Counter(turn.identity for turn in found)
    interleaved = {identity: n for identity, n in senders.items() if n > 1}
    assert interleaved == {}, "binding requests from more than one sender at a time: " + ", ".join(
        f"{turn.identity} {turn.requests} ({turn.first:%H:%M:%S.%f}-{turn.last:%H:%M:%S.%f})" for turn in found[:20]
    )
    return found


def requests_per_pod(bindings: list[Binding]) -> Counter:
    """pod -> binding requests the API server received for it, whatever their answer."""
    return Counter(b.pod for b in bindings)


def resent_after_settled(bindings: list[Binding], kills: Iterable[datetime] = ()) -> dict[str, list[str]]:
    """Pods that got a binding request after one of theirs was answered for sure (Binding.settled),
    each -> its requests in order ("<code> from <sender>"). A second request after an uncertain
    answer (none, 5xx, a storage error's 409, an answer logged just before a kill of the API
    server at one of `kills`) is the scheduler finding out, and is not listed."""
    kills = tuple(kills)
    by_pod: dict[str, list[Binding]] = {}
    for binding in bindings:
        by_pod.setdefault(binding.pod, []).append(binding)
    return {
        pod: [f"{b.code} from {b.identity}" for b in sent]
        for pod, sent in by_pod.items()
        if any(earlier.settled and not earlier.maybe_unsent(kills) for earlier in sent[:-1])
    }


@dataclass(frozen=True)
class BindingVerdict:
    stored: Counter  # pod -> successful bindings (2xx)
    refused: Counter  # pod -> bindings refused for sure (4xx), e.g. 409 "already assigned"
    uncertain: Counter  # pod -> bindings without an answer or with a 5xx: stored or not
    requests: int

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


def bound_once(
    log: AuditLog, namespace: str, names: set[str], timeout: float = 10, kills: Iterable[datetime] = ()
) -> BindingVerdict:
    """The verdict once the log has a binding of every pod in `names` that was, or may have been,
    stored; fails if any pod got a binding request after one of its bindings was answered for
    sure (resent_after_settled; `kills`: when the API server was killed)."""

    def audited() -> BindingVerdict:
        # A binding stored while the API server died may have only its RequestReceived line.
        found = verdict(log, namespace)
        missing = names - found.accounted()
        if missing:
            raise NotYet(f"no binding in the audit log for {sorted(missing)[:10]}")
        return found

    found = wait_for("the audit log to show a binding of every pod", audited, timeout)
    resent = resent_after_settled(log.bindings(namespace), kills)
    assert resent == {}, f"binding requests after a settled answer: {dict(list(resent.items())[:10])}"
    return found

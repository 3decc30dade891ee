"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

Every replica keeps trying to write itself into the Lease as holder; the
apiserver's optimistic concurrency (the resourceVersion on update; 409 when
someone else wrote first) makes exactly one succeed. A Lease held by another
replica is taken only after it has gone unrenewed for its duration, measured
on OUR clock from when we last saw it change, so clock skew between nodes
doesn't matter. The leader renews every retry period; if it cannot renew
within the renew deadline it must stop acting at once, since another replica
may take over as soon as the lease duration has passed.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpu_scheduler.kube.client import ApiError, KubeClient
from gpu_scheduler.kube.times import micro_time

log = logging.getLogger(__name__)

JITTER = 1.2  # client-go's factor: standbys retry within [retry, 1.2*retry)
# The longest a Lease request may take (less with a short renew deadline), the release's too.
MAX_REQUEST_SECONDS = 5.0


def lease_seconds(duration: float) -> int:
    """The leaseDurationSeconds written for a --leader-elect-lease-duration: whole seconds, as
    the Lease stores them. A standby waits this long, so timing derived from the lease uses it."""
    return max(1, round(duration))


def new_identity() -> str:
    """Unique per process, readable per host: two replicas on one host differ."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def from_lease(cls, lease: dict) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict:
        spec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class LeaseObserver:
    """The pure part of the election: may we write ourselves into this record?

    It remembers the last record seen and when (monotonic, local) it changed;
    a holder's claim lasts that long plus the holder's own lease duration.
    """

    def __init__(self, identity: str, duration_seconds: int) -> None:
        self.identity = identity
        self.duration_seconds = duration_seconds
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0

    def observe(self, record: LeaseRecord, now: float) -> None:
        if record != self._observed:
            self._observed = record
            self._observed_at = now

    def held_by_other(self, now: float) -> bool:
        record = self._observed
        if record is None or not record.holder or record.holder == self.identity:
            return False
        return self._observed_at + record.duration_seconds > now

    def claim(self, current: LeaseRecord | None, wall_time: float) -> LeaseRecord:
        """The record to write to become (or stay) the holder."""
        stamp = micro_time(wall_time)
        if current is not None and current.holder == self.identity:
            return replace(current, renew_time=stamp, duration_seconds=self.duration_seconds)
        transitions = current.transitions + 1 if current is not None else 0
        return LeaseRecord(self.identity, self.duration_seconds, stamp, stamp, transitions)

    def release(self, current: LeaseRecord, wall_time: float) -> LeaseRecord:
        """What client-go's ReleaseOnCancel writes: no holder, expiring in 1 s."""
        stamp = micro_time(wall_time)
        return LeaseRecord("", 1, stamp, stamp, current.transitions)


class LeaderElector:
    """Runs the election on a daemon thread and reports changes by callback.

    on_started_leading runs once when leadership is won; on_stopped_leading
    once if it is lost (not on a voluntary release). is_leader() also turns
    false by itself once the renew deadline passes without a renewal, even
    if this thread is stuck in a slow request, so work stops in time.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
    ) -> None:
        self._client = client
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._name = name
        self._namespace = namespace
        self._observer = LeaseObserver(identity, lease_seconds(lease_duration))
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._request_timeout = max(1.0, min(renew_deadline / 2, MAX_REQUEST_SECONDS))
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._leader = False
        self._last_renew = 0.0
        self._lease: dict | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    @property
    def identity(self) -> str:
        return self._observer.identity

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive() or self._stop.is_set()

    def is_leader(self) -> bool:
        return self._leader and time.monotonic() - self._last_renew < self._renew_deadline

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._leader:
                if self._try_acquire_or_renew():
                    log.info("became leader with lease %s/%s as %s", self._namespace, self._name, self.identity)
                    self._leader = True
                    self._on_started()
                    continue
                self._stop.wait(self._retry_period * random.uniform(1.0, JITTER))
                continue
            self._stop.wait(self._retry_period)
            if self._stop.is_set():
                return
            if self._try_acquire_or_renew():
                continue
            if time.monotonic() - self._last_renew >= self._renew_deadline:
                log.error(
                    "lost leadership: lease %s/%s not renewed within %.0fs",
                    self._namespace,
                    self._name,
                    self._renew_deadline,
                )
                self._leader = False
                self._stop.set()
                self._on_stopped()
                return

    def _try_acquire_or_renew(self) -> bool:
        started = time.monotonic()
        try:
            with self._lock:
                return self._acquire_or_renew(started)
        except (ApiError, ValueError, KeyError) as err:
            log.warning("lease %s/%s: %s", self._namespace, self._name, err)
            return False

    def _acquire_or_renew(self, started: float) -> bool:
        status, data = self._client.request("GET", f"{self._path}/{self._name}", timeout=self._request_timeout)
        if status == 404:
            record = self._observer.claim(None, time.time())
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": record.to_spec(),
            }
            return self._write("POST", self._path, lease, started)
        if status >= 300:
            raise ApiError("GET", f"{self._path}/{self._name}", status, data)
        lease = json.loads(data)
        current = LeaseRecord.from_lease(lease)
        self._observer.observe(current, time.monotonic())
        if self._observer.held_by_other(time.monotonic()):
            return False
        lease["spec"] = self._observer.claim(current, time.time()).to_spec()
        return self._write("PUT", f"{self._path}/{self._name}", lease, started)

    def _write(self, method: str, path: str, lease: dict, started: float) -> bool:
        status, data = self._client.request(method, path, body=lease, timeout=self._request_timeout)
        if status == 409:
            return False  # another replica wrote first; look again next period
        if status >= 300:
            raise ApiError(method, path, status, data)
        self._lease = json.loads(data)
        self._observer.observe(LeaseRecord.from_lease(self._lease), time.monotonic())
        # The claim is as old as the moment we asked, not when the answer came.
        self._last_renew = started
        return True

    def stop(self) -> None:
        """Stops the loop without handing the lease back: it expires a lease duration after
        the last renewal, and no standby leads before then."""
        self._stop.set()
        self._leader = False

    def release(self) -> None:
        """Stops the loop and, if we lead, hands the lease back at once."""
        self._stop.set()
        was_leader = self._leader
        self._leader = False
        if not was_leader:
            return
        with self._lock:
            lease = self._lease
            if lease is None:
                return
            current = LeaseRecord.from_lease(lease)
            if current.holder != self.identity:
                return
            lease = dict(lease, spec=self._observer.release(current, time.time()).to_spec())
            try:
                status, _ = self._client.request(
                    "PUT", f"{self._path}/{self._name}", body=lease, timeout=self._request_timeout
                )
            except ApiError as err:
                log.warning("releasing lease %s/%s failed: %s", self._namespace, self._name, err)
                return
            if status >= 300:
                log.warning("releasing lease %s/%s failed: HTTP %s", self._namespace, self._name, status)
            else:
                log.info("released lease %s/%s", self._namespace, self._name)

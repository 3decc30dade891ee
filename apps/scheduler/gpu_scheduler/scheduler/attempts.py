"""One scheduling attempt of a pod a bind worker took off the queue.

Decide under the lock (on "bind" the pod's hold on its node is assumed), check
that this replica still leads, bind outside the lock, then hand the outcome to
the state (bound, refused, pod gone, failed or in doubt) and to the Announcer.
An attempt that raises is an outcome too (state.attempt_failed): the pod is
tried again and its hold is not freed on a guess.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from gpu_scheduler.kube.binder import BindOutcome, bind
from gpu_scheduler.kube.client import KubeClient
from gpu_scheduler.kube.objects import pod_key
from gpu_scheduler.scheduling import Decision
from gpu_scheduler.scheduling.gangs import GangPlan

from .announce import Announcer
from .locked_state import LockedState
from .metrics import ALREADY_BOUND, ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics

# The process's one logger name, whichever module speaks: its lines read alike.
log = logging.getLogger("gpu_scheduler.scheduler")


class Attempts:
    def __init__(
        self,
        client: KubeClient,
        locked: LockedState,
        announcer: Announcer,
        metrics: SchedulerMetrics,
        may_bind: Callable[[], bool],
        relist_for_doubts: Callable[[], None],
        bind_timeout: float,
    ) -> None:
        self._client = client
        self._locked = locked
        self._state = locked.state
        self._announcer = announcer
        self._metrics = metrics
        self._may_bind = may_bind
        self._relist_for_doubts = relist_for_doubts
        self._bind_timeout = bind_timeout

    def run(self, uid: str, pod: dict) -> None:
        try:
            self._attempt(uid, pod)
        except Exception:  # one pod's surprise must not cost a worker, nor leak its hold
            log.exception("scheduling %s failed", pod_key(pod))
            self._locked.update(self._state.attempt_failed, uid, time.monotonic(), random.random())
            self._relist_for_doubts()

    def _attempt(self, uid: str, pod: dict) -> None:
        started = time.perf_counter()
        with self._locked.work:
            decision = self._state.decide(uid, pod, time.time())
        if decision is None:
            return  # being deleted; its DELETED event ends it
        if isinstance(decision, GangPlan):
            self._bind_gang(decision, started)
            return
        if not decision.bind:
            self._refuse(uid, pod, decision, started)
            return
        self._bind(uid, pod, decision, started)

    def _bind_gang(self, plan: GangPlan, started: float) -> None:
        """Binds every pod of a gang that was decided as one. Kubernetes binds one pod at a
        time, so a binding may fail after others were stored: the pods bound stay bound, each
        failed one is retried with backoff like any pod (its GPUs reserved for the gang, which
        is now partly bound and served first), and the gang says so (GangPartial) until its
        last pod is bound. Each pod's outcome is recorded on its own, whatever the others'."""
        bound = 0
        for uid, pod, decision in plan.members:
            try:
                bound += self._bind(uid, pod, decision, started)
            except Exception:  # one pod's surprise must not strand the others in flight
                log.exception("binding %s of gang %s failed", pod_key(pod), plan.gang)
                self._locked.update(self._state.attempt_failed, uid, time.monotonic(), random.random())
                self._relist_for_doubts()
        if bound == len(plan.members):
            if plan.complete:
                self._metrics.gang_completed(max(0.0, time.time() - plan.newest))
            log.info("gang bound", extra={"fields": {"gang": plan.gang, "pods": bound}})
        else:
            log.warning(
                "gang partly bound: the rest are retried, their GPUs reserved for it",
                extra={"fields": {"gang": plan.gang, "bound": bound, "pods": len(plan.members)}},
            )

    def _bind(self, uid: str, pod: dict, decision: Decision, started: float) -> bool:
        """Binds one pod decided "bind" (and assumed); True when it is on its node."""
        if not self._may_bind():
            # Leadership ended between taking the pod and binding it.
            self._locked.update(self._state.not_leading, uid, time.monotonic(), random.random())
            return False

        bind_started = time.perf_counter()
        result = bind(
            self._client,
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            uid,
            decision.node,
            timeout=self._bind_timeout,
        )
        self._metrics.binding_duration.observe(time.perf_counter() - bind_started)

        if result.outcome in (BindOutcome.BOUND, BindOutcome.ALREADY_BOUND):
            # On 409 the pod is on a node already; the pod watch puts the hold
            # where it really is.
            self._locked.update(self._state.bound, uid, time.monotonic())
            self._announcer.forget(uid, pod_key(pod))
            if result.outcome is BindOutcome.BOUND:
                self._announcer.scheduled(pod, decision)
                self._announcer.finish(SCHEDULED, decision, started, outcome=result.outcome.value)
            else:
                # Not a binding of this attempt: "scheduled" counts only those, so that it
                # says how many pods this process placed.
                self._announcer.finish(ALREADY_BOUND, decision, started, outcome=result.outcome.value)
            return True
        if result.outcome is BindOutcome.POD_GONE:
            self._locked.update(self._state.pod_gone, uid)
            self._announcer.forget(uid, pod_key(pod))
        else:
            now = time.monotonic()
            self._locked.update(self._state.bind_failed, uid, decision.node, result.maybe_stored, now, random.random())
            if result.maybe_stored:
                self._relist_for_doubts()
            self._announcer.bind_failed(pod, decision, result)
        self._announcer.finish(
            ERROR, decision, started, outcome=result.outcome.value, reason=result.message or str(result.status)
        )
        return False

    def _refuse(self, uid: str, pod: dict, decision: Decision, started: float) -> None:
        self._locked.update(self._state.refused, uid, decision, time.monotonic(), random.random())
        self._announcer.refused(pod, decision)
        self._announcer.finish(UNSCHEDULABLE, decision, started, reason=decision.reason, filter=decision.plugin)

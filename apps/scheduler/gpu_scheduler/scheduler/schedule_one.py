"""One pod's way through the scheduler, phase by phase, as kube-scheduler's ScheduleOne.

  watch            the pod watch queues a pending pod of ours (watches.py -> state.pod_changed)
  take             a bind worker takes the next due pod off the queue (workers.py -> state.take)
  scheduling cycle under the state's lock: resolve its node, filter, check the GPU ledger; on
                   success its hold is assumed (state.decide). A pod of a gang is decided with
                   its whole gang, all or none (a GangPlan)
  volumes          a pod that waits for WaitForFirstConsumer claims: outside the lock, the
                   volumes chosen for them on its node are given them (claimRef), the others
                   are asked for there (selected-node), and it waits until a later attempt
                   finds them bound
  binding cycle    outside the lock: check that this replica still leads, POST the binding
  outcome          handed to the state by the code of the binding's answer (bound, refused,
                   pod gone, failed or in doubt) and to the Announcer (Events, conditions,
                   metrics, the log line)

An attempt that raises is an outcome too (state.attempt_failed): the pod is tried again and
its hold is not freed on a guess.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace

from gpu_scheduler.kube.binder import BindOutcome, BindResult, bind
from gpu_scheduler.kube.claims import claim_volume, select_node
from gpu_scheduler.kube.client import KubeClient
from gpu_scheduler.kube.objects import volume_info
from gpu_scheduler.placement import bind_annotations, pod_key
from gpu_scheduler.scheduling import Decision
from gpu_scheduler.scheduling.gangs import GangPlan
from gpu_scheduler.scheduling.provisioning import BindVolume

from .announce import Announcer
from .metrics import ALREADY_BOUND, ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics
from .state import SchedulerState

# The process's one logger name, whichever module speaks: its lines read alike.
log = logging.getLogger("gpu_scheduler.scheduler")


class ScheduleOne:
    def __init__(
        self,
        client: KubeClient,
        state: SchedulerState,
        announcer: Announcer,
        metrics: SchedulerMetrics,
        may_bind: Callable[[], bool],
        relist_for_doubts: Callable[[], None],
        bind_timeout: float,
    ) -> None:
        self._client = client
        self._state = state
        self._announcer = announcer
        self._metrics = metrics
        self._may_bind = may_bind
        self._relist_for_doubts = relist_for_doubts
        self._bind_timeout = bind_timeout

    def __call__(self, uid: str, pod: dict) -> None:
        """One attempt of a pod a worker took: its cycles, and whatever they raise."""
        try:
            self.schedule_one(uid, pod)
        except Exception:  # one pod's surprise must not cost a worker, nor leak its hold
            log.exception("scheduling %s failed", pod_key(pod))
            self._state.attempt_failed(uid, time.monotonic(), random.random())
            self._relist_for_doubts()

    def schedule_one(self, uid: str, pod: dict) -> None:
        started = time.perf_counter()
        decision = self._scheduling_cycle(uid, pod)
        if decision is None:
            return  # being deleted; its DELETED event ends it
        if isinstance(decision, GangPlan):
            self._binding_cycle_of_gang(decision, started)
        elif decision.bind:
            self._binding_cycle(uid, pod, decision, started)
        else:
            self._unschedulable(uid, pod, decision, started)

    # -- the scheduling cycle ----------------------------------------------------------------------

    def _scheduling_cycle(self, uid: str, pod: dict) -> Decision | GangPlan | None:
        """Decided under the state's lock; a pod (or a gang) that can go is assumed."""
        return self._state.decide(uid, pod, time.time())

    def _unschedulable(self, uid: str, pod: dict, decision: Decision, started: float) -> None:
        if decision.provision:
            decision = self._pre_bind(decision)
        self._state.refused(uid, decision, time.monotonic(), random.random())
        self._announcer.refused(pod, decision)
        self._announcer.finish(UNSCHEDULABLE, decision, started, reason=decision.reason, filter=decision.plugin)

    def _pre_bind(self, decision: Decision) -> Decision:
        """VolumeBinding's PreBind for the pod's (or its gang's) WaitForFirstConsumer claims:
        each volume chosen for one gets its claimRef, the others are asked for on its node; a
        write that failed is named in the pod's Event, and its next attempt reads the claim and
        the volume again. Only the leader writes; a volume not written is released."""
        if not self._may_bind():
            self._state.volumes_not_written(decision.provision)
            return decision
        failed = []
        for done, write in enumerate(decision.provision):
            try:
                problem = (
                    self._claim_volume(write) if isinstance(write, BindVolume) else select_node(self._client, write)
                )
            except Exception:
                # The attempt ends here (ScheduleOne.__call__): the volumes not written yet are
                # released, or they would stay reserved until the watch changed them.
                self._state.volumes_not_written(decision.provision[done:])
                raise
            if problem is not None:
                log.warning(
                    "a write for a claim's volume failed",
                    extra={"fields": {"claim": f"{write.namespace}/{write.name}", "problem": problem}},
                )
                failed.append(f"{write.namespace}/{write.name}: {problem}")
        if not failed:
            return decision
        return replace(decision, reason=f"{decision.reason}; writing for claims failed ({'; '.join(failed)})")

    def _claim_volume(self, write: BindVolume) -> str | None:
        """Writes the volume's claimRef; None when written, else why not (its reservation ends
        either way: the cache holds the volume as written, or it may go to any claim again)."""
        answer = claim_volume(self._client, write)
        if isinstance(answer, str):
            self._state.volumes_not_written((write,))
            return f"persistentvolume {write.volume}: {answer}"
        self._state.volume_written(volume_info(answer))
        return None

    # -- the binding cycle -------------------------------------------------------------------------

    def _binding_cycle_of_gang(self, plan: GangPlan, started: float) -> None:
        """Binds every pod of a gang that was decided as one. Kubernetes binds one pod at a
        time, so a binding may fail after others were stored: the pods bound stay bound, each
        failed one is retried with backoff like any pod (its GPUs reserved for the gang, which
        is now partly bound and served first), and the gang says so (GangPartial) until its
        last pod is bound. Each pod's outcome is recorded on its own, whatever the others'."""
        bound = 0
        for uid, pod, decision in plan.members:
            try:
                bound += self._binding_cycle(uid, pod, decision, started)
            except Exception:  # one pod's surprise must not strand the others in flight
                log.exception("binding %s of gang %s failed", pod_key(pod), plan.gang)
                self._state.attempt_failed(uid, time.monotonic(), random.random())
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

    def _binding_cycle(self, uid: str, pod: dict, decision: Decision, started: float) -> bool:
        """Binds one pod decided "bind" (and assumed); True when it is on its node."""
        if not self._may_bind():
            # Leadership ended between taking the pod and binding it: nothing is sent.
            self._state.not_leading(uid, time.monotonic(), random.random())
            return False
        result = self._bind(uid, pod, decision)
        return self._outcome(uid, pod, decision, result, started)

    def _bind(self, uid: str, pod: dict, decision: Decision) -> BindResult:
        bind_started = time.perf_counter()
        result = bind(
            self._client,
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            uid,
            decision.node,
            timeout=self._bind_timeout,
            annotations=bind_annotations(decision.entry, decision.chosen),
        )
        self._metrics.binding_duration.observe(time.perf_counter() - bind_started)
        return result

    # -- the outcome -------------------------------------------------------------------------------

    def _outcome(self, uid: str, pod: dict, decision: Decision, result: BindResult, started: float) -> bool:
        """The binding's answer, by its code, to the state and to the Announcer; True when the
        pod is on its node."""
        key = pod_key(pod)
        outcome = result.outcome
        if outcome is BindOutcome.BOUND:
            self._state.bound(uid, time.monotonic())
            self._announcer.forget(uid, key)
            self._announcer.scheduled(pod, decision)
            self._announcer.finish(SCHEDULED, decision, started, outcome=outcome.value)
            return True
        if outcome is BindOutcome.ALREADY_BOUND:
            # The pod is on a node already; the pod watch puts the hold where it really is. Not
            # a binding of this attempt: "scheduled" counts only those, so that it says how many
            # pods this process placed.
            self._state.bound(uid, time.monotonic())
            self._announcer.forget(uid, key)
            self._announcer.finish(ALREADY_BOUND, decision, started, outcome=outcome.value)
            return True
        if outcome is BindOutcome.POD_GONE:
            self._state.pod_gone(uid)
            self._announcer.forget(uid, key)
        else:
            self._state.bind_failed(uid, decision.node, result.maybe_stored, time.monotonic(), random.random())
            if result.maybe_stored:
                self._relist_for_doubts()
            self._announcer.bind_failed(pod, decision, result)
        self._announcer.finish(
            ERROR, decision, started, outcome=outcome.value, reason=result.message or str(result.status)
        )
        return False

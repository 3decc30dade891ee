"""What the scheduler tells people about what it did and saw.

An attempt's outcome goes out as Events (Scheduled, FailedScheduling,
BindingNotConfirmed, the decision's warnings), as the pod's PodScheduled
condition, as one log line and as the attempt metrics; a pod that is placed or
gone has its Event series and pending condition write forgotten. A node's GPU
inventory that cannot be read is logged once per problem. Nothing here changes
the scheduler's state.
"""

from __future__ import annotations

import logging
import time

from gpu_scheduler.kube.binder import BindResult
from gpu_scheduler.kube.events import NORMAL, WARNING, EventRecorder
from gpu_scheduler.kube.pod_status import SCHEDULER_ERROR, PodConditionWriter
from gpu_scheduler.scheduling import Decision, NodeInfo
from gpu_scheduler.scheduling.gangs import GANG_WAITING
from gpu_scheduler.scheduling.provisioning import WAITING_FOR_VOLUMES

from .metrics import SchedulerMetrics

# The process's one logger name, whichever module speaks: its lines read alike.
log = logging.getLogger("gpu_scheduler.scheduler")


class Announcer:
    def __init__(
        self, recorder: EventRecorder, conditions: PodConditionWriter | None, metrics: SchedulerMetrics
    ) -> None:
        self._recorder = recorder
        self._conditions = conditions
        self._metrics = metrics
        self._inventory_problems: dict[str, str] = {}  # node -> why its inventory was unreadable, as logged

    # -- outcomes of an attempt ------------------------------------------------------------------

    def scheduled(self, pod: dict, decision: Decision) -> None:
        metadata = pod["metadata"]
        self._recorder.record(
            pod,
            NORMAL,
            "Scheduled",
            "Binding",
            f"Successfully assigned {metadata['namespace']}/{metadata['name']} to {decision.node} "
            f"with GPUs {decision.devices}" + (f": {decision.chosen}" if decision.chosen else ""),
        )
        for warning in decision.warnings:
            self._recorder.record(pod, WARNING, warning.reason, "Binding", warning.message)

    def refused(self, pod: dict, decision: Decision) -> None:
        reason = decision.reason or ""
        # A gang waiting for its pods, a pod waiting for its volumes: expected, not a failure:
        # Normal; the rest warn.
        kind = NORMAL if decision.event in (GANG_WAITING, WAITING_FOR_VOLUMES) else WARNING
        self._recorder.record(pod, kind, decision.event, "Scheduling", reason, coalesce=True)
        if self._conditions is not None:
            self._conditions.unschedulable(pod, reason)

    def bind_failed(self, pod: dict, decision: Decision, result: BindResult) -> None:
        """The Event and the PodScheduled condition after a binding that did not succeed.

        When the answer does not prove the binding was not stored, the pod may be bound
        already: the Event then claims no failure (it says what is known and what comes
        next), and the condition write is refused by the apiserver if the pod changed since
        we saw it, which a stored binding does (PodConditionWriter's precondition)."""
        detail = result.message or str(result.status)
        if result.maybe_stored:
            reason = "BindingNotConfirmed"  # not FailedScheduling: the pod may be bound
            message = (
                f"binding to node {decision.node} not confirmed ({detail}); "
                "checking whether it was stored, will retry if it was not"
            )
        else:
            reason = "FailedScheduling"
            message = f"binding to node {decision.node} failed: {detail}"
        self._recorder.record(pod, WARNING, reason, "Binding", message, coalesce=True)
        if self._conditions is not None:
            self._conditions.unschedulable(pod, message, SCHEDULER_ERROR)

    def finish(self, result: str, decision: Decision, started: float, **fields: object) -> None:
        seconds = time.perf_counter() - started
        self._metrics.observe_attempt(result, seconds)
        log.info(
            result,
            extra={
                "fields": {
                    "pod": decision.pod_key,
                    "index": decision.index,
                    "node": decision.node,
                    "devices": decision.devices,
                    "result": result,
                    "duration_ms": round(seconds * 1000, 2),
                    **{k: v for k, v in fields.items() if v is not None},
                }
            },
        )

    # -- pods placed or gone ---------------------------------------------------------------------

    def forget(self, uid: str, key: str) -> None:
        """The pod is placed or gone: its Event series and pending condition write go."""
        self._recorder.forget(key)
        if self._conditions is not None:
            self._conditions.forget(uid)

    def forget_series(self, key: str) -> None:
        self._recorder.forget(key)

    # -- nodes -----------------------------------------------------------------------------------

    def node_seen(self, node: NodeInfo) -> None:
        """Logs a node's unreadable GPU inventory once per problem (only the node watch's
        thread calls this): the node is then scheduled as if it published none."""
        problem = node.inventory_problem
        if problem == self._inventory_problems.get(node.name):
            return
        if problem is None:
            del self._inventory_problems[node.name]
            log.info("node %s's GPU inventory is readable again", node.name)
            return
        self._inventory_problems[node.name] = problem
        log.warning("%s; its GPUs are checked as if it published no inventory", problem)

    def node_deleted(self, name: str) -> None:
        self._inventory_problems.pop(name, None)

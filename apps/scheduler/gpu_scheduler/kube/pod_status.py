"""The PodScheduled=False condition on pods that cannot be placed, as kube-scheduler sets it.

kubectl, cluster autoscalers and queueing tools read why a pod waits from its
PodScheduled condition (reason Unschedulable, and the message), not from
Events. Writes go out from a background thread so they never hold a bind
worker; only the latest message per pod is kept, and a pod whose condition
already says the same is not written again.

Every write is conditional on the pod's resourceVersion as the scheduler saw
it: a pod bound since (a binding whose answer was lost may have been stored)
has changed, the apiserver refuses the write with 409 Conflict, and the pod is
not marked unschedulable. A conflict is dropped quietly (counted): the pod's
next attempt writes again from the pod as it is then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

from gpu_scheduler.kube.client import ApiError, KubeClient
from gpu_scheduler.kube.objects import pod_scheduled_condition
from gpu_scheduler.kube.times import rfc3339

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"
MESSAGE_MAX = 32 * 1024  # far below what the API allows; messages here are a few hundred bytes


def condition_patch(reason: str, message: str, transition: bool, now: float, resource_version: str) -> dict:
    """A strategic merge patch of status.conditions (merged by type), valid only while the
    pod is at resource_version.

    kube-apiserver applies a patch to the stored pod and then stores the result as an
    update, and an update whose metadata.resourceVersion differs from the stored one is a
    409 Conflict (the generic registry's Store.Update, k8s.io/apiserver
    pkg/registry/generic/registry/store.go: "if newResourceVersion != existingResourceVersion
    { ... NewConflict"); pods/status is the pod registry's StatusREST, whose Update is that
    same Store.Update (pkg/registry/core/pod/storage/storage.go). So the patch's
    resourceVersion is a precondition, as described in kubernetes/kubernetes#63104 and as
    controller-runtime's MergeFromWithOptimisticLock uses it. Without it the patch would
    take the stored resourceVersion and always apply."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message[:MESSAGE_MAX],
        "lastProbeTime": None,
    }
    if transition:
        # Only when the status changes, as the API's convention asks.
        condition["lastTransitionTime"] = rfc3339(now)
    return {"metadata": {"resourceVersion": resource_version}, "status": {"conditions": [condition]}}


def already_says(pod: Mapping, reason: str, message: str) -> bool:
    current = pod_scheduled_condition(pod)
    return (
        current is not None
        and current.get("status") == "False"
        and current.get("reason") == reason
        and current.get("message") == message[:MESSAGE_MAX]
    )


class PodConditionWriter:
    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._pending: OrderedDict[str, tuple[str, str, str, str, bool, str]] = OrderedDict()
        self._work = threading.Condition()
        self._busy = False
        self.written = 0
        self.conflicts = 0  # refused by the precondition: the pod changed (was bound, say)
        self.failed = 0
        self._thread = threading.Thread(target=self._loop, name="pod-conditions", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def unschedulable(self, pod: Mapping, message: str, reason: str = UNSCHEDULABLE) -> None:
        """Queues PodScheduled=False with this reason and message, unless the pod says so already."""
        if already_says(pod, reason, message):
            return
        metadata = pod["metadata"]
        resource_version = metadata.get("resourceVersion")
        if not resource_version:
            # Every pod from the API has one; without it the write could not be conditional.
            return
        current = pod_scheduled_condition(pod)
        transition = current is None or current.get("status") != "False"
        with self._work:
            self._pending[metadata["uid"]] = (
                metadata["namespace"],
                metadata["name"],
                reason,
                message,
                transition,
                resource_version,
            )
            self._pending.move_to_end(metadata["uid"])
            self._work.notify()

    def forget(self, uid: str) -> None:
        """The pod is bound or gone: a write not sent yet is moot."""
        with self._work:
            self._pending.pop(uid, None)

    def counts(self) -> dict[str, int]:
        """Writes so far by result, for the metrics."""
        return {"written": self.written, "conflict": self.conflicts, "failed": self.failed}

    def pending(self) -> int:
        with self._work:
            return len(self._pending)

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._work:
            while (self._pending or self._busy) and time.monotonic() < deadline:
                self._work.wait(0.05)
            return not self._pending and not self._busy

    def _loop(self) -> None:
        while True:
            with self._work:
                while not self._pending:
                    self._work.wait()
                _, write = self._pending.popitem(last=False)
                self._busy = True
            try:
                self._write(*write)
            except Exception:  # the thread must outlive any single write
                self.failed += 1
                log.exception("writing the PodScheduled condition of %s/%s failed", write[0], write[1])
            finally:
                with self._work:
                    self._busy = False
                    self._work.notify_all()

    def _write(
        self, namespace: str, name: str, reason: str, message: str, transition: bool, resource_version: str
    ) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
        try:
            status, data = self._client.request(
                "PATCH",
                path,
                body=condition_patch(reason, message, transition, time.time(), resource_version),
                content_type="application/strategic-merge-patch+json",
            )
        except ApiError as err:
            self.failed += 1
            log.debug("PodScheduled condition of %s/%s not written: %s", namespace, name, err)
            return
        if status < 300:
            self.written += 1
        elif status == 409:
            # The pod is no longer as we saw it: bound, or changed by someone else. What we
            # would have said may be untrue now; its next attempt says it again if not.
            self.conflicts += 1
            log.debug("PodScheduled condition of %s/%s not written: the pod changed", namespace, name)
        elif status != 404:  # 404: deleted meanwhile, nothing to say
            self.failed += 1
            log.debug(
                "PodScheduled condition of %s/%s not written: %s",
                namespace,
                name,
                ApiError("PATCH", path, status, data),
            )

"""Binding a pod to a node through the pods/binding subresource."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_scheduler.kube.client import ApiError, KubeClient

# The longest a binding may take, retries included (the client's timeout bounds them). The
# apiserver stores a binding in milliseconds; one unanswered for this long is settled by a
# list instead (the binding's "maybe stored"). With leader election the scheduler shortens
# it to fit the lease: scheduler/command.py, bind_timeout.
BIND_TIMEOUT_SECONDS = 10.0


class BindOutcome(enum.Enum):
    BOUND = "bound"
    # 409 "already assigned": the pod has a node (another replica or an
    # earlier attempt whose answer was lost). Nothing is left to do.
    ALREADY_BOUND = "already-bound"
    # 404: the pod was deleted before we bound it.
    POD_GONE = "pod-gone"
    # Anything else (5xx, 429, timeouts): worth another try later.
    FAILED = "failed"


@dataclass(frozen=True)
class BindResult:
    outcome: BindOutcome
    status: int
    message: str = ""

    @property
    def maybe_stored(self) -> bool:
        """A failure that does not prove the binding was not stored: no answer at all, a 5xx,
        or a 409 from a storage error. The fault tests saw etcd commit a binding that was then
        answered 409 "rpc error: code = Unavailable ... EOF", and a killed client's binding
        stored while the audit log says 504."""
        if self.outcome is not BindOutcome.FAILED:
            return False
        return self.status == 0 or self.status >= 500 or self.status == 409


def binding_body(namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str] | None = None) -> dict:
    """A v1 Binding; the uid makes the apiserver refuse a same-named newer pod. The apiserver
    stores the Binding's annotations on the pod in the same write that sets its node
    (BindingREST), so a pod is never on a node without them."""
    metadata: dict = {"name": name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


# How the apiserver says that a pod has a node already. Other 409s exist: an
# etcd failure mid-write answers 409 "Operation cannot be fulfilled ... rpc
# error: code = Unavailable" with the pod still unbound (found by the fault
# tests), and those must be retried, not taken for done.
ALREADY_ASSIGNED = "is already assigned to node"


def classify(status: int, message: str = "") -> BindResult:
    if status in (200, 201):
        return BindResult(BindOutcome.BOUND, status)
    if status == 409 and ALREADY_ASSIGNED in message:
        return BindResult(BindOutcome.ALREADY_BOUND, status, message)
    if status == 404:
        return BindResult(BindOutcome.POD_GONE, status, message)
    return BindResult(BindOutcome.FAILED, status, message)


def bind(
    client: KubeClient,
    namespace: str,
    name: str,
    uid: str,
    node: str,
    timeout: float = BIND_TIMEOUT_SECONDS,
    annotations: Mapping[str, str] | None = None,
) -> BindResult:
    """POSTs the binding and says what became of it; never raises for HTTP errors.

    Nothing is sent after timeout seconds, and the POST is never sent twice (the client
    retries only connections that carried nothing). A successful binding answers with a
    Status object, not a Binding, so only the HTTP status is read.
    """
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
    try:
        body = binding_body(namespace, name, uid, node, annotations)
        status, data = client.request("POST", path, body=body, timeout=timeout)
    except ApiError as err:
        return BindResult(BindOutcome.FAILED, 0, err.message)
    if status in (200, 201):
        return BindResult(BindOutcome.BOUND, status)
    return classify(status, ApiError("POST", path, status, data).message)

"""Gates on pods/binding: a ValidatingWebhookConfiguration that sends every binding of one
namespace to a webhook of the test's choosing (a closed port, or one that answers 409), so the
scheduler's bind is refused after it has made its decision.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from e2e.cluster import ignoring_not_found
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod
from kubernetes import client
from kubernetes.client.rest import ApiException


def gate_configuration(name: str, namespace: str, url: str, ca_bundle: str) -> dict:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding"]}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "bindings.gate.faults.gpu-scheduler",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 2,
                "clientConfig": {"url": url, "caBundle": ca_bundle},
                "rules": [{**rule, "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            }
        ],
    }


def post_binding(api_client, namespace: str, pod: str, node: str) -> tuple[int, str]:
    """POST pods/<pod>/binding as a scheduler does: (HTTP status, body)."""
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}
    try:
        client.CoreV1Api(api_client).create_namespaced_pod_binding(pod, namespace, body, _preload_content=False)
    except ApiException as err:
        return err.status, err.body or ""
    return 201, ""


def shut(api_client, namespace: str, url: str, ca_bundle: str, refused: Callable[[int, str], bool]) -> str:
    """Registers the gate; returns its name once the API server refuses bindings in `namespace`
    as `refused(status, body)` recognises."""
    name = f"faults-binding-gate-{namespace}"
    client.AdmissionregistrationV1Api(api_client).create_validating_webhook_configuration(
        gate_configuration(name, namespace, url, ca_bundle)
    )
    core = client.CoreV1Api(api_client)

    def in_force() -> None:
        # A probe pod of no scheduler, bound to a node that does not exist: harmless if
        # the gate is not in force yet; deleted right after either way.
        probe = f"gate-probe-{uuid.uuid4().hex[:6]}"
        core.create_namespaced_pod(namespace, bare_pod(probe, "0=nowhere:0\n", scheduler_name="nobody"))
        try:
            status, body = post_binding(api_client, namespace, probe, "faults-no-such-node")
        finally:
            core.delete_namespaced_pod(probe, namespace, grace_period_seconds=0)
        if not refused(status, body):
            raise NotYet(f"a binding answered {status}")

    wait_for(f"the API server to send bindings in {namespace} through the gate", in_force, 30)
    return name


def open_(api_client, name: str) -> None:
    ignoring_not_found(client.AdmissionregistrationV1Api(api_client).delete_validating_webhook_configuration, name)

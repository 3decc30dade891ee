"""The chart's admission policies created and deleted on a real kube-apiserver, for one test run.

The e2e and fault tests install what `helm template` renders (MutatingAdmissionPolicy,
ValidatingAdmissionPolicy and their bindings) under names of their own, bound to one namespace,
through the custom-objects API: the kubernetes client has no typed calls for the
MutatingAdmissionPolicy of admissionregistration.k8s.io/v1.
"""

from __future__ import annotations

from kubernetes import client

from .cluster import ignoring_not_found

GROUP, VERSION = "admissionregistration.k8s.io", "v1"
PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}


def is_policy(document: dict) -> bool:
    return document["kind"] in PLURALS


def bound_to_namespace(documents: list[dict], namespace: str) -> list[dict]:
    """`documents` with every binding's matchResources narrowed to `namespace` alone."""
    for doc in documents:
        if doc["kind"].endswith("PolicyBinding"):
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    return documents


def create(api_client, documents: list[dict]) -> None:
    custom = client.CustomObjectsApi(api_client)
    for doc in documents:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURALS[doc["kind"]], doc)


def delete(api_client, documents: list[dict]) -> None:
    """Deletes each of `documents`; fine when it is gone already."""
    custom = client.CustomObjectsApi(api_client)
    for doc in documents:
        ignoring_not_found(
            custom.delete_cluster_custom_object, GROUP, VERSION, PLURALS[doc["kind"]], doc["metadata"]["name"]
        )

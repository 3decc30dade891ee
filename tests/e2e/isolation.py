"""Namespaces of one e2e run, and the label that keeps the run's local webhook to them.

The local webhook is registered for namespaces with RUN_LABEL=RUN_ID only, so
it never handles the pods of other suites sharing the cluster, and a test can
create a namespace outside its reach and bring it in later.
"""

from __future__ import annotations

import uuid

from kubernetes import client

from .cluster import ignoring_not_found

RUN_LABEL = "gpu-scheduler-e2e/run"
RUN_ID = uuid.uuid4().hex[:8]


def create_namespace(api_client, prefix: str, labelled: bool = True) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    labels = {"gpu-scheduler-test": "true"}
    if labelled:
        labels[RUN_LABEL] = RUN_ID
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name, "labels": labels}})
    return name


def bring_under_webhook(api_client, namespace: str) -> None:
    """Gives a namespace created with labelled=False the run label."""
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": {RUN_LABEL: RUN_ID}}})


def delete_namespace(api_client, name: str) -> None:
    delete = client.CoreV1Api(api_client).delete_namespace
    ignoring_not_found(delete, name, grace_period_seconds=0, propagation_policy="Background")

"""A map with a mistake is refused where the user sees it, with the line that is wrong."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import webhook_registration
from .charts import KUBECTL
from .cluster import create, describe_events, list_pods, object_events
from .isolation import bring_under_webhook
from .waiting import NotYet, wait_for
from .workloads import deployment, statefulset

pytestmark = pytest.mark.e2e

# Line 2 has no ":<devices>".
BROKEN_MAP = "0=node1:0\n1=node2\n"


@pytest.mark.local_only
def test_statefulset_whose_pods_the_webhook_denies_reports_the_broken_line_in_failed_create_events(
    api_client, product, new_namespace
):
    """A StatefulSet that existed before the webhook was installed: the validating webhook never
    saw it, so its map is first checked when its pods are created, and the StatefulSet
    controller's FailedCreate event must carry the webhook's line-numbered message."""
    namespace = new_namespace("e2e-broken", labelled=False)
    create(api_client, namespace, [statefulset("broken", BROKEN_MAP, replicas=0)])
    bring_under_webhook(api_client, namespace)
    webhook_registration.wait_until_called(api_client, namespace)

    client.AppsV1Api(api_client).patch_namespaced_stateful_set_scale("broken", namespace, {"spec": {"replicas": 2}})

    def failed_create() -> dict:
        events = object_events(api_client, namespace, "StatefulSet", "broken")
        for event in events:
            if event["reason"] == "FailedCreate" and "line 2" in event["message"]:
                return event
        raise NotYet(describe_events(events))

    event = wait_for("a FailedCreate event on StatefulSet broken naming line 2 of the map", failed_create, 30)
    print(f"\nFailedCreate: {event['message']}")
    assert "denied the request" in event["message"]
    assert "gpu-scheduling-map" in event["message"]
    assert list_pods(api_client, namespace) == []


@pytest.mark.compat
def test_kubectl_apply_of_a_deployment_with_a_broken_map_is_refused_naming_the_line(
    kubeconfig, api_client, product, ns, tmp_path
):
    manifest = tmp_path / "deployment.yaml"
    manifest.write_text(yaml.safe_dump(deployment("web", BROKEN_MAP)))

    applied = subprocess.run(
        [str(KUBECTL), "--kubeconfig", kubeconfig, "apply", "-n", ns, "-f", str(manifest)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )

    print(f"\nkubectl apply: {applied.stderr.strip()}")
    assert applied.returncode != 0, applied.stdout
    assert "denied the request" in applied.stderr
    assert f"Deployment {ns}/web" in applied.stderr
    assert "line 2:" in applied.stderr
    with pytest.raises(ApiException) as missing:
        client.AppsV1Api(api_client).read_namespaced_deployment("web", ns)
    assert missing.value.status == 404

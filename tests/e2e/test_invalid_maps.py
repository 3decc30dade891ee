"""A map with a mistake is refused where the user sees it, with the line that is wrong."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import webhook_registration
from .charts import KUBECTL
from .cluster import create, list_pods, wait_for_event
from .isolation import bring_under_webhook
from .workloads import deployment, statefulset

pytestmark = pytest.mark.e2e

# Line 2 has no ":<devices>".
BROKEN_MAP = "0=node1:0\n1=node2\n"


@pytest.mark.local_only
def test_statefulset_created_before_the_webhook_gets_failed_scheduling_events_naming_the_broken_line(
    api_client, product, new_namespace
):
    """A StatefulSet that existed before the webhook was installed: the validating webhook never
    saw it. Its pods are created (nothing on their creation path reads the map: the webhook only
    adds the entry that reads the bind's devices), and the scheduler, which reads the map once,
    at bind, refuses each with a FailedScheduling event carrying the line-numbered message."""
    namespace = new_namespace("e2e-broken", labelled=False)
    create(api_client, namespace, [statefulset("broken", BROKEN_MAP, replicas=0)])
    bring_under_webhook(api_client, namespace)
    webhook_registration.wait_until_called(api_client, namespace)

    client.AppsV1Api(api_client).patch_namespaced_stateful_set_scale("broken", namespace, {"spec": {"replicas": 2}})

    event = wait_for_event(api_client, namespace, "broken-0", "FailedScheduling", "line 2: ", 30)
    print(f"\nFailedScheduling: {event['message']}")
    assert "no ':' after the node" in event["message"]
    assert not any(pod["spec"].get("nodeName") for pod in list_pods(api_client, namespace))


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

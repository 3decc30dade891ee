"""The chart's admission.mode policy, installed for the ours_policy runner (contenders.OURS_POLICY).

A MutatingAdmissionPolicy and a ValidatingAdmissionPolicy (CEL, evaluated by
kube-apiserver itself: charts/gpu-scheduler/templates/admission-policies.yaml)
and their bindings, rendered with `helm template` as
tests/e2e/test_admission_policy_equality.py renders them, for the runner's own
schedulerName (the policies' matchConditions), and bound to the bench
namespace only. The bench's webhook is registered for another schedulerName,
so these pods are placed with no webhook call. Created at setup beside the
webhook's registration (run.py), seen placing a dry-run pod before any run,
deleted at teardown; through the bench's own client (kubeapi.py).
"""

from __future__ import annotations

import json
import subprocess
import time

import yaml

from .chart import CHART
from .kubeapi import KubeApi
from .webhook import HELM, KUBE_VERSION_ARGS, dry_run_admitted

# Its objects are named after the release ("<release>-gpu-scheduler-placement"), apart from any
# installed chart's and from the bench's webhook configurations (release gpu-bench).
RELEASE = "gpu-bench-policy"
TEMPLATE = "templates/admission-policies.yaml"
GROUP_VERSION = "admissionregistration.k8s.io/v1"
# Kind -> the cluster-scoped resource it is created as.
PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
ACTIVE_TIMEOUT = 60.0


def helm_args(scheduler_name: str) -> list[str]:
    return [
        str(HELM),
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        "gpu-scheduler",
        # The Kubernetes the local cluster runs (cluster/local/go.mod, read by tests/e2e/charts.py).
        *KUBE_VERSION_ARGS,
        "--set-string",
        "image.registry=",
        "--show-only",
        TEMPLATE,
        "--set-string",
        f"schedulerName={scheduler_name}",
        "--set-string",
        "admission.mode=policy",
        "--api-versions",
        f"{GROUP_VERSION}/MutatingAdmissionPolicy",
    ]


def render(scheduler_name: str, namespace: str) -> list[dict]:
    """The chart's policy-mode objects for scheduler_name, each binding narrowed to namespace."""
    rendered = subprocess.run(helm_args(scheduler_name), capture_output=True, text=True, timeout=60)
    if rendered.returncode != 0:
        raise RuntimeError(f"helm template {CHART} --show-only {TEMPLATE} failed: {rendered.stderr}")
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    kinds = sorted(doc["kind"] for doc in documents)
    if kinds != sorted(PLURALS):
        raise RuntimeError(f"expected the chart to render {', '.join(sorted(PLURALS))}; got {kinds}")
    for doc in documents:
        if doc["apiVersion"] != GROUP_VERSION:
            raise RuntimeError(f"{doc['kind']} rendered as {doc['apiVersion']}, not {GROUP_VERSION}")
        if doc["kind"].endswith("Binding"):
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    return documents


def object_path(doc: dict, name: str = "") -> str:
    path = f"/apis/{GROUP_VERSION}/{PLURALS[doc['kind']]}"
    return f"{path}/{name}" if name else path


class Policies:
    """The policies of one schedulerName in one namespace: created, seen acting, deleted."""

    def __init__(self, api: KubeApi, scheduler_name: str, namespace: str) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.namespace = namespace
        self._documents: list[dict] = []

    def create(self) -> None:
        """Creates the objects (replacing ones of the same name an earlier run left), then waits
        until the apiserver places a dry-run pod of scheduler_name with them."""
        self._documents = render(self.scheduler_name, self.namespace)
        for doc in self._documents:
            name = doc["metadata"]["name"]
            status, answer = self.api.request("GET", object_path(doc, name))
            if status == 200:  # left by a run that could not delete it: replaced
                doc["metadata"]["resourceVersion"] = json.loads(answer)["metadata"]["resourceVersion"]
                self.api.call("PUT", object_path(doc, name), doc)
            else:
                self.api.call("POST", object_path(doc), doc)
        self.wait_until_active()

    def wait_until_active(self, timeout: float = ACTIVE_TIMEOUT) -> None:
        """A new policy acts a moment after it is created (the apiserver's own watch): until a
        dry-run create comes back with CUDA_VISIBLE_DEVICES in its container's env."""
        deadline = time.monotonic() + timeout
        answer = b""
        while time.monotonic() < deadline:
            placed, answer = dry_run_admitted(self.api, self.namespace, self.scheduler_name)
            if placed:
                return
            time.sleep(0.5)
        raise TimeoutError(
            f"the admission policies did not place a pod of {self.scheduler_name} within {timeout:.0f}s; "
            f"last dry-run answer: {answer[:300]!r}"
        )

    def delete(self) -> None:
        for doc in reversed(self._documents):  # the bindings first, then their policies
            self.api.call("DELETE", object_path(doc, doc["metadata"]["name"]), ok=(404,))
        self._documents = []

"""admission.mode policy and the webhook: one behaviour in two implementations, proven equal.

The chart's MutatingAdmissionPolicy and ValidatingAdmissionPolicy (CEL, evaluated by the real
kube-apiserver: templates/admission-policies.yaml) are installed as `helm template` renders
them, bound to one namespace; the webhook (`gpu-scheduler webhook`, registered as the chart
registers it) serves another. Every case, a pod with its map, is created in both with
dryRun=All, so admission runs whole (mutation, the API server's own validation, validating
admission) and nothing is stored or scheduled. Then:
  - both admitted: the two pods are equal field by field (spec, labels, annotations);
  - both refused: the refusals name the same map lines;
  - anything else fails the test, naming the case.
The cases: the map grammar's violations, index sources, env rules, spacing and unicode,
numbers of 5,000 digits, 150 random texts over the grammar's alphabet (fixed seed), and
the task's map. Maps past what the policy may read (more than policyMaxLines lines or
64 KiB: CEL's cost limit) must be refused by it with a message that says so, never
admitted without devices.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import webhook_registration
from .charts import SCHEDULER_CHART, helm_template
from .cluster import ignoring_not_found
from .isolation import RUN_ID, create_namespace, delete_namespace
from .waiting import NotYet, wait_for
from .workloads import SCHEDULER_NAME

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

MAP = "gpu-scheduling-map"
POLICY_TEMPLATE = "templates/admission-policies.yaml"
UUID_A = "GPU-0f2a6c1e-9b3d-4e5f-8a7b-1c2d3e4f5a6b"
UUID_B = "GPU-1a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d"
MIG_A = "MIG-4f3e2d1c-0b9a-4876-9543-210fedcba987"
MIG_OLD = "MIG-GPU-0f2a6c1e-9b3d-4e5f-8a7b-1c2d3e4f5a6b/1/0"
TASK_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"
# "line N: " where a refusal names a line it refuses (not a line number quoted in a map's text).
LINE = re.compile(r"(?:: |; )line (\d+): ")


@dataclass
class Case:
    """A pod of ours: its name, map, labels, annotations, owner and containers."""

    label: str
    map_text: str | None
    name: str = "train-0"
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    owner_kind: str | None = None
    containers: list = field(default_factory=lambda: [{"name": "main", "image": "busybox"}])
    init_containers: list = field(default_factory=list)

    def pod(self, namespace: str) -> dict:
        annotations = dict(self.annotations)
        if self.map_text is not None:
            annotations[MAP] = self.map_text
        metadata = {"name": self.name, "namespace": namespace, "labels": self.labels, "annotations": annotations}
        if self.owner_kind:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": self.owner_kind,
                    "name": "owner",
                    "uid": "00000000-0000-0000-0000-000000000001",
                    "controller": True,
                }
            ]
        spec = {"schedulerName": SCHEDULER_NAME, "automountServiceAccountToken": False, "containers": self.containers}
        if self.init_containers:
            spec["initContainers"] = self.init_containers
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def env(*pairs) -> list[dict]:
    return [{"name": n, "value": v} if not isinstance(v, dict) else {"name": n, "valueFrom": v} for n, v in pairs]


FIELD_REF = {"fieldRef": {"fieldPath": "metadata.name"}}

GRAMMAR_TEXTS = [
    # placement/grammar.py's violations (apps/scheduler/tests/test_map_grammar.py), one per line kind.
    "0=node1:0\nnode2:1",
    "0=node1",
    "-1=node1:0",
    "x=node1:0",
    "=node1:0",
    "99999999999=node1:0",
    "2147483647=node1:0\n0=node2:1",
    "2147483648=node1:0\n0=node2:1",
    "0=node1:0\n\n0=node2:1",
    "0=node1:0\n00=node2:1",
    "0=:0",
    "0=-node1:0",
    "0=node1!:0",
    "0=node 1:0",
    "0=node1:",
    "0=node1:0,,1",
    "0=node1:0,",
    "0=node1:-1",
    "0=node1:GPU-xyz",
    "0=node1:0:1",
    "0=node1:0,1,0",
    "0=node1:1,01",
    "0=node1:0 # inline comment",
    "0=node1:0\rx",
    "0=node1:2147483647",
    "0=node1:2147483648",
    f"0=node1:{UUID_A},{UUID_A.lower()}",
    f"0=node1:{UUID_A},{UUID_B}",
    f"0=node1:0,{UUID_A}",
    f"0=node1:{MIG_A}",
    f"0=node1:{MIG_OLD}",
    f"0=node1:{MIG_A},{MIG_OLD}",
    f"0=node1:{MIG_A},1",
    "0=Node_A.x:0",
    "0=" + "a" * 63 + ":0",
    "0=" + "A" * 64 + ":0",
    "0=" + ".".join(["a" * 63] * 3) + "." + "b" * 61 + ":0",
    "0=" + ".".join(["a" * 63] * 3) + "." + "b" * 62 + ":0",
    "",
    "\n\n",
    "# only a comment\n",
    "   \r\n",
    "# comment\n\n0=node1:0\n\n# another\n1=node2:1\n",
    " 0 = node1 : 3 , 4 \r\n1=node2:1",
    "\t0\t=\tnode1\t:\t0\t",
    "0=node1:0\n1=node2:1\n1=node3:2\n1=node4:3\n2=x y:1\n",
    "line 3 is not here=node1:0",
    # Unicode: whitespace Go and Python agree on, and characters that only look like it.
    "\u00a00=node1:0\u3000",
    "\u20280=node1:0",
    "\x1c0=node1:0",
    "\u200b0=node1:0",
    "0=nöde:0",
    "0=node1:\u0661",
    "0=node1:0\u0301",
    "\ufeff0=node1:0",
    "0=node1:0\n" + "\U0001f600" * 500,
    "0=" + "\u05d0" * 40 + ":0",
    # Numbers of 5,000 digits.
    "0" * 5000 + "=node1:0",
    "1" * 5000 + "=node1:0\n0=node2:0",
    "0=node1:" + "0" * 4999 + "7",
    "0=node1:" + "9" * 5000,
]


def cases() -> list[Case]:
    table = [Case(f"grammar {i}: {text[:40]!r}", text) for i, text in enumerate(GRAMMAR_TEXTS)]
    table += [Case(f"task map, index {i}", TASK_MAP, name=f"train-{i}") for i in range(6)]
    table += [
        Case("no map", None),
        Case(
            "statefulset label",
            TASK_MAP,
            name="x",
            labels={"apps.kubernetes.io/pod-index": "2"},
            owner_kind="StatefulSet",
        ),
        Case("label with zeros", TASK_MAP, name="x", labels={"apps.kubernetes.io/pod-index": "0003"}),
        Case("label not a number", TASK_MAP, name="x-1", labels={"apps.kubernetes.io/pod-index": "two"}),
        Case(
            "label of 5,000 digits",
            TASK_MAP,
            name="x",
            annotations={"batch.kubernetes.io/job-completion-index": "1" * 5000},
        ),
        Case("job label", TASK_MAP, name="job-abcde", labels={"batch.kubernetes.io/job-completion-index": "4"}),
        Case(
            "job annotation", TASK_MAP, name="job-abcde", annotations={"batch.kubernetes.io/job-completion-index": "1"}
        ),
        Case("replicaset pod", TASK_MAP, name="web-7d4b9-12345", owner_kind="ReplicaSet"),
        Case("statefulset pod by name", TASK_MAP, name="web-3", owner_kind="StatefulSet"),
        Case("name without index", TASK_MAP, name="trainer"),
        Case("index of 11 digits", TASK_MAP, name="train-99999999999"),
        Case("index 2147483647", "2147483647=node1:5\n", name="train-2147483647"),
        Case("index with zeros in the name", TASK_MAP, name="train-002"),
        Case(
            "env rules",
            TASK_MAP,
            name="train-2",
            containers=[
                {
                    "name": "a",
                    "image": "busybox",
                    "env": env(("A", "1"), ("CUDA_VISIBLE_DEVICES", "9"), ("B", "2"), ("CUDA_VISIBLE_DEVICES", "8")),
                },
                {"name": "b", "image": "busybox", "env": env(("CUDA_DEVICE_ORDER", "FASTEST_FIRST"), ("X", "y"))},
                {
                    "name": "c",
                    "image": "busybox",
                    "env": env(("CUDA_VISIBLE_DEVICES", FIELD_REF), ("CUDA_DEVICE_ORDER", FIELD_REF)),
                },
                {
                    "name": "d",
                    "image": "busybox",
                    "env": env(("CUDA_VISIBLE_DEVICES", "0,1,2"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")),
                },
                {"name": "e", "image": "busybox", "env": []},
            ],
            init_containers=[
                {"name": "i1", "image": "busybox"},
                {
                    "name": "i2",
                    "image": "busybox",
                    "env": env(("CUDA_VISIBLE_DEVICES", "7"), ("CUDA_VISIBLE_DEVICES", "6")),
                },
            ],
        ),
        Case(
            "placement annotation already there",
            TASK_MAP,
            name="train-1",
            annotations={"gpu-scheduler/placement": '{"index":9,"node":"x","cudaVisibleDevices":"9"}'},
        ),
    ]
    rng = random.Random(20261206)
    alphabet = list("0123456789=:,#- \t\r\nabcnode.GPUMIG_/x")
    for i in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        table.append(Case(f"random {i}: {text[:40]!r}", text, name=f"train-{rng.randint(0, 3)}"))
    return table


@dataclass
class Outcome:
    pod: dict | None  # the admitted pod
    message: str = ""  # the refusal

    def lines(self) -> list[int]:
        return sorted({int(n) for n in LINE.findall(self.message)})

    def compared(self) -> dict:
        metadata = self.pod["metadata"]
        return {"spec": self.pod["spec"], "labels": metadata.get("labels"), "annotations": metadata.get("annotations")}


def admit(api: client.CoreV1Api, namespace: str, case: Case) -> Outcome:
    try:
        response = api.create_namespaced_pod(namespace, case.pod(namespace), dry_run="All", _preload_content=False)
    except ApiException as err:
        return Outcome(None, json.loads(err.body).get("message", err.body) if err.body else str(err))
    return Outcome(json.loads(response.data))


@pytest.fixture(scope="module")
def namespaces(api_client):
    """(the policy's namespace, the webhook's namespace), each with its default ServiceAccount."""
    policy_ns = create_namespace(api_client, "eq-policy", labelled=False)
    webhook_ns = create_namespace(api_client, "eq-webhook", labelled=True)
    core = client.CoreV1Api(api_client)
    for namespace in (policy_ns, webhook_ns):
        wait_for(
            f"ServiceAccount default in {namespace}",
            lambda ns=namespace: _exists(core.read_namespaced_service_account, "default", ns),
            30,
        )
    yield policy_ns, webhook_ns
    for namespace in (policy_ns, webhook_ns):
        delete_namespace(api_client, namespace)


def _exists(read, *args):
    try:
        return read(*args)
    except ApiException as err:
        if err.status == 404:
            raise NotYet("not yet") from err
        raise


def render_policies(namespace: str) -> list[dict]:
    """The chart's policy-mode objects, renamed for this run and bound to `namespace` only."""
    documents = helm_template(
        f"eq-{RUN_ID}",
        SCHEDULER_CHART,
        "gpu-scheduler",
        "--show-only",
        POLICY_TEMPLATE,
        "--set-string",
        f"schedulerName={SCHEDULER_NAME}",
        "--set-string",
        "admission.mode=policy",
        "--api-versions",
        "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
    )
    kinds = sorted(doc["kind"] for doc in documents)
    assert kinds == sorted(
        [
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
    ), kinds
    for doc in documents:
        if doc["kind"].endswith("Binding"):
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    return documents


PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}


@pytest.fixture(scope="module")
def policies(api_client, namespaces):
    """The policies, created and seen acting on a pod of the policy's namespace."""
    custom = client.CustomObjectsApi(api_client)
    documents = render_policies(namespaces[0])
    for doc in documents:
        custom.create_cluster_custom_object("admissionregistration.k8s.io", "v1", PLURALS[doc["kind"]], doc)
    core = client.CoreV1Api(api_client)
    placed, broken = Case("probe", TASK_MAP, name="train-1"), Case("probe", "0=node1", name="train-0")

    def acting() -> None:
        # The API server picks each policy up from its own watch, one after the other: until
        # both act, a pod may be refused for want of devices, or a broken map let through.
        outcome = admit(core, namespaces[0], placed)
        if outcome.pod is None or not outcome.pod["spec"]["containers"][0].get("env"):
            raise NotYet(f"the mutating policy does not place a pod yet: {outcome.message or 'admitted without env'}")
        if admit(core, namespaces[0], broken).pod is not None:
            raise NotYet("the validating policy does not refuse a broken map yet")

    wait_for("the policies to place a pod and refuse a broken map", acting, 30)
    yield documents
    for doc in documents:
        ignoring_not_found(
            custom.delete_cluster_custom_object,
            "admissionregistration.k8s.io",
            "v1",
            PLURALS[doc["kind"]],
            doc["metadata"]["name"],
        )


@pytest.fixture(scope="module")
def webhook_serving(api_client, webhook, namespaces):
    webhook_registration.wait_until_called(api_client, namespaces[1])
    return webhook


def test_the_policy_admits_and_refuses_what_the_webhook_does(api_client, namespaces, policies, webhook_serving):
    core = client.CoreV1Api(api_client)
    policy_ns, webhook_ns = namespaces
    differences = []
    admitted = refused = 0
    for case in cases():
        by_policy, by_webhook = admit(core, policy_ns, case), admit(core, webhook_ns, case)
        if by_policy.pod is not None and by_webhook.pod is not None:
            admitted += 1
            if by_policy.compared() != by_webhook.compared():
                differences.append(
                    f"{case.label}: admitted differently:\n"
                    f"  policy:  {by_policy.compared()}\n  webhook: {by_webhook.compared()}"
                )
        elif by_policy.pod is None and by_webhook.pod is None:
            refused += 1
            if by_policy.lines() != by_webhook.lines():
                differences.append(
                    f"{case.label}: refused for other lines: policy {by_policy.lines()}, webhook {by_webhook.lines()}\n"
                    f"  policy:  {by_policy.message[:400]}\n  webhook: {by_webhook.message[:400]}"
                )
        else:
            which = "policy" if by_policy.pod is not None else "webhook"
            other = by_webhook if which == "policy" else by_policy
            differences.append(f"{case.label}: only the {which} admitted it; the other said: {other.message[:400]}")
    print(f"\n{admitted} cases admitted alike, {refused} refused alike, {len(differences)} differences")
    assert not differences, "\n".join(differences)
    # The table must exercise both outcomes, or it compares nothing.
    assert admitted >= 20 and refused >= 100, (admitted, refused)


@pytest.mark.parametrize(
    ("label", "text"),
    [
        ("10,000 plain lines", "".join(f"{i}=node{i % 4 + 1}:{i % 8}\n" for i in range(10_000))),
        ("501 lines", "".join(f"{i}=node1:0\n" for i in range(501))),
        (
            "65 KiB in 200 lines",
            "".join(
                f"{i}=node1:" + ",".join(f"GPU-{i:08x}-0000-4000-8000-{j:012x}" for j in range(8)) + "\n"
                for i in range(200)
            ),
        ),
    ],
)
def test_a_map_too_big_for_the_policy_is_refused_saying_so(api_client, namespaces, policies, label, text):
    outcome = admit(client.CoreV1Api(api_client), namespaces[0], Case(label, text, name="train-1"))
    assert outcome.pod is None, f"{label}: admitted: {outcome.pod['spec']['containers'][0].get('env')}"
    assert "admission.mode policy reads maps of at most 500 lines and 65536 bytes" in outcome.message, outcome.message
    assert "admission.mode=webhook" in outcome.message


def test_a_map_larger_than_kubernetes_allows_is_refused_by_both(api_client, namespaces, policies, webhook_serving):
    core = client.CoreV1Api(api_client)
    case = Case("300 KiB", "0=node1:0\n" + "#" * 300 * 1024 + "\n", name="train-0")
    for namespace in namespaces:
        outcome = admit(core, namespace, case)
        assert outcome.pod is None, f"admitted in {namespace}"

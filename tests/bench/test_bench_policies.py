"""The ours_policy runner's admission policies: the chart's own, for its schedulerName, bound to the bench namespace."""

import json

import pytest
from prerequisites import missing

from bench import policies
from bench.context import NAMESPACE, OUR_POLICY_SCHEDULER, OUR_SCHEDULER

KINDS = [
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    if not policies.HELM.is_file():
        missing(f"{policies.HELM} is missing: run `make tools`")
    return policies.render(OUR_POLICY_SCHEDULER, NAMESPACE)


def test_the_chart_renders_the_two_policies_and_their_bindings_as_v1(rendered):
    assert sorted(doc["kind"] for doc in rendered) == KINDS
    assert {doc["apiVersion"] for doc in rendered} == {"admissionregistration.k8s.io/v1"}
    assert {policies.object_path(doc) for doc in rendered} == {
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    }


def test_each_binding_binds_its_policy_in_the_bench_namespace_only(rendered):
    names = {doc["kind"]: doc["metadata"]["name"] for doc in rendered}
    for kind in ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"):
        binding = next(doc for doc in rendered if doc["kind"] == kind + "Binding")
        assert binding["spec"]["policyName"] == names[kind]
        assert binding["spec"]["matchResources"] == {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
        }
    # Named apart from an installed chart's (release gpu-scheduler) and the bench's webhook release.
    assert all(name.startswith(policies.RELEASE + "-") for name in names.values())


def test_the_policies_match_the_policy_runners_schedulername_and_not_the_webhooks(rendered):
    for doc in rendered:
        if doc["kind"].endswith("Binding"):
            continue
        conditions = {c["name"]: c["expression"] for c in doc["spec"]["matchConditions"]}
        assert f"object.spec.schedulerName == '{OUR_POLICY_SCHEDULER}'" in conditions["scheduled-by-us"]
        assert f"'{OUR_SCHEDULER}'" not in json.dumps(doc)


def test_helm_is_asked_for_policy_mode_at_the_local_clusters_version():
    args = policies.helm_args("s")
    pairs = dict(zip(args, args[1:], strict=False))
    assert pairs["--kube-version"].startswith("v1.")
    assert pairs["--show-only"] == "templates/admission-policies.yaml"
    assert pairs["--api-versions"] == "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
    assert {"schedulerName=s", "admission.mode=policy", "image.registry="} <= set(args)


class FakeApi:
    """An apiserver that stores the objects and answers the dry-run probe: placed once `placed_after` probes."""

    def __init__(self, placed_after: int = 0) -> None:
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.probes = 0
        self.placed_after = placed_after

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = ""):
        self.calls.append((method, path))
        if path.endswith("?dryRun=All"):
            self.probes += 1
            env = [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}] if self.probes > self.placed_after else []
            return 201, json.dumps({"spec": {"containers": [{"name": "probe", "env": env}]}}).encode()
        if method == "GET":
            found = self.objects.get(path)
            return (200, json.dumps(found).encode()) if found else (404, b"{}")
        return 200, b"{}"

    def call(self, method: str, path: str, body=None, ok=(), content_type: str = "") -> dict:
        self.calls.append((method, path))
        if method == "POST":
            self.objects[f"{path}/{body['metadata']['name']}"] = {**body, "metadata": {"resourceVersion": "1"}}
        elif method == "DELETE":
            self.objects.pop(path, None)
        return {}


def writes(api: FakeApi) -> list[str]:
    """The methods of the requests that wrote the policies (not the dry-run probes)."""
    return [m for m, path in api.calls if m in ("POST", "PUT") and "/admissionregistration.k8s.io/" in path]


def test_the_policies_are_created_seen_placing_a_pod_and_deleted(monkeypatch):
    monkeypatch.setattr(policies.time, "sleep", lambda s: None)
    api = FakeApi(placed_after=2)  # the apiserver takes a moment to act on new policies
    installed = policies.Policies(api, OUR_POLICY_SCHEDULER, NAMESPACE)
    installed.create()
    assert len(api.objects) == 4 and api.probes == 3
    assert writes(api) == ["POST"] * 4
    installed.delete()
    assert api.objects == {}
    deleted = [path.split("/")[-2] for method, path in api.calls if method == "DELETE"]
    assert deleted.index("mutatingadmissionpolicybindings") < deleted.index("mutatingadmissionpolicies")
    assert deleted.index("validatingadmissionpolicybindings") < deleted.index("validatingadmissionpolicies")


def test_policies_an_earlier_run_left_are_replaced(monkeypatch):
    monkeypatch.setattr(policies.time, "sleep", lambda s: None)
    api = FakeApi()
    policies.Policies(api, OUR_POLICY_SCHEDULER, NAMESPACE).create()
    api.calls.clear()
    policies.Policies(api, OUR_POLICY_SCHEDULER, NAMESPACE).create()
    assert writes(api) == ["PUT"] * 4


def test_policies_that_never_act_are_an_error_that_says_so(monkeypatch):
    monkeypatch.setattr(policies.time, "sleep", lambda s: None)
    installed = policies.Policies(FakeApi(placed_after=10**9), OUR_POLICY_SCHEDULER, NAMESPACE)
    installed._documents = []
    with pytest.raises(TimeoutError, match="did not place a pod of bench-gpu-scheduler-policy"):
        installed.wait_until_active(timeout=0.05)

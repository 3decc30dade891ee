"""Bind mode, the only admission mode, as `helm template` renders it.

What the CEL means is proven against the real kube-apiserver (tests/e2e/test_bind_mode_admission.py:
the MutatingAdmissionPolicy's patch, and the guard of the device annotations); here, which
objects each version gets and what they say, and that the removed modes fail the render.
"""

from __future__ import annotations

import pytest
import yaml
from commands import run
from gpu_scheduler.placement import DEVICES_ANNOTATION, DEVICES_FIELD_PATH, PLACEMENT_ANNOTATION

from .conftest import HELM, REGISTRY_SET, SCHEDULER_CHART, SCHEDULER_NAMESPACE, Rendered, container_args, refused_render
from .test_helm_template import webhooks

pytestmark = pytest.mark.delivery

MUTATING_POLICY_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
# The oldest Kubernetes the chart accepts serves no MutatingAdmissionPolicy; 1.36+ do.
VERSIONS = {"1.35": ("1.35.0", ()), "1.37": ("1.37.2", (MUTATING_POLICY_API,))}
BIND_ENTRIES = "gpu-scheduler-bind-entries"
WORKLOAD_ENTRIES = "gpu-scheduler-workload-bind-entries"
GUARD = "gpu-scheduler-device-annotations"
# The objects of the removed policy mode.
POLICY_MODE = "gpu-scheduler-placement"
MUTATING = "pods.mutate.gpu-scheduler"


def render_for(version: str, *sets: str) -> Rendered:
    """The chart as a cluster of `version` ("1.35", "1.37") renders it."""
    kube_version, api_versions = VERSIONS[version]
    argv = [HELM, "template", "gpu-scheduler", SCHEDULER_CHART, "--namespace", SCHEDULER_NAMESPACE]
    argv += ["--kube-version", kube_version, "--set", REGISTRY_SET]
    for api_version in api_versions:
        argv += ["--api-versions", api_version]
    for assignment in sets:
        argv += ["--set", assignment]
    result = run(argv)
    assert result.returncode == 0, result.stderr
    return Rendered(tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc))


@pytest.fixture(scope="module")
def rendered(helm):
    return {version: render_for(version) for version in VERSIONS}


def names(rendered: Rendered, kind: str) -> set[str]:
    return {doc["metadata"]["name"] for doc in rendered.of_kind(kind)}


def mutating(rendered: Rendered) -> dict:
    (webhook,) = [w for w in webhooks(rendered) if w["name"] == MUTATING]
    return webhook


def conditions(hook: dict) -> dict[str, str]:
    return {c["name"]: " ".join(c["expression"].split()) for c in hook["matchConditions"]}


def webhook_args(rendered: Rendered) -> list[str]:
    return container_args(rendered.one("Deployment", "gpu-scheduler-webhook"))


@pytest.mark.parametrize("version", VERSIONS)
def test_bind_is_the_only_mode_on_every_supported_version(rendered, version):
    found = rendered[version]

    # The webhook has no other way to give devices: nothing to choose.
    assert not any(arg.startswith("--devices-from") for arg in webhook_args(found))
    # The per-pod grammar in CEL (the removed policy mode) is not installed.
    assert POLICY_MODE not in names(found, "ValidatingAdmissionPolicy")
    assert POLICY_MODE not in names(found, "MutatingAdmissionPolicy")
    assert list(conditions(mutating(found))) == ["scheduled-by-us", "needs-the-webhook"]


def test_on_1_37_a_mutating_admission_policy_gives_the_entry_and_the_webhook_sees_pods_created_on_a_node(rendered):
    found = rendered["1.37"]

    assert names(found, "MutatingAdmissionPolicy") == {BIND_ENTRIES, WORKLOAD_ENTRIES}
    binding = found.one("MutatingAdmissionPolicyBinding", BIND_ENTRIES)
    assert binding["spec"]["policyName"] == BIND_ENTRIES
    assert conditions(mutating(found))["needs-the-webhook"] == (
        "request.operation != 'CREATE' || (has(object.spec.nodeName) && object.spec.nodeName != '')"
    )


def test_on_1_35_the_webhook_gives_the_entry_to_pods_lacking_it(rendered):
    found = rendered["1.35"]

    assert not found.of_kind("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    needs = conditions(mutating(found))["needs-the-webhook"]
    # A pod created on a node, with a map or without (then refused), or one with a map lacking the entry.
    assert needs.startswith(
        "request.operation != 'CREATE' || (has(object.spec.nodeName) && object.spec.nodeName != '') || "
        "((has(object.metadata) && has(object.metadata.annotations) && "
        "'gpu-scheduling-map' in object.metadata.annotations) && ("
    )
    for field in ("initContainers", "containers"):
        assert f"object.spec.?{field}.orValue([]).exists(c, !(" in needs
    assert f"e.?valueFrom.?fieldRef.?fieldPath.orValue('') == \"{DEVICES_FIELD_PATH}\"" in needs


def test_the_policys_patch_is_a_constant_entry_that_reads_no_map(rendered):
    policy = rendered["1.37"].one("MutatingAdmissionPolicy", BIND_ENTRIES)["spec"]
    (mutation,) = policy["mutations"]
    patch = " ".join(mutation["jsonPatch"]["expression"].split())

    assert "gpu-scheduling-map" not in patch and "variables" not in policy and "variables." not in patch
    for field in ("initContainers", "containers"):
        entry = (
            f"Object.spec.{field}.env{{name: 'CUDA_VISIBLE_DEVICES', valueFrom: Object.spec.{field}.env.valueFrom"
            f'{{fieldRef: Object.spec.{field}.env.valueFrom.fieldRef{{fieldPath: "{DEVICES_FIELD_PATH}"}}}}}}'
        )
        assert entry in patch, field
        assert f"Object.spec.{field}.env{{name: 'CUDA_DEVICE_ORDER', value: 'PCI_BUS_ID'}}" in patch
    assert policy["failurePolicy"] == "Fail" and policy["reinvocationPolicy"] == "IfNeeded"
    assert policy["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]


def test_the_policy_matches_only_pods_of_ours_with_a_map_and_a_container_lacking_the_entry(rendered):
    found = conditions(rendered["1.37"].one("MutatingAdmissionPolicy", BIND_ENTRIES)["spec"])

    assert list(found) == ["scheduled-by-us", "has-map", "lacks-bind-entry"]
    assert "object.spec.schedulerName == 'gpu-scheduler'" in found["scheduled-by-us"]
    assert "'gpu-scheduling-map' in object.metadata.annotations" in found["has-map"]
    # The webhook's condition on 1.35 and this one are one helper: the same pods.
    needs = conditions(mutating(rendered["1.35"]))["needs-the-webhook"]
    assert needs.endswith(f"{found['has-map']} && {found['lacks-bind-entry']})")


# A Job's template is immutable: only its creation is mutated.
WORKLOAD_RULES = [(["apps"], ["statefulsets"], ["CREATE", "UPDATE"]), (["batch"], ["jobs"], ["CREATE"])]


def test_statefulsets_and_jobs_get_the_entry_at_apply_from_a_policy_on_1_37(rendered):
    found = rendered["1.37"]
    policy = found.one("MutatingAdmissionPolicy", WORKLOAD_ENTRIES)["spec"]
    binding = found.one("MutatingAdmissionPolicyBinding", WORKLOAD_ENTRIES)["spec"]

    assert binding["policyName"] == WORKLOAD_ENTRIES
    rules = policy["matchConstraints"]["resourceRules"]
    assert [(r["apiGroups"], r["resources"], r["operations"]) for r in rules] == WORKLOAD_RULES
    # A workload let through without the entries still runs: its pods get them one by one.
    assert policy["failurePolicy"] == "Ignore"
    found_conditions = conditions(policy)
    assert list(found_conditions) == ["scheduled-by-us", "has-map", "lacks-bind-entry", "template-changed-on-update"]
    # An update that leaves the template alone (a label) must not start a rollout.
    assert found_conditions["template-changed-on-update"] == (
        "request.operation != 'UPDATE' || object.spec.template != oldObject.spec.template"
    )
    assert "object.spec.template.spec.schedulerName == 'gpu-scheduler'" in found_conditions["scheduled-by-us"]
    assert "'gpu-scheduling-map' in object.spec.template.metadata.annotations" in found_conditions["has-map"]
    patch = " ".join(policy["mutations"][0]["jsonPatch"]["expression"].split())
    for field in ("initContainers", "containers"):
        assert f"'/spec/template/spec/{field}/' + string(i) + '/env'" in patch
        assert f"Object.spec.template.spec.{field}.env{{name: 'CUDA_DEVICE_ORDER', value: 'PCI_BUS_ID'}}" in patch
    assert "gpu-scheduling-map" not in patch and "variables." not in patch
    assert "workloads.mutate.gpu-scheduler" not in {w["name"] for w in webhooks(found)}


def test_statefulsets_and_jobs_get_the_entry_at_apply_from_the_webhook_on_1_35(rendered):
    found = rendered["1.35"]
    (hook,) = [w for w in webhooks(found) if w["name"] == "workloads.mutate.gpu-scheduler"]

    assert hook["clientConfig"]["service"]["path"] == "/mutate-workloads"
    assert hook["failurePolicy"] == "Ignore" and hook["reinvocationPolicy"] == "IfNeeded"
    assert [(r["apiGroups"], r["resources"], r["operations"]) for r in hook["rules"]] == WORKLOAD_RULES
    # The same workloads as the policy on 1.37: one set of helpers writes both.
    policy = conditions(rendered["1.37"].one("MutatingAdmissionPolicy", WORKLOAD_ENTRIES)["spec"])
    assert conditions(hook) == policy


@pytest.mark.parametrize("version", VERSIONS)
def test_validating_webhooks_fail_open_and_the_mutating_one_keeps_its_policy(version):
    found = render_for(version, "webhook.failurePolicy=Fail")

    policies = {w["name"]: w["failurePolicy"] for w in webhooks(found)}
    assert policies.pop(MUTATING) == "Fail"
    assert set(policies.values()) == {"Ignore"}, policies


@pytest.mark.parametrize("mode", ["webhook", "policy"])
def test_a_removed_mode_fails_the_render_saying_bind_is_the_only_one(helm, mode):
    # A values file of an earlier version that asked for a legacy mode must not silently get bind mode.
    message = refused_render(helm, SCHEDULER_CHART, f"admission.mode={mode}")

    assert f"admission.mode={mode} was removed: bind is the only admission mode" in message
    assert "Remove admission.mode (and admission.policyMaxLines) from your values" in message
    assert "CHANGELOG.md" in message


@pytest.mark.parametrize("version", VERSIONS)
def test_the_guard_of_the_device_annotations_is_installed(rendered, version):
    found = rendered[version]

    policy = found.one("ValidatingAdmissionPolicy", GUARD)["spec"]
    binding = found.one("ValidatingAdmissionPolicyBinding", GUARD)["spec"]
    assert binding == {"policyName": GUARD, "validationActions": ["Deny"]}
    assert policy["failurePolicy"] == "Fail"
    # UPDATEs of the pod itself only: not a Binding (a CREATE of pods/binding), not its status.
    assert policy["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
    ]
    assert conditions(policy) == {
        "bound-with-devices": (
            f"has(oldObject.metadata.annotations) && '{DEVICES_ANNOTATION}' in oldObject.metadata.annotations"
        )
    }
    guarded = {}
    for validation in policy["validations"]:
        expression = " ".join(validation["expression"].split())
        message = " ".join(validation["messageExpression"].split())
        (key,) = [k for k in (DEVICES_ANNOTATION, PLACEMENT_ANNOTATION) if f"[?'{k}']" in expression]
        assert expression == (f"object.metadata.?annotations[?'{key}'] == oldObject.metadata.?annotations[?'{key}']")
        assert f"the annotation {key} was written when the pod was bound and cannot change" in message
        assert "delete it and create it again" in message
        guarded[key] = validation["reason"]
    assert guarded == {DEVICES_ANNOTATION: "Forbidden", PLACEMENT_ANNOTATION: "Forbidden"}


def test_an_unknown_mode_fails_the_render_naming_the_only_one(helm):
    message = refused_render(helm, SCHEDULER_CHART, "admission.mode=bound")

    assert "admission.mode=bound is no admission mode: bind is the only admission mode" in message


@pytest.mark.parametrize("version", VERSIONS)
def test_values_of_earlier_versions_that_name_bind_render_as_without_them(rendered, version):
    # What a values file, or `helm upgrade --reuse-values`, of an earlier version carries.
    for sets in (("admission.mode=",), ("admission.mode=bind", "admission.policyMaxLines=500")):
        assert render_for(version, *sets) == rendered[version], sets

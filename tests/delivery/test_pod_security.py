"""Every pod either chart can run is locked down and bounded, in every certificate mode."""

from __future__ import annotations

import pytest

from .conftest import CHECK_CHART, SCHEDULER_CHART, pod_spec

pytestmark = pytest.mark.delivery

SCHEDULER_VARIANTS = [
    (SCHEDULER_CHART, ()),
    (SCHEDULER_CHART, ("certs.mode=provided", "certs.existingSecret=tls")),
    (SCHEDULER_CHART, ("certs.mode=cert-manager",)),
]
VARIANTS = [*SCHEDULER_VARIANTS, (CHECK_CHART, ())]


def containers(spec: dict) -> list[dict]:
    return spec.get("initContainers", []) + spec["containers"]


@pytest.mark.parametrize(("chart", "sets"), VARIANTS)
def test_every_pod_runs_as_uid_1000_with_seccomp(render, chart, sets):
    owners = render(chart, *sets).pod_owners()

    assert owners
    for owner in owners:
        assert pod_spec(owner)["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, owner["metadata"]["name"]


@pytest.mark.parametrize(("chart", "sets"), VARIANTS)
def test_every_container_is_read_only_unprivileged_and_capability_free(render, chart, sets):
    for owner in render(chart, *sets).pod_owners():
        for container in containers(pod_spec(owner)):
            assert container["securityContext"] == {
                "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            }, f"{owner['metadata']['name']}/{container['name']}"


@pytest.mark.parametrize(("chart", "sets"), VARIANTS)
def test_every_container_requests_cpu_and_memory_and_caps_memory(render, chart, sets):
    for owner in render(chart, *sets).pod_owners():
        for container in containers(pod_spec(owner)):
            resources = container["resources"]
            where = f"{owner['metadata']['name']}/{container['name']}"
            assert {"cpu", "memory"} <= resources["requests"].keys(), where
            assert "memory" in resources["limits"], where


@pytest.mark.parametrize(("chart", "sets"), SCHEDULER_VARIANTS)
def test_scheduler_pods_get_a_writable_tmp_on_the_read_only_root(render, chart, sets):
    # prometheus' multiprocess files live in /tmp.
    for owner in render(chart, *sets).pod_owners():
        spec = pod_spec(owner)
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes["tmp"], owner["metadata"]["name"]
        for container in spec["containers"]:
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]

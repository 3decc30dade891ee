"""Golden checks of charts/gpu-scheduler-check as `helm template` renders it."""

from __future__ import annotations

import pytest
from gpu_scheduler.placement import MAP_ANNOTATION, PLACEMENT_ANNOTATION, parse_map

from .conftest import CHECK_CHART, container_args, flag, pod_spec, refused_render

pytestmark = pytest.mark.delivery

# The task's map, verbatim.
TASK_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def statefulset(rendered) -> dict:
    (found,) = rendered.of_kind("StatefulSet")
    return found


def test_default_map_is_exactly_the_tasks_five_lines(render):
    template = statefulset(render(CHECK_CHART))["spec"]["template"]

    annotation = template["metadata"]["annotations"][MAP_ANNOTATION]

    assert annotation == TASK_MAP
    placements = {i: (e.node, e.cuda_visible_devices) for i, e in parse_map(annotation).items()}
    assert placements == {
        0: ("node1", "0,1"),
        1: ("node2", "2"),
        2: ("node3", "0,1,2"),
        3: ("node4", "3"),
        4: ("node4", "3"),
    }


@pytest.mark.parametrize(
    ("release", "name"),
    [
        ("gpu-scheduler-check", "gpu-scheduler-check"),
        ("team-a-gpu-scheduler-check", "team-a-gpu-scheduler-check"),
        ("demo", "demo-gpu-scheduler-check"),
    ],
)
def test_check_objects_are_named_after_the_release(render, release, name):
    rendered = render(CHECK_CHART, release=release)
    sts = statefulset(rendered)
    (service,) = rendered.of_kind("Service")

    assert sts["metadata"]["name"] == service["metadata"]["name"] == sts["spec"]["serviceName"] == name
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= (sts["spec"]["template"]["metadata"]["labels"].items())


def test_two_check_releases_in_one_namespace_share_no_name_and_no_pod(render):
    first, second = (render(CHECK_CHART, release=release) for release in ("check-a", "check-b"))

    names = [{d["metadata"]["name"] for d in r.docs} for r in (first, second)]
    assert not names[0] & names[1]
    assert statefulset(first)["spec"]["selector"] != statefulset(second)["spec"]["selector"]


def test_fullname_override_renames_statefulset_and_service(render):
    rendered = render(CHECK_CHART, "fullnameOverride=check-b")

    assert statefulset(rendered)["metadata"]["name"] == "check-b"
    assert [s["metadata"]["name"] for s in rendered.of_kind("Service")] == ["check-b"]


def test_five_parallel_pods_ask_for_the_gpu_scheduler(render):
    sts = statefulset(render(CHECK_CHART))

    assert sts["spec"]["replicas"] == 5
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert pod_spec(sts)["schedulerName"] == "gpu-scheduler"


def test_check_logs_every_ten_seconds(render):
    args = container_args(statefulset(render(CHECK_CHART)))

    assert flag(args, "interval") == "10"


def test_node_pod_and_expected_placement_come_from_the_downward_api(render):
    (container,) = pod_spec(statefulset(render(CHECK_CHART)))["containers"]

    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}

    assert env == {
        "NODE_NAME": "spec.nodeName",
        "POD_NAME": "metadata.name",
        "EXPECTED_PLACEMENT": f"metadata.annotations['{PLACEMENT_ANNOTATION}']",
    }


def test_values_set_map_replicas_scheduler_and_interval(render):
    rendered = render(
        CHECK_CHART,
        "schedulingMap=0=gpu-a:1\n1=gpu-b:0\n",
        "replicas=2",
        "schedulerName=team-a",
        "interval=30",
    )
    sts = statefulset(rendered)

    assert sts["spec"]["template"]["metadata"]["annotations"][MAP_ANNOTATION] == ("0=gpu-a:1\n1=gpu-b:0\n")
    assert sts["spec"]["replicas"] == 2
    assert pod_spec(sts)["schedulerName"] == "team-a"
    assert flag(container_args(sts), "interval") == "30"


def test_check_pods_get_no_api_token(render):
    assert pod_spec(statefulset(render(CHECK_CHART)))["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ("replica=3", "replica"),
        ("image.pullpolicy=Always", "pullpolicy"),
        ("replicas=-1", "replicas"),
    ],
)
def test_schema_rejects_a_mistyped_value(helm, assignment, complaint):
    assert complaint in refused_render(helm, CHECK_CHART, assignment)

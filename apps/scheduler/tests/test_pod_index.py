"""Which line of the map is a pod's own: labels first, the name only where it is stable."""

import pytest
from gpu_scheduler.placement import (
    InvalidMapError,
    MissingEntryError,
    MissingMapError,
    PodIndexError,
    placement_for,
    pod_index,
)


def pod(name="web-0", labels=None, annotations=None, owner=None, namespace="team-a", generate_name=None):
    meta = {"namespace": namespace, "labels": labels or {}, "annotations": annotations or {}}
    if name is not None:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True, "apiVersion": "v1", "uid": "u"}]
    return {"metadata": meta, "spec": {"schedulerName": "gpu-scheduler"}}


def test_statefulset_label_wins_over_the_name():
    p = pod("web-3", labels={"apps.kubernetes.io/pod-index": "7"}, owner="StatefulSet")
    assert pod_index(p) == 7


def test_job_completion_index_label_then_annotation():
    assert pod_index(pod("job-abcde", labels={"batch.kubernetes.io/job-completion-index": "2"}, owner="Job")) == 2
    assert pod_index(pod("job-abcde", annotations={"batch.kubernetes.io/job-completion-index": "4"}, owner="Job")) == 4


def test_bare_pod_and_statefulset_pod_use_the_trailing_number():
    assert pod_index(pod("trainer-12")) == 12
    assert pod_index(pod("gpu-scheduler-check-4", owner="StatefulSet")) == 4


def test_replicaset_pod_with_an_all_digit_suffix_is_never_read_as_an_index():
    with pytest.raises(PodIndexError) as caught:
        pod_index(pod("web-7d4b9-12345", owner="ReplicaSet"))
    assert "team-a/web-7d4b9-12345" in str(caught.value)
    assert "ReplicaSet" in str(caught.value)


def test_pod_without_an_index_gets_an_error_naming_it():
    with pytest.raises(PodIndexError) as caught:
        pod_index(pod("trainer"))
    assert "team-a/trainer has no index" in str(caught.value)


def test_pod_without_a_name_yet_is_named_by_its_generate_name():
    with pytest.raises(PodIndexError) as caught:
        pod_index(pod(None, generate_name="web-", namespace=None), namespace="ns-from-request")
    assert "ns-from-request/web-<generated>" in str(caught.value)


def test_malformed_index_label_is_an_error_not_a_fallback():
    with pytest.raises(PodIndexError) as caught:
        pod_index(pod("web-0", labels={"apps.kubernetes.io/pod-index": "one"}))
    assert "'one'" in str(caught.value)


def test_placement_for_finds_the_pods_entry():
    entry = placement_for(pod("check-2", annotations={"gpu-scheduling-map": "2=node3:0,1,2\n0=node1:0"}))
    assert (entry.node, entry.cuda_visible_devices) == ("node3", "0,1,2")


def test_placement_for_reports_missing_map_missing_entry_and_invalid_map():
    with pytest.raises(MissingMapError):
        placement_for(pod("check-0"))
    with pytest.raises(MissingEntryError) as caught:
        placement_for(pod("check-9", annotations={"gpu-scheduling-map": "0=node1:0\n1=node2:1"}))
    assert "index 9" in str(caught.value) and "0, 1" in str(caught.value)
    with pytest.raises(InvalidMapError) as caught:
        placement_for(pod("check-0", annotations={"gpu-scheduling-map": "0=node1:0\n1=node2"}))
    assert str(caught.value).startswith("line 2: ")

"""What the benchmark creates: every runner gets the same pods, placed the same way."""

from bench.kube_scheduler import scheduler_configuration
from bench.workload import (
    COUNT_MAP,
    MAP_ANNOTATION,
    NODE_GPUS,
    admission_review,
    bench_pods,
    dynamic_pods,
    gpus_short,
    kwok_node,
    map_text,
    pinned_node,
    statefulset,
)


def test_pods_of_a_group_share_one_map_text_with_a_line_per_member():
    pods = bench_pods(250, nodes=10, group_size=100, scheduler_name="s", namespace="ns")
    texts = [p["metadata"]["annotations"][MAP_ANNOTATION] for p in pods]
    assert len(pods) == 250
    assert texts[0] is texts[99] and texts[100] is texts[199]  # one string per group: the parse cache sees it once
    assert len(set(texts)) == 3
    assert texts[249].splitlines() == [f"{i}=bn-{i % 10}:{i % 8}" for i in range(200, 250)]


def test_each_pods_map_line_and_node_affinity_name_the_same_node():
    for pod in bench_pods(40, nodes=7, group_size=16, scheduler_name="s", namespace="ns"):
        index = int(pod["metadata"]["name"].removeprefix("p-"))
        lines = dict(line.split("=") for line in pod["metadata"]["annotations"][MAP_ANNOTATION].splitlines())
        assert lines[str(index)].split(":")[0] == pinned_node(pod) == f"bn-{index % 7}"


def test_runners_get_identical_pods_but_for_the_scheduler_name():
    ours = bench_pods(5, 3, 5, "gpu", "ns")
    theirs = bench_pods(5, 3, 5, "kube", "ns")
    for a, b in zip(ours, theirs, strict=True):
        assert a["spec"].pop("schedulerName") == "gpu" and b["spec"].pop("schedulerName") == "kube"
        assert a == b


def test_a_bench_node_is_created_ready_with_sixteen_gpus_of_which_the_pinned_maps_name_eight():
    node = kwok_node(3, "2026-01-01T00:00:00Z")
    assert node["metadata"]["name"] == "bn-3"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "16"
    assert {int(line.split(":")[1]) for line in map_text(range(100), nodes=3).splitlines()} == set(range(8))
    # No inventory: gpu-scheduler counts the nvidia.com/gpu capacity, as kube-scheduler does.
    assert "gpu-scheduler/gpus" not in node["metadata"]["annotations"]
    assert {"type": "Ready", "status": "True"}.items() <= node["status"]["conditions"][0].items()
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_the_statefulset_map_has_a_line_per_replica_and_runs_in_parallel():
    sts = statefulset("ss", 500, nodes=100, scheduler_name="s", namespace="ns")
    template = sts["spec"]["template"]
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert len(template["metadata"]["annotations"][MAP_ANNOTATION].splitlines()) == 500
    assert template["spec"]["schedulerName"] == "s"
    assert sts["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_map_text_ends_with_a_newline_as_a_yaml_block_would():
    assert map_text(range(2), nodes=4) == "0=bn-0:0\n1=bn-1:1\n"


def test_the_admission_review_carries_the_pod_as_a_create_request():
    pod = bench_pods(1, 1, 1, "s", "ns")[0]
    request = admission_review(pod)["request"]
    assert request["operation"] == "CREATE" and request["object"] is pod
    assert request["namespace"] == "ns" and request["kind"]["kind"] == "Pod"


def test_kube_scheduler_at_defaults_gets_no_client_settings_at_all():
    config = scheduler_configuration("/k", "bench", ("ns", "lease"))
    assert config["clientConnection"] == {"kubeconfig": "/k"}
    assert config["profiles"] == [{"schedulerName": "bench"}]


def test_kube_scheduler_matched_gets_our_qps_and_burst():
    config = scheduler_configuration("/k", "bench", ("ns", "lease"), qps=500, burst=1000)
    assert config["clientConnection"] == {"kubeconfig": "/k", "qps": 500, "burst": 1000}


def test_count_line_pods_name_no_node_and_ask_for_one_gpu_each_the_way_their_scheduler_reads():
    ours = dynamic_pods(3, "gpu", "ns", request_gpu=False)
    theirs = dynamic_pods(3, "kube", "ns", request_gpu=True)
    assert [p["metadata"]["name"] for p in ours] == ["p-0", "p-1", "p-2"]
    for a, b in zip(ours, theirs, strict=True):
        assert a["metadata"]["annotations"][MAP_ANNOTATION] == COUNT_MAP == "*=*:gpus=1\n"
        assert "affinity" not in a["spec"] and "nodeName" not in a["spec"]
        # kube-scheduler places by the request; ours by the map, and its pods request no GPU (a device
        # plugin would give the container GPUs of its own choosing).
        assert b["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
        assert "resources" not in a["spec"]["containers"][0]
        b["spec"]["containers"][0].pop("resources")
        assert a["spec"].pop("schedulerName") == "gpu" and b["spec"].pop("schedulerName") == "kube"
        assert a == b


def test_count_line_pods_fit_at_every_size_the_bench_runs_and_a_burst_that_cannot_is_named():
    for pods, nodes in ((1000, 100), (200, 20), (10000, 5000)):  # full, QUICK, scale
        assert gpus_short(pods, nodes) is None
    assert gpus_short(100 * NODE_GPUS, 100) is None
    assert gpus_short(100 * NODE_GPUS + 1, 100) == (
        f"1,601 pods of one GPU each do not fit on 100 nodes of {NODE_GPUS} GPUs (1,600)"
    )

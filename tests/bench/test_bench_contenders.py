"""The contenders run under the same conditions: order balanced over the rounds, one leader election, one scope."""

import json
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest
import yaml
from gpu_scheduler.placement import FROM_BIND, bind_env_entry, given_value

from bench import bare_binder, contenders, context, measure, runners, scale, throughput
from bench.contenders import (
    KUBE_DEFAULTS,
    KUBE_MATCHED,
    KUBE_PINNED,
    OURS_BIND,
    RUNNERS,
    round_order,
)
from bench.run import parse_settings


class FakeApi:
    """Answers requests from a table (method, path) -> (status, body); records every request."""

    def __init__(self, answers: dict | None = None) -> None:
        self.answers = answers or {}
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> tuple[int, bytes]:
        self.requests.append((method, path))
        return self.answers.get((method, path), (201, b"{}"))

    def call(self, method: str, path: str, body=None, ok=(), content_type: str = "") -> dict:
        status, data = self.request(method, path)
        assert status < 300 or status in ok, f"{method} {path}: {status}"
        return json.loads(data) if data else {}


def test_each_runner_leads_a_round_in_turn():
    keys = ("a", "b", "c")
    assert [round_order(keys, r)[0] for r in (1, 2, 3)] == ["a", "b", "c"]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7])
def test_in_every_2n_rounds_each_runner_leads_twice_and_follows_each_other_one_twice(n):
    keys = tuple(f"runner{i}" for i in range(n))
    leads, pairs = Counter(), Counter()
    for round_no in range(1, 2 * n + 1):
        order = round_order(keys, round_no)
        assert sorted(order) == sorted(keys)
        leads[order[0]] += 1
        pairs.update(pairwise(order))
    assert leads == {key: 2 for key in keys}
    assert pairs == {(a, b): 2 for a in keys for b in keys if a != b}


def test_with_an_even_number_of_runners_the_first_n_rounds_are_balanced_already():
    keys = tuple(f"runner{i}" for i in range(6))
    pairs = Counter(pair for r in range(1, 7) for pair in pairwise(round_order(keys, r)))
    assert pairs == {(a, b): 1 for a in keys for b in keys if a != b}


def test_gpu_scheduler_no_longer_always_follows_the_same_runner():
    # The rotation it replaces put the Python binder right before gpu-scheduler in every round after the first.
    before = set()
    for round_no in range(2, 6):
        order = round_order(RUNNERS, round_no)
        if order.index(OURS_BIND):
            before.add(order[order.index(OURS_BIND) - 1])
    assert len(before) >= 3


def test_the_runners_of_every_run_make_a_williams_design():
    assert RUNNERS[0] == OURS_BIND
    n = len(RUNNERS)
    leads, pairs = Counter(), Counter()
    for round_no in range(1, 2 * n + 1):
        order = round_order(RUNNERS, round_no)
        assert sorted(order) == sorted(RUNNERS)
        leads[order[0]] += 1
        pairs.update(pairwise(order))
    assert leads == {key: 2 for key in RUNNERS}
    assert pairs == {(a, b): 2 for a in RUNNERS for b in RUNNERS if a != b}


@dataclass
class FakeSettings:
    runs: int = 3
    modes: tuple[str, ...] = ("burst",)
    runners: tuple[str, ...] = (OURS_BIND, KUBE_MATCHED, KUBE_PINNED)
    pods: int = 10
    nodes: int = 2
    group: int = 10
    scale_pods: int = 10
    scale_nodes: int = 2


@dataclass
class FakeBench:
    settings: FakeSettings = field(default_factory=FakeSettings)
    ran: list[tuple[str, str]] = field(default_factory=list)

    def phase(self, text: str) -> None:
        pass

    def learn_baseline(self) -> float:
        return 0.05


def fake_figures(bench: FakeBench, key: str, label: str) -> dict:
    bench.ran.append((key, label))
    return {
        "key": key,
        "label": key,
        "pods": 10,
        "created": 10,
        "bound": 10,
        "complete": True,
        "pods_per_second": 1.0,
        "latency_s": {"p50": 0.1, "p99": 0.2},
        "cpu_s": {"runner": 0.1, "webhook": 0.0, "control_plane": 0.1},
        "peak_rss_mib": 1.0,
    }


def test_the_throughput_phase_rotates_the_runners_from_round_to_round(monkeypatch):
    bench = FakeBench()
    monkeypatch.setitem(
        throughput.MODES, "burst", lambda bench, key, pods, nodes, label: fake_figures(bench, key, label)
    )
    throughput.run(bench)
    assert bench.ran[0][1].endswith("warm-up")  # not measured (test_bench_settle.py)
    firsts = [bench.ran[1:][i][0] for i in range(0, 9, 3)]
    assert firsts == [OURS_BIND, KUBE_MATCHED, KUBE_PINNED]  # ours no longer always first


def test_the_scale_phase_rotates_the_runners_too(monkeypatch):
    bench = FakeBench()
    bench.cluster = type("Cluster", (), {"ensure_nodes": lambda self, n: None})()
    monkeypatch.setattr(scale, "measure_burst", lambda bench, key, pods, nodes, label: fake_figures(bench, key, label))
    scale.run(bench)
    assert [bench.ran[1:][i][0] for i in range(0, 9, 3)] == [OURS_BIND, KUBE_MATCHED, KUBE_PINNED]


def test_every_scheduler_elects_a_leader_with_the_same_lease_timing(tmp_path: Path):
    api = FakeApi()
    ours = runners.ours(api, "/k", "gpu-bench", tmp_path, "bench-gpu-scheduler")
    argv = ours.process.argv
    flags = {argv[i]: argv[i + 1] for i in range(2, len(argv) - 1) if argv[i].startswith("--")}
    assert flags["--leader-elect"] == "true"
    assert flags["--leader-elect-resource-namespace"] == "gpu-bench"
    for key in (KUBE_DEFAULTS, KUBE_MATCHED, KUBE_PINNED):
        runners.kube(api, key, "/k", "gpu-bench", tmp_path, "bench-kube-scheduler")
        election = yaml.safe_load((tmp_path / f"{key}-config.yaml").read_text())["leaderElection"]
        assert election["leaderElect"] is True
        assert election["resourceLock"] == "leases"
        assert election["resourceNamespace"] == "gpu-bench"
        assert election["resourceName"] == contenders.lease_name(key)
        assert float(flags["--leader-elect-lease-duration"]) == float(election["leaseDuration"].removesuffix("s"))
        assert float(flags["--leader-elect-renew-deadline"]) == float(election["renewDeadline"].removesuffix("s"))
        assert float(flags["--leader-elect-retry-period"]) == float(election["retryPeriod"].removesuffix("s"))
    assert flags["--leader-elect-resource-name"] == contenders.lease_name(OURS_BIND)


def test_a_scheduler_starts_on_a_lease_nobody_holds(tmp_path: Path):
    api = FakeApi()
    runner = runners.kube(api, KUBE_MATCHED, "/k", "gpu-bench", tmp_path, "bench-kube-scheduler")
    started = []
    runner.process.start = lambda: started.append(list(api.requests))
    runner.launch()
    lease = f"/apis/coordination.k8s.io/v1/namespaces/gpu-bench/leases/{contenders.lease_name(KUBE_MATCHED)}"
    assert started == [[("DELETE", lease)]]  # deleted before the process started


def test_kube_scheduler_is_ready_only_once_it_holds_its_lease():
    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    held = {"spec": {"holderIdentity": "host_1234"}}
    assert runners.lease_held(FakeApi({("GET", path): (200, json.dumps(held).encode())}), "ns", "l")
    assert not runners.lease_held(FakeApi({("GET", path): (404, b"{}")}), "ns", "l")
    released = {"spec": {"holderIdentity": ""}}
    assert not runners.lease_held(FakeApi({("GET", path): (200, json.dumps(released).encode())}), "ns", "l")


def test_every_contender_watches_every_namespace(tmp_path: Path):
    # kube-scheduler cannot be narrowed to a namespace: no other contender is.
    ours = runners.ours(FakeApi(), "/k", "gpu-bench", tmp_path, "bench-gpu-scheduler")
    assert "--namespace" not in ours.process.argv
    binder = runners.python_binder("/k", tmp_path, "bench-python-binder")
    assert "--namespace" not in binder.process.argv


def test_the_python_binder_lists_every_namespace_and_binds_in_the_pods_own():
    api = FakeApi()
    binder = bare_binder.BareBinder(api, "bench", threads=1)
    assert binder.pods_path == "/api/v1/pods"
    pod = {
        "metadata": {"name": "p-0", "namespace": "team-a", "uid": "u0"},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "values": ["bn-1"]}]}]
                    }
                }
            }
        },
    }
    binder.offer(pod)
    binder.bind(binder.next_pod())
    assert api.requests == [("POST", "/api/v1/namespaces/team-a/pods/p-0/binding")]


def test_gpu_scheduler_in_bind_mode_runs_by_default_every_round_and_the_diagnostic_without_admission_is_gone(
    monkeypatch,
):
    monkeypatch.delenv("BENCH_RUNNERS", raising=False)
    assert OURS_BIND in parse_settings([]).runners
    assert not hasattr(contenders, "OURS_UNADMITTED") and contenders.ALL_RUNNERS == RUNNERS
    with pytest.raises(SystemExit):
        parse_settings(["--runners", "ours_bind,ours_unadmitted"])
    assert OURS_BIND in scale.RUNNERS
    bench = FakeBench(FakeSettings(runners=(OURS_BIND, KUBE_PINNED, KUBE_MATCHED)))
    monkeypatch.setitem(
        throughput.MODES, "burst", lambda bench, key, pods, nodes, label: fake_figures(bench, key, label)
    )
    throughput.run(bench)
    for round_no in range(3):
        assert {k for k, _ in bench.ran[1 + 3 * round_no : 4 + 3 * round_no]} == {OURS_BIND, KUBE_PINNED, KUBE_MATCHED}


@dataclass
class ProbedBench:
    """What make_runner reads of a Bench, with an apiserver that answers the dry-run probe."""

    api: FakeApi
    logs: Path
    kubeconfig: str = "/k"
    namespace: str = "gpu-bench"


def probe_answer(env: list[dict]) -> tuple[int, bytes]:
    return 201, json.dumps({"spec": {"containers": [{"name": "probe", "env": env}]}}).encode()


class EchoApi(FakeApi):
    """An apiserver whose dry-run create answers with the pod it was sent, as when no admission touches it;
    change(pod) stands for an admission that does."""

    def __init__(self, change=None, status: int = 201) -> None:
        super().__init__()
        self.change, self.status, self.sent = change, status, []

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> tuple[int, bytes]:
        self.requests.append((method, path))
        if path.endswith("?dryRun=All"):
            pod = json.loads(body)
            self.sent.append(json.loads(body))
            for container in pod["spec"]["containers"]:  # the apiserver defaults a fieldRef's apiVersion
                for entry in container.get("env") or ():
                    if "valueFrom" in entry:
                        entry["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
            if self.change:
                self.change(pod)
            return self.status, json.dumps(pod).encode()
        return 201, b"{}"


def test_gpu_scheduler_in_bind_mode_is_ours_under_its_own_name_and_lease(tmp_path: Path):
    api = EchoApi()
    bench = ProbedBench(api, tmp_path)
    runner = measure.make_runner(bench, OURS_BIND)
    assert runner.key == OURS_BIND and runner.label == contenders.LABELS[OURS_BIND]
    assert runner.label == "gpu-scheduler, bind mode (devices in the Binding; no admission call)"
    # Not the bench webhook's schedulerName: the webhook's configurations never match its pods.
    assert runner.scheduler_name == context.OUR_BIND_SCHEDULER != context.OUR_SCHEDULER
    flags = dict(zip(runner.process.argv[2::2], runner.process.argv[3::2], strict=False))
    assert flags["--scheduler-name"] == context.OUR_BIND_SCHEDULER
    assert flags["--leader-elect-resource-name"] == contenders.lease_name(OURS_BIND)
    assert runner.metrics_url
    # What was checked: one of its own pods, in bind mode, under its schedulerName, as a dry run.
    (probe,) = api.sent
    assert probe["spec"]["schedulerName"] == context.OUR_BIND_SCHEDULER
    assert bind_env_entry() in probe["spec"]["containers"][0]["env"]


def inject_devices(pod: dict) -> None:
    pod["spec"]["containers"][0]["env"].append({"name": "CUDA_VISIBLE_DEVICES", "value": "0"})


def annotate(pod: dict) -> None:
    pod["metadata"]["annotations"]["gpu-scheduler/placement"] = "{}"


@pytest.mark.parametrize(
    "api",
    [EchoApi(change=inject_devices), EchoApi(change=annotate), EchoApi(status=403)],
    ids=["a webhook adds env", "an admission annotates", "an admission refuses"],
)
def test_gpu_scheduler_in_bind_mode_refuses_to_run_when_an_admission_touches_its_pods(tmp_path: Path, api):
    with pytest.raises(RuntimeError, match="changes or refuses pods of bench-gpu-scheduler-bind"):
        measure.make_runner(ProbedBench(api, tmp_path), OURS_BIND)


def test_bind_mode_pods_carry_the_fieldref_and_the_device_order_in_every_container_and_nothing_else_differs(
    tmp_path: Path,
):
    from bench.measure import runner_pods
    from bench.workload import bench_pods

    bench = ProbedBench(EchoApi(), tmp_path)
    bench.settings = type("S", (), {"group": 2, "profile": "", "out": tmp_path})()
    bound = runner_pods(bench, measure.make_runner(bench, OURS_BIND), 4, 2)
    plain = bench_pods(4, 2, 2, context.OUR_BIND_SCHEDULER, "gpu-bench")
    for pod, other in zip(bound, plain, strict=True):
        for container in pod["spec"]["containers"]:
            assert container["env"] == [bind_env_entry(), {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"}]
            assert given_value(container) is FROM_BIND  # what the scheduler reads: devices from the bind
        pod["spec"]["containers"][0].pop("env")
        pod["spec"]["schedulerName"] = other["spec"]["schedulerName"]
        assert pod == other
    assert not any(c.get("env") for p in plain for c in p["spec"]["containers"])


def test_kube_scheduler_same_pods_places_the_bind_mode_pods_and_kube_matched_the_plain_ones():
    from bench.measure import pods_for

    ours = pods_for(OURS_BIND, 4, 2, 2, "s", "gpu-bench")
    same = pods_for(contenders.KUBE_SAME_PODS, 4, 2, 2, "s", "gpu-bench")
    matched = pods_for(KUBE_MATCHED, 4, 2, 2, "s", "gpu-bench")
    assert same == ours and matched != ours
    assert not any(c.get("env") for p in matched for c in p["spec"]["containers"])
    assert contenders.RATIOS["bind_over_kube_same_pods"] == (OURS_BIND, (contenders.KUBE_SAME_PODS,))
    assert contenders.CPU_RATIOS["bind_over_kube_same_pods"] == (OURS_BIND, contenders.KUBE_SAME_PODS)


def test_the_bind_runner_has_its_ratios_against_kube_scheduler_and_the_go_binder():
    for name, denominator in (
        ("bind_over_kube_matched", KUBE_MATCHED),
        ("bind_over_kube_pinned", KUBE_PINNED),
        ("bind_over_kube_defaults", KUBE_DEFAULTS),
        ("bind_over_ceiling", contenders.CEILING),
    ):
        assert contenders.RATIOS[name] == (OURS_BIND, (denominator,))
        assert contenders.CPU_RATIOS[name] == (OURS_BIND, denominator)
        assert contenders.RATIO_LABELS[name].startswith(contenders.LABELS[OURS_BIND] + " / ")
    assert OURS_BIND in contenders.GPU_SCHEDULER_RUNNERS


def test_the_removed_admission_modes_runners_are_gone_and_every_runner_has_its_labels():
    # "ours" (the webhook mode) and "ours_policy" (the policy mode) live on in the runs of record only.
    assert set(contenders.LABELS) == set(RUNNERS) == set(contenders.SHORT_LABELS)
    assert not {"ours", "ours_policy"} & set(RUNNERS)
    assert set(contenders.RATIO_LABELS) == set(contenders.RATIOS)
    assert contenders.GPU_SCHEDULER_RUNNERS == (OURS_BIND, contenders.OURS_DYNAMIC)
    with pytest.raises(SystemExit):
        parse_settings(["--runners", "ours_policy"])


@dataclass
class StsBench:
    settings: object
    notes: list = field(default_factory=list)

    def phase(self, text: str) -> None:
        self.notes.append(text)


def test_the_statefulset_phase_runs_gpu_scheduler_in_bind_mode_every_round(monkeypatch):
    from bench import statefulset

    bench = StsBench(type("S", (), {"runners": RUNNERS, "sts_replicas": 10, "runs": 2})())
    ran = []

    def once(bench, key=OURS_BIND):
        ran.append(key)
        return {
            "key": key,
            "pods_per_second": 100.0,
            "created_per_second": 120.0,
            "seen_to_bound_s": {"p50": 0.01, "p99": 0.02},
            "attempt_seconds": 0.004,
        }

    monkeypatch.setattr(statefulset, "measure_once", once)
    figures = statefulset.run(bench)
    assert ran == [OURS_BIND, OURS_BIND]
    assert figures["pods_per_second"] == 100.0 and len(figures["runs"]) == 2 and figures["replicas"] == 10


def test_the_statefulset_phase_runs_bind_mode_with_the_entries_in_its_template():
    from bench.workload import statefulset

    plain = statefulset("ss", 3, 2, "s", "gpu-bench")
    bound = statefulset("ss", 3, 2, "s", "gpu-bench", bind_mode=True)
    (container,) = bound["spec"]["template"]["spec"]["containers"]
    assert given_value(container) is FROM_BIND
    assert "env" not in plain["spec"]["template"]["spec"]["containers"][0]
    container.pop("env")
    assert bound == plain


def test_the_count_line_runners_compare_gpu_scheduler_with_kube_scheduler_matched_on_the_same_pods(tmp_path: Path):
    from bench.measure import runner_pods

    assert contenders.DYNAMIC_RUNNERS == (contenders.OURS_DYNAMIC, contenders.KUBE_GPUS)
    assert {contenders.OURS_DYNAMIC, contenders.KUBE_GPUS} <= set(RUNNERS) & set(scale.RUNNERS)
    # The scale run's warm-up (the runner ending round 1) is not the slowest runner there.
    assert round_order(scale.RUNNERS, 1)[-1] == contenders.KUBE_GPUS
    assert contenders.RATIOS["dynamic_over_kube_gpus"] == (contenders.OURS_DYNAMIC, (contenders.KUBE_GPUS,))
    assert contenders.CPU_RATIOS["dynamic_over_kube_gpus"] == (contenders.OURS_DYNAMIC, contenders.KUBE_GPUS)
    api = EchoApi()
    bench = ProbedBench(api, tmp_path)
    bench.settings = type("S", (), {"group": 2, "profile": "", "out": tmp_path})()
    ours = measure.make_runner(bench, contenders.OURS_DYNAMIC)
    # gpu-scheduler as in bind mode, on a Lease of its own; its probe was one of its count-line pods.
    assert ours.scheduler_name == context.OUR_BIND_SCHEDULER
    flags = dict(zip(ours.process.argv[2::2], ours.process.argv[3::2], strict=False))
    assert flags["--leader-elect-resource-name"] == contenders.lease_name(contenders.OURS_DYNAMIC)
    (probe,) = api.sent
    assert probe["metadata"]["annotations"]["gpu-scheduling-map"] == "*=*:gpus=1\n"
    # kube-scheduler at our client settings with its default profile.
    kube = measure.make_runner(bench, contenders.KUBE_GPUS)
    config = yaml.safe_load((tmp_path / f"{contenders.KUBE_GPUS}-config.yaml").read_text())
    assert config["clientConnection"]["qps"] == contenders.OUR_QPS
    assert config["profiles"] == [{"schedulerName": context.KUBE_SCHEDULER}]
    mine, theirs = runner_pods(bench, ours, 4, 2), runner_pods(bench, kube, 4, 2)
    assert len(mine) == len(theirs) == 4
    for pod in mine:
        assert pod["spec"]["containers"][0]["env"][0] == bind_env_entry()
        assert "affinity" not in pod["spec"]
    for pod in theirs:
        assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
        assert "env" not in pod["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--pods", "1700", "--nodes", "100"], {}),
        (["--scale", "--scale-pods", "10000", "--scale-nodes", "600"], {}),
        (["--quick"], {"BENCH_NODES": "10"}),
    ],
)
def test_a_burst_of_count_line_pods_that_cannot_all_get_a_gpu_is_refused_before_anything_runs(
    monkeypatch, capsys, argv, env
):
    for name in ("BENCH_RUNNERS", "BENCH_PODS", "BENCH_NODES", "BENCH_PHASES", "QUICK", "BENCH_SCALE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit):
        parse_settings(argv)
    assert "do not fit on" in capsys.readouterr().err
    # Without the count-line runners, or without the throughput phase, the size is the user's to choose.
    parse_settings([*argv, "--runners", "ours_bind,kube_matched"])
    if "--scale" not in argv:
        parse_settings([*argv, "--phases", "memory"])


def test_the_default_sizes_leave_every_count_line_pod_a_gpu(monkeypatch):
    for name in ("BENCH_RUNNERS", "BENCH_PODS", "BENCH_NODES", "BENCH_PHASES", "QUICK", "BENCH_SCALE"):
        monkeypatch.delenv(name, raising=False)
    for argv in ([], ["--quick"], ["--scale"]):
        assert contenders.OURS_DYNAMIC in parse_settings(argv).runners


def test_the_scale_run_measures_idle_longer_and_waits_longer_to_settle(monkeypatch):
    for name in ("BENCH_RUNNERS", "BENCH_PODS", "BENCH_NODES", "BENCH_PHASES", "QUICK", "BENCH_SCALE", "BENCH_RUNS"):
        monkeypatch.delenv(name, raising=False)
    bench, scale = parse_settings([]), parse_settings(["--scale"])
    assert (bench.idle_s, bench.settle_timeout_s) == (2.0, 20.0)
    assert scale.idle_s > bench.idle_s and scale.settle_timeout_s > bench.settle_timeout_s

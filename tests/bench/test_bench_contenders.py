"""The contenders run under the same conditions: order balanced over the rounds, one leader election, one scope."""

import json
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from bench import bare_binder, contenders, context, measure, runners, scale, throughput
from bench.contenders import KUBE_DEFAULTS, KUBE_MATCHED, KUBE_PINNED, OURS, OURS_UNADMITTED, RUNNERS, round_order
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
        if order.index(OURS):
            before.add(order[order.index(OURS) - 1])
    assert len(before) == 4


@dataclass
class FakeSettings:
    runs: int = 3
    modes: tuple[str, ...] = ("burst",)
    runners: tuple[str, ...] = (OURS, KUBE_MATCHED, KUBE_PINNED)
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
    firsts = [bench.ran[i][0] for i in range(0, 9, 3)]
    assert firsts == [OURS, KUBE_MATCHED, KUBE_PINNED]  # ours no longer always first


def test_the_scale_phase_rotates_the_runners_too(monkeypatch):
    bench = FakeBench()
    bench.cluster = type("Cluster", (), {"ensure_nodes": lambda self, n: None})()
    monkeypatch.setattr(scale, "measure_burst", lambda bench, key, pods, nodes, label: fake_figures(bench, key, label))
    scale.run(bench)
    assert [bench.ran[i][0] for i in range(0, 9, 3)] == [OURS, KUBE_MATCHED, KUBE_PINNED]


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
    assert flags["--leader-elect-resource-name"] == contenders.lease_name(OURS)


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


def test_gpu_scheduler_without_admission_runs_only_when_named(monkeypatch):
    monkeypatch.delenv("BENCH_RUNNERS", raising=False)
    assert OURS_UNADMITTED not in parse_settings([]).runners
    named = parse_settings(["--runners", "ours,ours_unadmitted,kube_matched"]).runners
    assert set(named) == {OURS, OURS_UNADMITTED, KUBE_MATCHED}


@dataclass
class ProbedBench:
    """What make_runner reads of a Bench, with an apiserver that answers the dry-run probe."""

    api: FakeApi
    logs: Path
    kubeconfig: str = "/k"
    namespace: str = "gpu-bench"


def probe_answer(env: list[dict]) -> tuple[int, bytes]:
    return 201, json.dumps({"spec": {"containers": [{"name": "probe", "env": env}]}}).encode()


def test_gpu_scheduler_without_admission_is_ours_under_a_name_the_webhook_does_not_call(tmp_path: Path):
    probe = ("POST", "/api/v1/namespaces/gpu-bench/pods?dryRun=All")
    bench = ProbedBench(FakeApi({probe: probe_answer([])}), tmp_path)
    runner = measure.make_runner(bench, OURS_UNADMITTED)
    ours = measure.make_runner(bench, OURS)
    assert runner.key == OURS_UNADMITTED
    assert runner.scheduler_name != ours.scheduler_name == context.OUR_SCHEDULER
    flags = dict(zip(runner.process.argv[2::2], runner.process.argv[3::2], strict=False))
    assert flags["--scheduler-name"] == runner.scheduler_name
    lease = flags["--leader-elect-resource-name"]
    assert lease == contenders.lease_name(OURS_UNADMITTED) != contenders.lease_name(OURS)
    # Otherwise the same process as ours: every other flag alike.
    ours_flags = dict(zip(ours.process.argv[2::2], ours.process.argv[3::2], strict=False))
    different = {k for k in flags if flags[k] != ours_flags.get(k)}
    assert different == {"--scheduler-name", "--leader-elect-resource-name", "--metrics-port"}


def test_gpu_scheduler_without_admission_refuses_to_run_when_the_webhook_admits_its_pods(tmp_path: Path):
    probe = ("POST", "/api/v1/namespaces/gpu-bench/pods?dryRun=All")
    admitted = probe_answer([{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])
    bench = ProbedBench(FakeApi({probe: admitted}), tmp_path)
    with pytest.raises(RuntimeError, match="the webhook admits pods of bench-gpu-scheduler-unadmitted"):
        measure.make_runner(bench, OURS_UNADMITTED)

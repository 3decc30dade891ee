"""The contenders run under the same conditions: order rotated per round, one leader election, one scope."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import bare_binder, contenders, runners, scale, throughput
from bench.contenders import KUBE_DEFAULTS, KUBE_MATCHED, KUBE_PINNED, OURS, round_order


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
    assert [round_order(keys, r) for r in (1, 2, 3, 4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


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

"""The first measured run starts from the state every other run starts from.

Every run of record had gpu-scheduler lead round 1 right after the setup, with the control plane
still busy (0.13-0.28 cores where it rests at 0.02-0.07): settle's fixed "under 0.5 cores" let it
start at once, and its idle rate, measured over the next 2 s and subtracted over the whole window,
took 0.6-4.2 ms per pod too many off its control plane's CPU.
"""

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench import contenders, context, measure, scale, settle, throughput
from bench.context import Bench


class Decaying:
    """A control plane busy after the setup, its rate falling back to its rest by 0.05 cores a window."""

    def __init__(self, rates: list[float]) -> None:
        self.rates, self.now = list(rates), 0.0

    def sample(self, pids, window=1.0) -> float:
        self.now += window
        return self.rates.pop(0) if len(self.rates) > 1 else self.rates[0]

    def clock(self) -> float:
        return self.now


AFTER_SETUP = [0.28, 0.25, 0.2, 0.15, 0.1, 0.06, 0.04, 0.05, 0.04]


def bench_with(monkeypatch, rates: list[float], baseline: float | None) -> tuple[Bench, Decaying]:
    control_plane = Decaying(rates)
    monkeypatch.setattr(settle, "cores_used", control_plane.sample)
    monkeypatch.setattr(context, "wait_quiet", lambda pids: settle.wait_quiet(pids))
    monkeypatch.setattr(
        context,
        "wait_baseline",
        lambda pids, base: settle.wait_baseline(pids, base, sample=control_plane.sample, clock=control_plane.clock),
    )
    monkeypatch.setattr(context, "check_alive", lambda processes, directory: None)
    bench = Bench(
        settings=None,
        kubeconfig="/k",
        api=None,
        api_client=None,
        cluster=None,
        webhook=None,
        control_plane_processes={"kube-apiserver": 1, "etcd": 2},
        control_plane_baseline=baseline,
    )
    bench.phase = lambda text: None
    return bench, control_plane


def test_once_the_baseline_is_known_a_run_waits_for_the_control_plane_to_come_back_to_it(monkeypatch):
    bench, _ = bench_with(monkeypatch, AFTER_SETUP, baseline=0.04)
    found = bench.settle()
    # 0.28 cores passed the old "under 0.5 cores" at once; now the run starts within the margin of rest.
    assert found["control_plane_cores_at_start"] <= 0.04 + settle.BASELINE_MARGIN_CORES
    assert found["at_baseline_at_start"] is True
    assert found["settle_waited_s"] >= 5 * settle.BASELINE_WINDOW_SECONDS


def test_a_control_plane_that_never_comes_back_starts_the_run_at_the_timeout_and_says_so():
    busy = Decaying([0.3])
    waited, cores, at_rest = settle.wait_baseline([1], 0.04, sample=busy.sample, clock=busy.clock)
    assert waited >= settle.TIMEOUT_SECONDS and cores == 0.3 and at_rest is False


def test_the_baseline_is_the_lowest_window_so_a_transient_in_one_is_left_out():
    windows = iter([0.06, 0.21, 0.04, 0.05, 0.07])
    assert settle.baseline_cores([1], sample=lambda pids, window: next(windows)) == 0.04


def test_the_baseline_is_learnt_once_and_every_later_settle_waits_for_it(monkeypatch):
    bench, _ = bench_with(monkeypatch, [0.05, 0.04, 0.06, 0.05, 0.05, 0.3, 0.2, 0.1, 0.05], baseline=None)
    assert bench.learn_baseline() == 0.04
    assert bench.settle()["control_plane_cores_at_start"] <= 0.04 + settle.BASELINE_MARGIN_CORES


@dataclass
class FakeSettings:
    runs: int = 2
    modes: tuple[str, ...] = ("burst",)
    runners: tuple[str, ...] = (contenders.OURS_BIND, contenders.KUBE_MATCHED, contenders.CEILING)
    pods: int = 10
    nodes: int = 2
    group: int = 10
    scale_pods: int = 10
    scale_nodes: int = 2


@dataclass
class FakeBench:
    settings: FakeSettings = field(default_factory=FakeSettings)
    ran: list[str] = field(default_factory=list)
    baseline: float | None = None

    def phase(self, text: str) -> None:
        pass

    def learn_baseline(self) -> float:
        self.ran.append("learn baseline")
        self.baseline = 0.04
        return self.baseline


def figures(bench: FakeBench, key: str, label: str) -> dict:
    bench.ran.append(label)
    return {
        "key": key,
        "label": key,
        "mode": "burst",
        "pods": 10,
        "created": 10,
        "bound": 10,
        "complete": True,
        # The warm-up's idle rate is the setup's: it must reach no figure.
        "pods_per_second": 1.0 if "warm-up" in label else 10.0,
        "latency_s": {"p50": 0.1, "p99": 0.2},
        "cpu_s": {"runner": 0.1, "webhook": 0.0, "control_plane": 0.1},
        "idle_cores": {"control_plane": 0.28 if "warm-up" in label else 0.04},
        "peak_rss_mib": 50.0,
    }


def test_a_warm_up_run_that_counts_nowhere_comes_before_round_1_and_the_baseline_after_it(monkeypatch):
    bench = FakeBench()
    monkeypatch.setitem(throughput.MODES, "burst", lambda bench, key, pods, nodes, label: figures(bench, key, label))
    result = throughput.run(bench)
    order = contenders.round_order(list(bench.settings.runners), 1)
    # By the runner that ends round 1, so that round 1's first runner follows another one, as every run does.
    assert bench.ran[:2] == [f"{order[-1]} warm-up", "learn baseline"]
    assert bench.ran[2] == f"{order[0]} burst"
    assert len(result["burst"]["runs"]) == 2 * 3
    assert all(r["pods_per_second"] == 10.0 for r in result["burst"]["runs"])
    assert all(s["pods_per_second"] == 10.0 for s in result["burst"]["summary"].values())
    assert result["warmup"]["key"] == order[-1] and result["warmup"]["control_plane_baseline"] == 0.04


def test_the_scale_phase_warms_up_too(monkeypatch):
    bench = FakeBench(FakeSettings(runners=(contenders.OURS_BIND, contenders.KUBE_PINNED, contenders.KUBE_MATCHED)))
    bench.cluster = type("Cluster", (), {"ensure_nodes": lambda self, n: None})()
    monkeypatch.setattr(scale, "measure_burst", lambda bench, key, pods, nodes, label: figures(bench, key, label))
    result = scale.run(bench)
    assert bench.ran[1] == "learn baseline" and bench.ran[0].endswith("warm-up")
    assert len(result["runs"]) == 2 * 3 and "warmup" in result


def test_a_failed_warm_up_still_learns_the_baseline_and_lets_the_rounds_run(tmp_path: Path):
    deleted = []
    bench = FakeBench()
    bench.cluster = type("Cluster", (), {"delete_pods": lambda self: deleted.append(True)})()

    def broken(bench, key, pods, nodes, label):
        raise TimeoutError("no pod bound")

    kept = measure.warm_up(bench, contenders.OURS_BIND, broken, 10, 2)
    assert "no pod bound" in kept["error"] and kept["control_plane_baseline"] == 0.04 and deleted


@pytest.mark.parametrize("rates", [[0.3, 0.3, 0.3]])
def test_without_a_baseline_the_old_quiet_rule_still_applies(monkeypatch, rates):
    bench, _ = bench_with(monkeypatch, rates, baseline=None)
    assert bench.settle()["control_plane_cores_at_start"] == 0.3  # under settle.QUIET_CORES: no wait


def test_a_run_that_started_above_the_baseline_is_counted_in_the_report():
    from bench.report import burst_table
    from bench.summary import summarize_throughput

    runs = [
        {**figures(FakeBench(), contenders.OURS_BIND, "ours_bind burst"), "round": r, "at_baseline_at_start": r != 2}
        for r in (1, 2, 3)
    ]
    summary = summarize_throughput(runs)["summary"]
    assert summary[contenders.OURS_BIND]["above_baseline_at_start"] == 1
    assert "(1 run started above the control plane's baseline)" in "\n".join(burst_table(summary))

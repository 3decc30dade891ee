"""CPU per pod as work: from before the first pod until the processes settle, minus their idle rate."""

import math
import subprocess
import sys

import pytest

from bench.cpuwork import WorkMeter


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def busy(start: float, end: float, cores: float):
    """CPU seconds used by `cores` busy from start to end, as a function of the time."""
    return lambda t: cores * min(max(t - start, 0.0), end - start)


def idle(cores: float):
    return lambda t: cores * t


class FakeMeter:
    """CpuMeter's interface over CPU-time functions of the fake clock: CPU used since it was made."""

    def __init__(self, clock: FakeClock, loads: dict, groups: dict[str, list[int]]) -> None:
        self._clock, self._loads = clock, {g: loads[g] for g in groups}
        self._start = {g: self._cpu(g) for g in self._loads}

    def _cpu(self, group: str) -> float:
        return sum(load(self._clock()) for load in self._loads[group])

    def used(self) -> dict[str, float]:
        return {g: self._cpu(g) - self._start[g] for g in self._loads}

    def gone(self) -> dict:
        return {}


def meter(clock: FakeClock, loads: dict, **kwargs) -> WorkMeter:
    return WorkMeter(new_meter=lambda groups: FakeMeter(clock, loads, groups), clock=clock, sleep=clock.sleep, **kwargs)


GROUPS = {"runner": [1], "control_plane": [2]}


def test_the_idle_rate_is_subtracted_and_the_work_after_the_last_bind_counted():
    clock = FakeClock()
    loads = {
        # The scheduler idles at 0.05 cores and works 2 CPU s during the burst (t = 10-12).
        "runner": [idle(0.05), busy(10, 12, 1.0)],
        # The control plane idles at 0.3 cores; the burst costs it 4 CPU s, half of them after the
        # last bind (t = 12): kwok marking the pods Running.
        "control_plane": [idle(0.3), busy(10, 14, 1.0)],
    }
    work = meter(clock, loads, idle_seconds=2.0, window=1.0, margin=0.1, timeout=20.0)
    clock.now = 5.0
    work.measure_idle(GROUPS)
    assert work.idle_cores == pytest.approx({"runner": 0.05, "control_plane": 0.3})
    clock.now = 10.0
    work.start(GROUPS)
    clock.now = 12.0  # the last pod is bound
    figures = work.finish()
    assert figures["settled"] is True
    assert figures["settle_s"] == pytest.approx(3.0)  # quiet in the window 14-15
    assert figures["cpu_window_s"] == pytest.approx(5.0)
    assert figures["cpu_s"] == pytest.approx({"runner": 2.0, "control_plane": 4.0})
    assert figures["cpu_raw_s"] == pytest.approx({"runner": 2.25, "control_plane": 5.5})
    assert figures["idle_cores"] == pytest.approx({"runner": 0.05, "control_plane": 0.3})
    # The rate in each settle window: the control plane's last 2 CPU s after the bind, then quiet.
    assert figures["settle_trace_cores"] == pytest.approx([1.35, 1.35, 0.35])
    assert figures["settle_timeout_s"] == 20.0 and figures["idle_s"] == 2.0


def test_a_group_not_running_before_the_window_has_no_idle_rate_to_subtract():
    clock = FakeClock()
    loads = {"runner": [busy(10, 11, 1.0)], "control_plane": [idle(0.2)]}
    work = meter(clock, loads, idle_seconds=2.0, window=1.0, margin=0.1, timeout=20.0)
    work.measure_idle({"control_plane": [2]})  # drain mode: the runner is launched after this
    clock.now = 10.0
    work.start(GROUPS)
    figures = work.finish()
    assert figures["idle_cores"] == pytest.approx({"runner": 0.0, "control_plane": 0.2})
    assert figures["cpu_s"] == pytest.approx({"runner": 1.0, "control_plane": 0.0})


def test_a_cluster_that_never_settles_ends_the_window_at_the_timeout_and_says_so():
    clock = FakeClock()
    loads = {"runner": [idle(0.0)], "control_plane": [idle(0.1), busy(10, 100, 1.0)]}
    work = meter(clock, loads, idle_seconds=2.0, window=1.0, margin=0.1, timeout=5.0)
    work.measure_idle(GROUPS)
    clock.now = 10.0
    work.start(GROUPS)
    figures = work.finish()
    assert figures["settled"] is False and figures["settle_s"] == pytest.approx(5.0)
    assert figures["cpu_s"]["control_plane"] == pytest.approx(5.0)


def test_a_process_gone_during_the_window_gives_no_figure():
    clock = FakeClock()
    loads = {"runner": [idle(0.0)], "control_plane": [idle(0.1)]}
    work = meter(clock, loads)
    work.measure_idle(GROUPS)
    work.start(GROUPS)
    work._meter.used = lambda: {"runner": math.nan, "control_plane": 1.0}
    figures = work.finish()
    assert math.isnan(figures["cpu_s"]["runner"]) and figures["settled"] is False


BURNER = """
import sys, time
print("ready", flush=True)
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < 0.4:
    pass
print(time.process_time() - start, flush=True)
sys.stdin.readline()
"""


def test_the_meter_reads_a_child_process_burning_a_known_cpu_time():
    child = subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        groups = {"burner": [child.pid]}
        work = WorkMeter(idle_seconds=0.5, window=0.3, margin=0.05, timeout=10.0)
        work.measure_idle(groups)
        work.start(groups)
        child.stdin.write("go\n")
        burned = float(child.stdout.readline())  # the child's own count of its CPU time
        figures = work.finish()
    finally:
        child.stdin.write("done\n")
        child.stdin.close()
        child.wait(10)
    assert figures["settled"] is True
    assert figures["idle_cores"]["burner"] < 0.05  # it was waiting on its stdin
    assert figures["cpu_s"]["burner"] == pytest.approx(burned, abs=0.05)

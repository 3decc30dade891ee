"""Bindings and the leader lease: no binding of ours may be stored once another replica may
lead (issue 16, point 4): the bind timeout fits between the renew deadline and the lease
duration, and SIGTERM waits for the binds in flight before it hands the lease back."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from gpu_scheduler.kube.binder import BIND_TIMEOUT_SECONDS
from gpu_scheduler.scheduler import command, process

CHART = Path(__file__).resolve().parents[3] / "charts" / "gpu-scheduler"


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(flags))


def test_with_the_default_timing_a_binding_is_over_before_a_standby_may_lead():
    # Before: the bind timeout was 30 s, so a binding sent just before the renew deadline (10 s)
    # could be stored 25 s after a standby took the lease (15 s).
    from gpu_scheduler.kube.leader import lease_seconds

    args = parse()
    timeout = command.bind_timeout(args)
    assert args.leader_elect_renew_deadline + timeout <= lease_seconds(args.leader_elect_lease_duration)
    assert timeout == 5.0


@pytest.mark.parametrize(
    ("lease", "renew", "expected"),
    [("15", "10", 5.0), ("4", "3", 1.0), ("60", "20", BIND_TIMEOUT_SECONDS), ("4.4", "3", 1.0)],
)
def test_the_bind_timeout_is_what_the_lease_leaves_beyond_the_renew_deadline(lease, renew, expected):
    args = parse(f"--leader-elect-lease-duration={lease}", f"--leader-elect-renew-deadline={renew}")
    assert command.bind_timeout(args) == expected


def test_without_leader_election_the_binders_own_limit_applies():
    assert command.bind_timeout(parse("--leader-elect=false")) == BIND_TIMEOUT_SECONDS


def test_lease_timing_that_leaves_a_binding_no_time_is_refused_naming_both_flags():
    # Before: accepted, and the bind timeout (30 s) outlived the lease.
    args = parse("--leader-elect-lease-duration=15", "--leader-elect-renew-deadline=14.5")
    problem = command._check_lease_timing(args)
    assert problem is not None
    assert "--leader-elect-lease-duration (15)" in problem
    assert "--leader-elect-renew-deadline (14.5)" in problem


def test_the_default_and_the_fast_test_timing_are_accepted():
    assert command._check_lease_timing(parse()) is None
    fast = parse(
        "--leader-elect-lease-duration=4", "--leader-elect-renew-deadline=3", "--leader-elect-retry-period=0.5"
    )
    assert command._check_lease_timing(fast) is None


class FakeScheduler:
    def __init__(self, calls: list[tuple], drained: bool) -> None:
        self.calls = calls
        self.drained = drained

    def set_leading(self, leading: bool) -> None:
        self.calls.append(("set_leading", leading))

    def stop(self, timeout: float) -> bool:
        self.calls.append(("scheduler.stop", timeout))
        return self.drained


class FakeElector:
    def __init__(self, calls: list[tuple]) -> None:
        self.calls = calls

    def stop(self) -> None:
        self.calls.append(("elector.stop",))

    def release(self) -> None:
        self.calls.append(("elector.release",))


def test_sigterm_waits_out_the_bind_timeout_before_it_hands_the_lease_back():
    calls: list[tuple] = []
    assert process.stop_binding(FakeScheduler(calls, drained=True), FakeElector(calls), bind_timeout=5.0) is True
    assert calls == [
        ("set_leading", False),
        ("scheduler.stop", 5.0 + process.DRAIN_MARGIN_SECONDS),
        ("elector.release",),
    ]


def test_a_drain_that_runs_out_leaves_the_lease_to_expire_instead_of_handing_it_back():
    calls: list[tuple] = []
    assert process.stop_binding(FakeScheduler(calls, drained=False), FakeElector(calls), bind_timeout=5.0) is False
    assert calls[-1] == ("elector.stop",)
    assert ("elector.release",) not in calls


def test_the_chart_gives_the_scheduler_time_to_drain_and_hand_the_lease_back():
    template = (CHART / "templates" / "scheduler-deployment.yaml").read_text()
    grace = re.search(r"^\s+terminationGracePeriodSeconds: (\d+)$", template, re.MULTILINE)
    assert grace is not None, "the scheduler's pod leaves its grace period to the default"
    from gpu_scheduler.kube.leader import MAX_REQUEST_SECONDS  # the longest the lease's release takes

    longest_shutdown = (
        process.drain_seconds(BIND_TIMEOUT_SECONDS) + MAX_REQUEST_SECONDS + 2 * process.EVENT_FLUSH_SECONDS
    )
    assert int(grace.group(1)) >= longest_shutdown + 5  # room for the process to start and end

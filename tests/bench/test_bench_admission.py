"""The admission load: the generator's timeout is the apiserver's, the top rate is held a minute."""

import urllib.error
from pathlib import Path

import pytest
import yaml

from bench import admission
from bench.chart import VALUES, webhook_timeout_seconds
from bench.run import parse_settings

BENCH_ENV = ("QUICK", "BENCH_ADMISSION_HOLD_SECONDS", "BENCH_ADMISSION_SECONDS", "BENCH_ADMISSION_RATES")


@pytest.fixture
def clean_env(monkeypatch):
    for name in BENCH_ENV:
        monkeypatch.delenv(name, raising=False)


def test_the_webhook_timeout_is_the_charts(tmp_path: Path):
    assert webhook_timeout_seconds() == yaml.safe_load(VALUES.read_text())["webhook"]["timeoutSeconds"]
    values = tmp_path / "values.yaml"
    values.write_text("webhook:\n  timeoutSeconds: 7\n")
    assert webhook_timeout_seconds(values) == 7


def test_the_load_generator_gives_up_when_the_apiserver_would():
    argv = admission.attack_argv(Path("t.json"), 1000, 60.0, Path("ca.crt"), 5, Path("r.bin"))
    assert "-timeout=5s" in argv
    assert "-rate=1000/1s" in argv and "-duration=60s" in argv
    assert "-lazy" not in argv
    assert "-lazy" in admission.attack_argv(Path("t.json"), 1000, 60.0, Path("ca.crt"), 5, Path("r.bin"), lazy=True)


def test_the_top_rate_is_held_for_a_minute_outside_quick_mode(clean_env):
    settings = parse_settings([])
    assert settings.admission_hold_seconds == 60
    assert [admission.seconds_at(settings, rate) for rate in settings.admission_rates] == [15, 15, 60]
    quick = parse_settings(["--quick"])
    assert [admission.seconds_at(quick, rate) for rate in quick.admission_rates] == [3, 3, 3]


def test_a_shorter_hold_than_a_minute_is_refused_outside_quick_mode(clean_env, capsys):
    with pytest.raises(SystemExit):
        parse_settings(["--admission-hold-seconds", "15"])
    assert "at least 60" in capsys.readouterr().err


def test_distinct_maps_are_never_sent_twice_even_over_a_held_minute():
    groups = admission.distinct_groups((100, 1000), (15.0, 60.0))
    assert [len(g) for g in groups] == [100 * 15 + 100, 1000 * 60 + 1000]
    assert groups[0].start == 1 and groups[1].start == groups[0].stop  # group 0 is the repeated map


class Phases:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def phase(self, text: str) -> None:
        self.lines.append(text)


def test_the_next_run_waits_for_a_webhook_working_through_a_saturated_runs_backlog(monkeypatch):
    # What the 2026-11-27 07:47 run met: the check after a saturated 1,000/s timed out in its handshake.
    failures = [urllib.error.URLError(TimeoutError("_ssl.c:989: The handshake operation timed out"))] * 2
    tries: list[float] = []

    def check(_bench, _body, timeout):
        tries.append(timeout)
        if failures:
            raise failures.pop()

    monkeypatch.setattr(admission, "check_answer", check)
    monkeypatch.setattr(admission.time, "sleep", lambda _s: None)
    bench = Phases()
    admission.answering(bench, b"{}")
    assert len(tries) == 3
    assert len(bench.lines) == 2 and "handshake operation timed out" in bench.lines[0]


def test_a_webhook_that_never_answers_again_ends_the_phase_with_why(monkeypatch):
    def check(_bench, _body, timeout):
        raise ConnectionRefusedError("connection refused")

    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(admission, "check_answer", check)
    monkeypatch.setattr(admission.time, "sleep", lambda _s: None)
    monkeypatch.setattr(admission.time, "monotonic", lambda: next(clock))
    with pytest.raises(RuntimeError, match="did not answer within 30 s of the last run: connection refused"):
        admission.answering(Phases(), b"{}", within=30)


def test_an_answer_that_is_wrong_is_not_waited_for(monkeypatch):
    def check(_bench, _body, timeout):
        raise RuntimeError("the webhook did not allow and patch the benchmark's pod")

    monkeypatch.setattr(admission, "check_answer", check)
    with pytest.raises(RuntimeError, match="did not allow and patch"):
        admission.answering(Phases(), b"{}")


class Webhook:
    class process:  # noqa: N801 - a stand-in for bench.webhook.process
        pid = 4242


class Bench(Phases):
    webhook = Webhook

    def __init__(self) -> None:
        super().__init__()
        self.settled = 0

    def settle(self) -> dict:
        self.settled += 1
        return {}


def test_a_run_waits_for_the_webhook_to_go_idle_then_for_the_control_plane(monkeypatch):
    asked = []
    monkeypatch.setattr(admission, "answering", lambda _bench, _body: None)
    monkeypatch.setattr(admission, "descendants", lambda pid: [pid + 1, pid + 2])

    def quiet(pids, timeout, quiet_cores):
        asked.append((pids, quiet_cores))
        return 7.0, 0.01

    monkeypatch.setattr(admission, "wait_quiet", quiet)
    bench = Bench()
    admission.ready_for_a_run(bench, b"{}")
    assert asked == [([4242, 4243, 4244], admission.WEBHOOK_QUIET_CORES)]
    assert bench.lines == ["  waited 7s for the webhook to work off the last run's backlog"]
    assert bench.settled == 1


def test_a_webhook_that_stays_busy_ends_the_phase_rather_than_charge_the_next_run(monkeypatch):
    monkeypatch.setattr(admission, "answering", lambda _bench, _body: None)
    monkeypatch.setattr(admission, "descendants", lambda pid: [])
    monkeypatch.setattr(admission, "wait_quiet", lambda pids, timeout, quiet_cores: (120.0, 0.9))
    with pytest.raises(RuntimeError, match="still used 0.90 cores 120 s after the last run"):
        admission.ready_for_a_run(Bench(), b"{}")


def test_a_phase_that_stops_keeps_the_runs_it_made_and_says_why_of_the_rest(monkeypatch, tmp_path: Path):
    # The 2026-11-29 13:53 run: all six runs measured, then the wait before the stack's floor
    # failed, and the phase's figures were all dropped with the error.
    from bench import summary, targets

    settings = parse_settings(["--quick", "--out", str(tmp_path), "--admission-rates", "100,500"])
    bench = Bench()
    bench.settings = settings
    bench.webhook = type("W", (), {"url": "https://127.0.0.1:1", "workers": 2, "process": Webhook.process})
    made = []

    def one_run(_bench, key, rate, seconds, _groups, _repeated, _targets, _out):
        if (key, rate) == ("distinct", 100):
            raise RuntimeError("the webhook still used 1.95 cores 120 s after the last run")
        made.append((key, rate))
        return {
            **admission.not_run_row(rate, seconds, "unused"),
            "not_run": None,
            "requests": rate * 3,
            "throughput": float(rate),
            "p50_ms": 1.0,
            "p99_ms": 2.0,
            "errors": 0,
        }

    monkeypatch.setattr(admission, "answering", lambda _bench, _body: None)
    monkeypatch.setattr(admission, "attack", lambda *args, **kwargs: {})
    monkeypatch.setattr(admission, "_one_run", one_run)
    floor = []
    monkeypatch.setattr(admission, "measure_stack_floor", lambda *args: floor.append(1) or [])
    result = admission.run(bench)

    assert made == [("repeated", 100), ("repeated", 500)]
    assert not floor  # nothing more is measured once a step failed
    assert result["stopped"].startswith("a new map per request (parse cache misses) at 100/s: RuntimeError")
    by_key = {w["key"]: w["rates"] for w in result["workloads"]}
    assert [r["p99_ms"] for r in by_key["repeated"]] == [2.0, 2.0]
    assert [r["not_run"] for r in by_key["repeated"]] == [None, None]
    assert all("1.95 cores" in r["not_run"] for r in by_key["distinct"])

    metrics = summary.headline_metrics({"admission": result})
    checked = {t["metric"]: t for t in targets.evaluate(targets.load(), metrics)}
    assert checked["admission.repeated.500.p99_ms"]["status"] == targets.PASS
    missed = checked["admission.distinct.500.p99_ms"]
    assert missed["status"] == targets.MISS and missed["reason"].startswith("not run: the phase stopped")

"""Reading py-spy's collapsed stacks: which functions hold the samples."""

import pytest

from bench import profile
from bench.profile import top_functions
from bench.run import parse_settings

COLLAPSED = "\n".join(
    [
        "thread (0x7f01);_bootstrap (threading.py:1002);_work_loop (gpu_scheduler/scheduler/runner.py:181);"
        "bind (gpu_scheduler/kube/binder.py:60);read (ssl.py:1169) 60",
        "thread (0x7f01);_bootstrap (threading.py:1002);_work_loop (gpu_scheduler/scheduler/runner.py:181);"
        "decide (gpu_scheduler/scheduling/decide.py:70);parse_map (gpu_scheduler/placement/grammar.py:90) 30",
        "thread (0x7f02);_bootstrap (threading.py:1002);emit (logging/__init__.py:1100);"
        "acquire (logging/__init__.py:915) 10",
        "not a sample line",
    ]
)


def test_self_time_is_counted_on_the_leaf_frame():
    top = top_functions(COLLAPSED)
    assert top["samples"] == 100
    assert [(f["function"], f["share"]) for f in top["self"]] == [
        ("read (ssl.py)", 0.6),
        ("parse_map (placement/grammar.py)", 0.3),
        ("acquire (logging/__init__.py)", 0.1),
    ]


def test_inclusive_time_counts_each_function_once_per_stack_and_skips_thread_plumbing():
    inclusive = {f["function"]: f["share"] for f in top_functions(COLLAPSED)["inclusive"]}
    assert inclusive["_work_loop (scheduler/runner.py)"] == pytest.approx(0.9)
    assert inclusive["decide (scheduling/decide.py)"] == pytest.approx(0.3)
    assert not any("threading.py" in name or name.startswith("thread") for name in inclusive)


def test_lines_of_one_function_are_merged():
    collapsed = "a (m.py:1);b (m.py:5) 2\na (m.py:1);b (m.py:9) 3"
    assert top_functions(collapsed)["self"] == [{"function": "b (m.py)", "share": 1.0}]


def test_no_samples_gives_empty_lists():
    assert top_functions("") == {"samples": 0, "self": [], "inclusive": []}


@pytest.mark.parametrize(
    ("argv", "env", "wanted"),
    [
        ([], None, ""),
        ([], "0", ""),
        (["--profile"], None, "all"),
        ([], "1", "all"),
        (["--profile", "gil"], None, "gil"),
        ([], "gil", "gil"),
        # The command line wins over the environment, in both directions.
        (["--profile", "gil"], "1", "gil"),
        (["--profile", "all"], "gil", "all"),
    ],
)
def test_the_profile_view_is_read_once_from_the_flag_or_the_environment(monkeypatch, argv, env, wanted):
    monkeypatch.delenv("BENCH_PROFILE", raising=False)
    if env is not None:
        monkeypatch.setenv("BENCH_PROFILE", env)
    monkeypatch.setattr(profile, "available", lambda: True)
    assert parse_settings(argv).profile == wanted


def test_an_unknown_profile_view_is_refused_with_what_is_accepted(monkeypatch, capsys):
    monkeypatch.setenv("BENCH_PROFILE", "wall")
    with pytest.raises(SystemExit):
        parse_settings([])
    err = capsys.readouterr().err
    assert "--profile/BENCH_PROFILE" in err and "'wall'" in err and "gil" in err


def test_the_profiler_asks_py_spy_for_the_gil_view_only_when_told(monkeypatch, tmp_path):
    started: list[list[str]] = []

    class Recorder:
        def __init__(self, argv, **_kwargs):
            started.append(argv)

    monkeypatch.setattr(profile.subprocess, "Popen", Recorder)
    profile.Profiler(1, tmp_path / "all.txt", profile.ALL_THREADS)
    profile.Profiler(1, tmp_path / "gil.txt", profile.GIL)
    assert ["--gil" in argv for argv in started] == [False, True]

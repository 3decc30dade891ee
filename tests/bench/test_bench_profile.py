"""Reading py-spy's collapsed stacks: which functions hold the samples."""

import pytest

from bench.profile import top_functions

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

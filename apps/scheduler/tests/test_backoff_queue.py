"""The scheduling queue: order, backoff, wake-ups by node events and pod changes."""

import pytest
from gpu_scheduler.scheduler.queue import (
    ACTIVE,
    BACKOFF,
    IN_FLIGHT,
    MAX_BACKOFF_SECONDS,
    UNSCHEDULABLE,
    SchedulingQueue,
    backoff_delay,
)

MAP = "0=node1:0\n1=node2:1\n"


def pod(name, uid="u1", map_text=MAP, rv="1"):
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "uid": uid,
            "resourceVersion": rv,
            "annotations": {"gpu-scheduling-map": map_text},
        }
    }


def test_backoff_doubles_from_one_second_and_caps_at_sixty():
    delays = [backoff_delay(n, jitter=0.5) for n in range(1, 10)]
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_backoff_jitter_stays_within_ten_percent_and_under_the_cap():
    assert backoff_delay(3, jitter=0.0) == pytest.approx(3.6)
    assert backoff_delay(3, jitter=0.999) == pytest.approx(4.4, abs=0.01)
    assert backoff_delay(20, jitter=0.999) == MAX_BACKOFF_SECONDS


def test_pods_come_out_in_arrival_order_and_in_flight():
    queue = SchedulingQueue()
    for name in ("a-0", "b-1", "c-2"):
        queue.upsert(f"ml/{name}", pod(name))
    assert [queue.pop(0)[0] for _ in range(3)] == ["ml/a-0", "ml/b-1", "ml/c-2"]
    assert queue.pop(0) is None
    assert queue.counts()[IN_FLIGHT] == 3


def test_an_unchanged_update_does_not_queue_the_pod_twice():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0"))
    assert queue.upsert("ml/a-0", pod("a-0", rv="2")) is False
    assert queue.pop(0)[0] == "ml/a-0"
    assert queue.pop(0) is None


def test_a_failed_pod_waits_out_its_backoff_then_comes_back():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0"))
    queue.pop(100.0)
    delay = queue.retry_later("ml/a-0", 100.0, jitter=0.5)
    assert delay == 1.0
    assert queue.state_of("ml/a-0") == BACKOFF
    assert queue.next_due() == 101.0
    assert queue.pop(100.9) is None
    assert queue.pop(101.0)[0] == "ml/a-0"
    assert queue.retry_later("ml/a-0", 101.0, jitter=0.5) == 2.0


def test_a_node_event_retries_waiting_pods_at_once():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0"))
    queue.upsert("ml/b-1", pod("b-1"))
    queue.pop(0)
    queue.pop(0)
    queue.retry_later("ml/a-0", 0, 0.5, waiting_on=("gpu-a", "node1"))
    queue.retry_later("ml/b-1", 0, 0.5, waiting_on=("node2",))
    assert queue.wake(["node1"]) == 1
    assert queue.pop(0.1)[0] == "ml/a-0"
    assert queue.pop(0.1) is None  # b-1 still waits for its time or node2
    assert queue.wake(["gpu-a"]) == 0  # a-0 is no longer waiting


def test_a_woken_pod_is_not_retried_again_by_its_stale_timer():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0"))
    queue.pop(0)
    queue.retry_later("ml/a-0", 0, 0.5, waiting_on=("node1",))
    queue.wake(["node1"])
    queue.pop(0.1)
    assert queue.next_due() is None
    assert queue.pop(5.0) is None


def test_an_unschedulable_pod_waits_for_a_change_to_its_map_not_for_time():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0", map_text="broken"))
    queue.pop(0)
    queue.give_up_until_changed("ml/a-0")
    assert queue.state_of("ml/a-0") == UNSCHEDULABLE
    assert queue.next_due() is None
    assert queue.pop(1e9) is None
    assert queue.wake(["node1"]) == 0
    assert queue.upsert("ml/a-0", pod("a-0", map_text=MAP, rv="2")) is True
    assert queue.pop(1e9)[0] == "ml/a-0"


def test_a_map_change_cuts_a_backoff_short_and_resets_the_attempts():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0"))
    for now in (0, 2, 5):
        queue.pop(now)
        queue.retry_later("ml/a-0", now, 0.5)
    assert queue.attempts_of("ml/a-0") == 3
    queue.upsert("ml/a-0", pod("a-0", map_text="0=node9:0\n", rv="9"))
    assert queue.state_of("ml/a-0") == ACTIVE
    assert queue.attempts_of("ml/a-0") == 0
    key, current = queue.pop(5.1)
    assert current["metadata"]["annotations"]["gpu-scheduling-map"] == "0=node9:0\n"


def test_a_change_during_an_attempt_sends_the_pod_straight_back():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0"))
    queue.pop(0)
    assert queue.upsert("ml/a-0", pod("a-0", map_text="0=node3:0\n", rv="2")) is False
    queue.give_up_until_changed("ml/a-0")  # the attempt judged the old map
    assert queue.state_of("ml/a-0") == ACTIVE
    assert queue.pop(0)[1]["metadata"]["annotations"]["gpu-scheduling-map"] == "0=node3:0\n"


def test_deleted_pods_leave_every_state():
    queue = SchedulingQueue()
    for name in ("a-0", "b-1", "c-2"):
        queue.upsert(f"ml/{name}", pod(name))
    queue.pop(0)
    queue.pop(0)
    queue.retry_later("ml/b-1", 0, 0.5, waiting_on=("node2",))
    for name in ("a-0", "b-1", "c-2"):
        queue.delete(f"ml/{name}")
    assert len(queue) == 0
    assert queue.pop(1e9) is None
    assert queue.next_due() is None
    assert queue.wake(["node2"]) == 0
    assert queue.retry_later("ml/a-0", 0, 0.5) is None  # the attempt's end is a no-op


def test_the_outcome_of_an_attempt_never_lands_on_a_newer_pod_of_the_same_name():
    # Keys are UIDs: the pod recreated under the same name while the old one was in flight
    # is another entry, and the old attempt's outcome finds nothing to change.
    queue = SchedulingQueue()
    queue.upsert("old", pod("a-0", uid="old"))
    assert queue.pop(0)[0] == "old"
    queue.delete("old")
    queue.upsert("new", pod("a-0", uid="new"))
    assert queue.retry_later("old", 0, 0.5) is None
    queue.give_up_until_changed("old")
    queue.done("old")
    assert queue.state_of("new") == ACTIVE
    assert queue.pop(0)[1]["metadata"]["uid"] == "new"
    queue.done("new")
    assert len(queue) == 0


def test_a_relist_drops_pods_that_vanished_and_adds_new_ones():
    queue = SchedulingQueue()
    queue.upsert("ml/a-0", pod("a-0"))
    queue.upsert("ml/b-1", pod("b-1"))
    queue.pop(0)
    queue.retry_later("ml/a-0", 0, 0.5)
    dropped = queue.replace({"ml/b-1": pod("b-1"), "ml/c-2": pod("c-2")})
    assert [p["metadata"]["name"] for p in dropped] == ["a-0"]
    assert "ml/a-0" not in queue
    assert sorted(k for k in ("ml/a-0", "ml/b-1", "ml/c-2") if k in queue) == ["ml/b-1", "ml/c-2"]
    assert [queue.pop(0)[0] for _ in range(2)] == ["ml/b-1", "ml/c-2"]
    assert queue.pop(100) is None


def test_counts_report_each_state():
    queue = SchedulingQueue()
    for name in ("a-0", "b-1", "c-2", "d-3"):
        queue.upsert(f"ml/{name}", pod(name))
    queue.pop(0)
    queue.pop(0)
    queue.pop(0)
    queue.retry_later("ml/a-0", 0, 0.5)
    queue.give_up_until_changed("ml/b-1")
    assert queue.counts() == {ACTIVE: 1, IN_FLIGHT: 1, BACKOFF: 1, UNSCHEDULABLE: 1}


def test_a_standby_that_never_pops_holds_nothing_for_pods_that_came_and_went():
    # Bug: a standby replica (never leader, never pops) kept every key it ever saw in its
    # active order: 200,000 pods created and deleted cost ~13 MiB that were never freed.
    import gc
    import tracemalloc

    queue = SchedulingQueue()
    template = pod("x-0")

    def churn(first: int, count: int) -> None:
        for i in range(first, first + count):
            key = f"uid-{i:08d}"
            queue.upsert(key, template)
            queue.delete(key)

    churn(0, 1_000)  # warm up whatever is allocated once
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        churn(1_000, 200_000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    print(f"\n200,000 pods created and deleted on a standby: {grown / 1024:.1f} KiB retained")
    assert len(queue) == 0
    assert grown < 256 * 1024, f"{grown / 2**20:.1f} MiB retained"
    if hasattr(queue, "footprint"):
        assert queue.footprint() == {"entries": 0, "active": 0, "backoff timers": 0, "waiting": 0}


def test_stale_backoff_timers_are_swept_once_they_outnumber_live_ones():
    queue = SchedulingQueue()
    for i in range(1_000):
        key = f"uid-{i}"
        queue.upsert(key, pod(f"p-{i}", uid=key))
        queue.pop(0)
        queue.retry_later(key, 0, 0.5, waiting_on=("node1",))
        queue.delete(key)  # deleted while in backoff: its timer is stale
    assert queue.footprint()["backoff timers"] <= 64 + 1
    assert queue.footprint()["waiting"] == 0
    queue.check()

"""Repeated FailedScheduling events are coalesced into one Event with a growing count."""

from gpu_scheduler.kube.events import EventCoalescer, event_body


def test_first_occurrence_creates_an_event():
    series = EventCoalescer(window=30)
    step = series.observe("ml/a-0", "FailedScheduling", "node node9 not found", 0.0, "a-0.1")
    assert (step.action, step.name, step.count) == ("create", "a-0.1", 1)


def test_repeats_within_the_window_are_counted_but_not_written():
    series = EventCoalescer(window=30)
    series.observe("ml/a-0", "FailedScheduling", "why", 0.0, "a-0.1")
    steps = [series.observe("ml/a-0", "FailedScheduling", "why", t, f"a-0.{t}") for t in (1, 3, 7, 15)]
    assert {s.action for s in steps} == {"skip"}
    assert steps[-1].count == 5


def test_the_first_repeat_after_the_window_patches_the_same_event():
    series = EventCoalescer(window=30)
    series.observe("ml/a-0", "FailedScheduling", "why", 0.0, "a-0.1")
    series.observe("ml/a-0", "FailedScheduling", "why", 10.0, "a-0.2")
    step = series.observe("ml/a-0", "FailedScheduling", "why", 31.0, "a-0.3")
    assert (step.action, step.name, step.count) == ("patch", "a-0.1", 3)
    assert series.observe("ml/a-0", "FailedScheduling", "why", 40.0, "a-0.4").action == "skip"


def test_a_different_reason_message_or_pod_is_a_new_event():
    series = EventCoalescer(window=30)
    series.observe("ml/a-0", "FailedScheduling", "why", 0.0, "a-0.1")
    assert series.observe("ml/a-0", "FailedScheduling", "other", 1.0, "a-0.2").action == "create"
    assert series.observe("ml/b-1", "FailedScheduling", "why", 1.0, "b-1.1").action == "create"


def test_forgetting_a_pod_starts_its_next_failure_afresh():
    series = EventCoalescer(window=30)
    series.observe("ml/a-0", "FailedScheduling", "why", 0.0, "a-0.1")
    series.observe("ml/b-1", "FailedScheduling", "why", 0.0, "b-1.1")
    series.forget("ml/a-0")
    assert len(series) == 1
    assert series.observe("ml/a-0", "FailedScheduling", "why", 1.0, "a-0.2").action == "create"


def test_a_series_unseen_for_its_ttl_starts_over():
    series = EventCoalescer(window=30, ttl=600)
    series.observe("ml/a-0", "FailedScheduling", "why", 0.0, "a-0.1")
    step = series.observe("ml/a-0", "FailedScheduling", "why", 601.0, "a-0.2")
    assert (step.action, step.name, step.count) == ("create", "a-0.2", 1)


def test_event_body_is_an_events_v1_event_about_the_pod():
    pod = {"metadata": {"namespace": "ml", "name": "a-0", "uid": "u1", "resourceVersion": "7"}}
    body = event_body(
        pod,
        name="a-0.17",
        event_type="Normal",
        reason="Scheduled",
        action="Binding",
        note="x" * 5000,
        controller="gpu-scheduler",
        instance="i" * 300,
        now=0.0,
    )
    assert body["apiVersion"] == "events.k8s.io/v1"
    assert body["metadata"] == {"name": "a-0.17", "namespace": "ml"}
    assert body["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "a-0",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert body["eventTime"] == "1970-01-01T00:00:00.000000Z"
    assert (body["reportingController"], body["reason"], body["type"], body["action"]) == (
        "gpu-scheduler",
        "Scheduled",
        "Normal",
        "Binding",
    )
    assert len(body["note"]) == 1024
    assert len(body["reportingInstance"]) == 128


def test_a_relist_forgets_the_event_series_of_the_pending_pods_it_no_longer_sees():
    # Bug 6: a pod that left while the pod watch was away (a 410, a re-list) kept its
    # FailedScheduling series in the recorder for ever. Measured: 10,000 of them.
    import gc
    import tracemalloc

    from gpu_scheduler.kube.events import WARNING, EventRecorder
    from gpu_scheduler.kube.objects import watched_pod
    from gpu_scheduler.scheduler.metrics import SchedulerMetrics
    from gpu_scheduler.scheduler.runner import Scheduler, SchedulerConfig
    from gpu_scheduler.scheduling import SharingPolicy

    recorder = EventRecorder(None, controller="gpu-scheduler", instance="test", queue_size=1)  # never started
    config = SchedulerConfig("gpu-scheduler", None, SharingPolicy.WARN, "gpu-node-name", 1)
    scheduler = Scheduler(None, config, recorder, SchedulerMetrics(), lambda: True)
    watch = scheduler.informers[0]
    assert watch.name == "pods"
    pods = [
        {
            "metadata": {"namespace": "ml", "name": f"p-{i}", "uid": f"u-{i}", "annotations": {}},
            "spec": {"schedulerName": "gpu-scheduler"},
        }
        for i in range(10_000)
    ]
    watch._handler.replace([watched_pod(pod, "gpu-scheduler") for pod in pods], 0.0)
    assert scheduler.state.queued() == 10_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for pod in pods:
            recorder.record(pod, WARNING, "FailedScheduling", "Scheduling", "node node9 not found", coalesce=True)
        with_series = tracemalloc.get_traced_memory()[0]
        watch._handler.replace([], 1.0)  # the re-list: none of them is pending any more
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    grown, kept = (with_series - before) / 2**20, (after - before) / 1024
    print(f"\n10,000 series: +{grown:.1f} MiB; after the re-list: {kept:.0f} KiB")
    assert len(recorder._coalescer) == 0
    assert after - before < (with_series - before) / 10

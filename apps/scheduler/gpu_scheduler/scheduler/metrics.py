"""Prometheus metrics of the scheduler, named in kube-scheduler's style.

Counters and histograms are updated as work happens; gauges that mirror
state (queue sizes, GPUs held, dropped events) are read from that state at
scrape time, so they can never drift from it.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# Attempts take from well under a millisecond (a refusal) to a few seconds
# (a bind against a struggling apiserver).
DURATION_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# Results of an attempt: "scheduled" when this attempt's binding was stored;
# "already-bound" when the apiserver answered that the pod had a node already
# (an earlier binding whose answer was lost, or another replica's).
SCHEDULED = "scheduled"
ALREADY_BOUND = "already-bound"
UNSCHEDULABLE = "unschedulable"
ERROR = "error"


class _StateCollector(Collector):
    """Gauges read from live state when Prometheus scrapes."""

    def __init__(
        self,
        queue_counts: Callable[[], dict[str, int]],
        gpus_held: Callable[[], dict[str, int]],
        gpu_holders: Callable[[], list[tuple[str, str, str]]],
        events_dropped: Callable[[], int],
        relists: Callable[[], dict[tuple[str, str], int]],
        watch_silences: Callable[[], dict[str, float]],
    ) -> None:
        self._queue_counts = queue_counts
        self._gpus_held = gpus_held
        self._gpu_holders = gpu_holders
        self._events_dropped = events_dropped
        self._relists = relists
        self._watch_silences = watch_silences

    def collect(self):
        pending = GaugeMetricFamily(
            "gpu_scheduler_pending_pods", "Pending pods of this scheduler by queue.", labels=["queue"]
        )
        for queue, count in sorted(self._queue_counts().items()):
            pending.add_metric([queue], count)
        yield pending
        held = GaugeMetricFamily(
            "gpu_scheduler_gpus_held", "GPUs held by bound, unfinished pods, per node.", labels=["node"]
        )
        for node, count in sorted(self._gpus_held().items()):
            held.add_metric([node], count)
        yield held
        holders = GaugeMetricFamily(
            "gpu_scheduler_gpu_holder",
            "1 for each GPU and live pod holding it (gpu: the GPU's UUID, or MIG UUID under it, where the "
            "node publishes its inventory; else the device as the map wrote it).",
            labels=["node", "gpu", "pod"],
        )
        for node, gpu, pod in self._gpu_holders():
            holders.add_metric([node, gpu, pod], 1)
        yield holders
        yield CounterMetricFamily(
            "gpu_scheduler_events_dropped",
            "Events not sent for want of room: the event queue, or the room for retries, was full "
            '(the same as gpu_scheduler_events_total{result="dropped"}).',
            value=self._events_dropped(),
        )
        relists = CounterMetricFamily(
            "gpu_scheduler_watch_relists",
            "Lists after the first, by cache and reason: the watch's resourceVersion expired "
            "(410 Gone), a handler failed on an event (handler-error), or the scheduler asked "
            "for one to settle a binding whose answer was lost (requested).",
            labels=["cache", "reason"],
        )
        for (cache, reason), count in sorted(self._relists().items()):
            relists.add_metric([cache, reason], count)
        yield relists
        silences = GaugeMetricFamily(
            "gpu_scheduler_watch_seconds_since_last_event",
            "Seconds since each cache last heard from the apiserver: its last complete list, "
            "watch event or bookmark. A healthy watch gets a bookmark about every minute; "
            "no sample before a cache's first list.",
            labels=["cache"],
        )
        for cache, seconds in sorted(self._watch_silences().items()):
            silences.add_metric([cache], seconds)
        yield silences


# A gang waits from seconds (its pods being created) to its timeout (minutes) or longer.
GANG_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class _GangCollector(Collector):
    """Gangs with pending pods, read from the state when Prometheus scrapes."""

    def __init__(self, gang_counts: Callable[[], dict[str, int]]) -> None:
        self._gang_counts = gang_counts

    def collect(self):
        gangs = GaugeMetricFamily(
            "gpu_scheduler_gangs_waiting",
            "Gangs with pods waiting, by state: waiting (none bound, GPUs reserved under deny), partial "
            "(some pods bound: a binding failed or the scheduler restarted mid-gang), timed-out (waited "
            "past --gang-timeout-seconds: nothing reserved).",
            labels=["state"],
        )
        for state, count in sorted(self._gang_counts().items()):
            gangs.add_metric([state], count)
        yield gangs


class _ReportsCollector(Collector):
    """What became of the Events and PodScheduled conditions written in the background,
    read from their writers' counters when Prometheus scrapes."""

    def __init__(self, events: Callable[[], dict[str, int]], conditions: Callable[[], dict[str, int]] | None) -> None:
        self._events = events
        self._conditions = conditions

    def collect(self):
        events = CounterMetricFamily(
            "gpu_scheduler_events",
            "Events by what became of them: sent; retried (each try after the first, after no "
            "answer, a 5xx or a 429); dropped (no room in the queue or for retries); failed "
            "(refused with another 4xx, or out of tries).",
            labels=["result"],
        )
        for result, count in sorted(self._events().items()):
            events.add_metric([result], count)
        yield events
        if self._conditions is None:
            return
        conditions = CounterMetricFamily(
            "gpu_scheduler_pod_condition_writes",
            "PodScheduled=False writes by result: written; conflict (the pod had changed since "
            "the scheduler saw it, e.g. it was bound: not written, as meant); failed.",
            labels=["result"],
        )
        for result, count in sorted(self._conditions().items()):
            conditions.add_metric([result], count)
        yield conditions


class SchedulerMetrics:
    def __init__(self) -> None:
        # kube-scheduler's metrics have no *_created series; dashboards
        # written for it shouldn't see extra ones here.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.attempts = Counter(
            "gpu_scheduler_schedule_attempts", "Scheduling attempts by result.", ["result"], registry=self.registry
        )
        self.attempt_duration = Histogram(
            "gpu_scheduler_scheduling_attempt_duration_seconds",
            "Time from taking a pod off the queue to the end of its attempt (bind included).",
            ["result"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.binding_duration = Histogram(
            "gpu_scheduler_binding_duration_seconds",
            "Duration of the binding API call.",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.leader = Gauge(
            "gpu_scheduler_leader",
            "1 while this replica holds the leader lease (or runs without election).",
            registry=self.registry,
        )
        for result in (SCHEDULED, ALREADY_BOUND, UNSCHEDULABLE, ERROR):
            self.attempts.labels(result)  # present at 0 before the first attempt
        self.gang_completion = Histogram(
            "gpu_scheduler_gang_completion_seconds",
            "Time from the creation of a gang's newest pod to the binding of its last one (docs/gangs.md).",
            buckets=GANG_BUCKETS,
            registry=self.registry,
        )

    def gang_completed(self, seconds: float) -> None:
        self.gang_completion.observe(seconds)

    def watch_gangs(self, gang_counts: Callable[[], dict[str, int]]) -> None:
        self.registry.register(_GangCollector(gang_counts))

    def observe_attempt(self, result: str, seconds: float) -> None:
        self.attempts.labels(result).inc()
        self.attempt_duration.labels(result).observe(seconds)

    def watch_state(
        self,
        queue_counts: Callable[[], dict[str, int]],
        gpus_held: Callable[[], dict[str, int]],
        gpu_holders: Callable[[], list[tuple[str, str, str]]],
        events_dropped: Callable[[], int],
        relists: Callable[[], dict[tuple[str, str], int]],
        watch_silences: Callable[[], dict[str, float]],
    ) -> None:
        collector = _StateCollector(queue_counts, gpus_held, gpu_holders, events_dropped, relists, watch_silences)
        self.registry.register(collector)

    def watch_reports(
        self, events: Callable[[], dict[str, int]], conditions: Callable[[], dict[str, int]] | None = None
    ) -> None:
        self.registry.register(_ReportsCollector(events, conditions))

"""The `gpu-scheduler scheduler` process from start to exit.

At start the process lists pods and nodes and waits until every cache has
synced; only then does it run for leadership (or, without election, lead),
as kube-scheduler does: a replica that bound before its caches were loaded
could give away a held GPU. It runs until SIGTERM or SIGINT: then it takes no
new pods, waits for the binds in flight to end (answered, or given up at the
bind timeout: nothing is sent after it), hands back the leader lease and
exits 0. If it loses the lease (it could not renew in time), it stops binding
at once and exits 1 so that its Deployment restarts it as a standby.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
import time

from kubernetes.config.config_exception import ConfigException

from gpu_scheduler.gc_tuning import tune_for_service
from gpu_scheduler.kube.client import USER_AGENT, new_client
from gpu_scheduler.kube.events import EventRecorder
from gpu_scheduler.kube.leader import new_identity
from gpu_scheduler.kube.pod_status import PodConditionWriter

from .health import HealthServer
from .leadership import Leadership
from .metrics import SchedulerMetrics
from .runner import Scheduler, SchedulerConfig

# The process's one logger name, whichever module speaks: its lines read alike.
log = logging.getLogger("gpu_scheduler.scheduler")

# Events sent at once. kube-scheduler's recorder (client-go's tools/events broadcaster, read
# at v0.37.2: recordToSink) posts every Event in a goroutine of its own, bounded only by its
# client's rate limit; one sender here, a round trip at a time, left a 5,000-node burst with
# 0.2-0.3 Scheduled Events per pod sent while its pods were bound, against kube-scheduler's 1.0.
# The Events keep their own client and rate limit, apart from the binds'.
EVENT_SENDERS = 8
# Connections beyond the bind workers: six watches (pods, nodes, claims, volumes, classes,
# CSINodes) and slack for retries.
EXTRA_CONNECTIONS = 12
# The drain waits for the attempts in flight; beyond its bind, an attempt is microseconds of
# work, so this covers a loaded machine.
DRAIN_MARGIN_SECONDS = 2.0
EVENT_FLUSH_SECONDS = 2.0
# While the caches load, say every so often that the process is still waiting.
SYNC_REPORT_SECONDS = 10.0


def run(args: argparse.Namespace, config: SchedulerConfig) -> int:
    # One identity per process: the Lease holder's name, and in every request's User-Agent,
    # so that an audit log tells which replica made each binding.
    identity = new_identity()
    user_agent = f"{USER_AGENT} ({identity})"
    try:
        client = new_client(
            args.kubeconfig,
            pool_size=args.workers + EXTRA_CONNECTIONS,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            user_agent=user_agent,
        )
        # Events and the Lease get clients of their own, each with its own
        # rate limit, as in kube-scheduler: a burst of binds must neither
        # starve lease renewal (and lose leadership) nor be slowed by the
        # Scheduled event that follows each bind.
        events_client = new_client(
            args.kubeconfig,
            pool_size=EVENT_SENDERS + 2,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            user_agent=user_agent,
        )
        lease_client = new_client(args.kubeconfig, pool_size=2, qps=0, burst=1, user_agent=user_agent)
    except (ConfigException, OSError, ValueError) as err:
        where = args.kubeconfig or "in-cluster config or ~/.kube/config"
        log.error("cannot load the cluster configuration (%s): %s; pass --kubeconfig or set KUBECONFIG", where, err)
        return 1
    recorder = EventRecorder(
        events_client,
        controller=args.scheduler_name,
        instance=f"{args.scheduler_name}-{socket.gethostname()}",
        senders=EVENT_SENDERS,
    )
    metrics = SchedulerMetrics()
    stop = threading.Event()
    # The elector calls back only once started, and the scheduler exists by then.
    leadership = Leadership(args, lease_client, identity, lambda leading: scheduler.set_leading(leading))
    # PodScheduled conditions share the Events' client and rate limit: both report, neither binds.
    conditions = PodConditionWriter(events_client)
    metrics.watch_reports(recorder.counts, conditions.counts)
    scheduler = Scheduler(client, config, recorder, metrics, leadership.may_bind, conditions)

    def healthy() -> str | None:
        dead = scheduler.dead_parts()
        if not leadership.alive():
            dead.append("leader election")
        return f"stopped: {', '.join(dead)}" if dead else None

    def ready() -> str | None:
        # Not ready until every cache has listed, nor while one is not kept current
        # (its watch failing for a while): decisions would rest on stale data.
        problems = scheduler.not_current()
        return f"caches not current: {'; '.join(problems)}" if problems else None

    try:
        server = HealthServer(args.bind_address, args.metrics_port, metrics.registry, healthy, ready)
    except OSError as err:
        log.error(
            "cannot serve /metrics, /healthz and /readyz on %s:%s: %s; choose another --metrics-port",
            args.bind_address,
            args.metrics_port,
            err,
        )
        return 1
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    server.start()
    recorder.start()
    conditions.start()
    scheduler.start()
    log.info(
        "scheduler started",
        extra={
            "fields": {
                "scheduler_name": args.scheduler_name,
                "namespace": args.namespace or "(all)",
                "gpu_sharing": args.gpu_sharing,
                "workers": args.workers,
                "leader_elect": args.leader_elect,
                "identity": identity,
                "metrics": f"{args.bind_address}:{server.port}",
            }
        },
    )
    if not _wait_synced(scheduler, stop):
        log.info("stopped before the caches synced")
        server.stop()
        return 0
    # The caches hold what was listed: start-up is over.
    tune_for_service()
    leadership.start()

    # Signal handlers run on the main thread, so it waits in short slices.
    while not stop.wait(0.5):
        if leadership.lost.is_set():
            log.error("leadership lost: exiting so that a standby takes over")
            return 1
    drained = stop_binding(scheduler, leadership.elector, config.bind_timeout)
    # The last pods' Scheduled events are worth a moment; binding is over.
    recorder.flush(EVENT_FLUSH_SECONDS)
    conditions.flush(EVENT_FLUSH_SECONDS)
    server.stop()
    log.info("stopped", extra={"fields": {"drained": drained}})
    return 0


def drain_seconds(bind_timeout: float) -> float:
    """How long SIGTERM waits for the attempts in flight: each ends within its bind timeout."""
    return bind_timeout + DRAIN_MARGIN_SECONDS


def stop_binding(scheduler, elector, bind_timeout: float) -> bool:
    """SIGTERM: takes no new pods, waits for the binds in flight, then hands the lease back.

    Only then: a standby may lead as soon as the lease is free, and a binding of ours still
    in flight could be stored after it has bound the same pod or GPU. If the wait runs out
    (it covers the bind timeout, so only a stalled process gets there), the lease is left to
    expire instead. True if every attempt ended."""
    log.info("shutting down: finishing binds in flight")
    scheduler.set_leading(False)
    drained = scheduler.stop(drain_seconds(bind_timeout))
    if elector is None:
        return drained
    if drained:
        elector.release()
    else:
        log.warning("binds still in flight: the leader lease is not handed back, it expires by itself")
        elector.stop()
    return drained


def _wait_synced(scheduler, stop: threading.Event) -> bool:
    """Waits until every cache has listed once; False if asked to stop first."""
    started = time.monotonic()
    while not scheduler.wait_synced(0.5):
        if stop.is_set():
            return False
        waited = time.monotonic() - started
        if waited // SYNC_REPORT_SECONDS != (waited - 0.5) // SYNC_REPORT_SECONDS:
            log.info("waiting for the caches to sync: %s", "; ".join(scheduler.not_current()))
    log.info("caches synced", extra={"fields": {"seconds": round(time.monotonic() - started, 3)}})
    return True

"""`gpu-scheduler scheduler`: flags, wiring, and the process lifecycle.

At start the process lists pods and nodes and waits until every cache has
synced; only then does it run for leadership (or, without election, lead),
as kube-scheduler does: a replica that bound before its caches were loaded
could give away a held GPU. It runs until SIGTERM or SIGINT: then it takes no
new pods, waits for the binds in flight to end (answered, or given up at the
bind timeout: nothing is sent after it), hands back the leader lease and
exits 0. If it loses the lease (it could not renew in time), it stops binding
at once and exits 1 so that its Deployment restarts it as a standby.

Binds and the lease: a standby may lead once the lease has gone unrenewed for
its duration; the leader starts binds until its renew deadline has passed
since its last renewal. So a bind must be over within lease duration minus
renew deadline, or a binding of the old leader could be stored while the new
one binds (bind_timeout).
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
import time

from gpu_scheduler.config import boolean, env, env_help, positive_float, positive_int
from gpu_scheduler.gc_tuning import tune_for_service

log = logging.getLogger("gpu_scheduler.scheduler")

# One sender, like client-go's event sink: Events go out one at a time, so
# in a burst the apiserver's attention goes to the binds.
EVENT_SENDERS = 1
# Connections beyond the bind workers: two watches (pods, nodes) and slack for retries.
EXTRA_CONNECTIONS = 8
# A bind timeout shorter than this would fail binds a healthy apiserver answers.
MIN_BIND_TIMEOUT_SECONDS = 1.0
# The drain waits for the attempts in flight; beyond its bind, an attempt is microseconds of
# work, so this covers a loaded machine.
DRAIN_MARGIN_SECONDS = 2.0
EVENT_FLUSH_SECONDS = 2.0
# While the caches load, say every so often that the process is still waiting.
SYNC_REPORT_SECONDS = 10.0


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be within 0-65535, got {value}")
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--kubeconfig",
        default=env("KUBECONFIG", "") or None,
        help="kubeconfig file (env KUBECONFIG); in-cluster config when unset",
    )
    add(
        "--scheduler-name",
        default=env("SCHEDULER_NAME", "gpu-scheduler"),
        help=env_help(
            "schedule the pods whose spec.schedulerName is this; also the Events' reporter", "SCHEDULER_NAME"
        ),
    )
    add(
        "--namespace",
        default=env("WATCH_NAMESPACE", "") or None,
        help="schedule pods of this namespace only (env WATCH_NAMESPACE); all namespaces when unset",
    )
    add(
        "--gpu-sharing",
        choices=("allow", "warn", "deny"),
        type=str.lower,
        default=env("GPU_SHARING", "warn"),
        help=env_help(
            "when a pod's GPUs are held by another running pod: bind silently (allow), "
            "bind with a Warning event (warn), or refuse until they are free (deny)",
            "GPU_SHARING",
        ),
    )
    add(
        "--alias-label",
        default=env("ALIAS_LABEL", "gpu-node-name"),
        help=env_help("node label whose value a map may use instead of the node name", "ALIAS_LABEL"),
    )
    add(
        "--workers",
        type=positive_int,
        # Binding is a wait on the apiserver's answer: more workers than
        # cores pay off (make bench: 16 workers drain at 16 / mean attempt).
        default=int(env("BIND_WORKERS", "32")),
        help=env_help("pods scheduled and bound concurrently", "BIND_WORKERS"),
    )
    add(
        "--kube-api-qps",
        type=float,
        default=float(env("KUBE_API_QPS", "500")),
        help=env_help("requests per second to the apiserver, sustained (0: no limit)", "KUBE_API_QPS"),
    )
    add(
        "--kube-api-burst",
        type=positive_int,
        default=int(env("KUBE_API_BURST", "1000")),
        help=env_help("requests to the apiserver allowed in a burst above the QPS", "KUBE_API_BURST"),
    )
    add(
        "--pod-initial-backoff-seconds",
        type=positive_float,
        default=float(env("POD_INITIAL_BACKOFF_SECONDS", "1")),
        help=env_help(
            "wait before the first retry of a pod that could not be placed; doubles with each retry",
            "POD_INITIAL_BACKOFF_SECONDS",
        ),
    )
    add(
        "--pod-max-backoff-seconds",
        type=positive_float,
        default=float(env("POD_MAX_BACKOFF_SECONDS", "60")),
        help=env_help("longest wait between retries of a pod", "POD_MAX_BACKOFF_SECONDS"),
    )
    add(
        "--leader-elect",
        type=boolean,
        default=boolean(env("LEADER_ELECT", "true")),
        help=env_help("elect a leader with a Lease so that only one replica binds (true|false)", "LEADER_ELECT"),
    )
    add(
        "--leader-elect-lease-duration",
        type=positive_float,
        default=float(env("LEADER_ELECT_LEASE_DURATION", "15")),
        help=env_help(
            "seconds a standby waits after the last renewal before taking the lease; a binding may "
            "take what this leaves beyond the renew deadline (at most 10 s; must be at least 1 s)",
            "LEADER_ELECT_LEASE_DURATION",
        ),
    )
    add(
        "--leader-elect-renew-deadline",
        type=positive_float,
        default=float(env("LEADER_ELECT_RENEW_DEADLINE", "10")),
        help=env_help(
            "seconds the leader keeps trying to renew before it gives up and exits", "LEADER_ELECT_RENEW_DEADLINE"
        ),
    )
    add(
        "--leader-elect-retry-period",
        type=positive_float,
        default=float(env("LEADER_ELECT_RETRY_PERIOD", "2")),
        help=env_help("seconds between tries to acquire or renew the lease", "LEADER_ELECT_RETRY_PERIOD"),
    )
    add(
        "--leader-elect-resource-name",
        default=env("LEADER_ELECT_RESOURCE_NAME", "gpu-scheduler"),
        help=env_help("name of the Lease", "LEADER_ELECT_RESOURCE_NAME"),
    )
    add(
        "--leader-elect-resource-namespace",
        default=env("POD_NAMESPACE", "default"),
        help=env_help("namespace of the Lease", "POD_NAMESPACE"),
    )
    add(
        "--metrics-port",
        type=_port,
        default=_port(env("METRICS_PORT", "10251")),
        help=env_help("plain-HTTP port for /metrics, /healthz and /readyz (0: any free port)", "METRICS_PORT"),
    )
    add(
        "--bind-address",
        default=env("BIND_ADDRESS", "0.0.0.0"),
        help=env_help("address the /metrics, /healthz and /readyz server listens on", "BIND_ADDRESS"),
    )


def _check_lease_timing(args: argparse.Namespace) -> str | None:
    # The same rules as client-go: a leader must give up before a standby may
    # take over, and must get more than one try at renewing before that.
    if args.leader_elect_renew_deadline >= args.leader_elect_lease_duration:
        return (
            f"--leader-elect-renew-deadline ({args.leader_elect_renew_deadline:g}) must be "
            f"shorter than --leader-elect-lease-duration ({args.leader_elect_lease_duration:g})"
        )
    if args.leader_elect_retry_period >= args.leader_elect_renew_deadline:
        return (
            f"--leader-elect-retry-period ({args.leader_elect_retry_period:g}) must be "
            f"shorter than --leader-elect-renew-deadline ({args.leader_elect_renew_deadline:g})"
        )
    if bind_timeout(args) < MIN_BIND_TIMEOUT_SECONDS:
        return (
            f"--leader-elect-lease-duration ({args.leader_elect_lease_duration:g}) must be at least "
            f"{MIN_BIND_TIMEOUT_SECONDS:g} s longer than --leader-elect-renew-deadline "
            f"({args.leader_elect_renew_deadline:g}): the difference is the time a binding gets, "
            "so that one sent just before the renew deadline is over before a standby may lead"
        )
    return None


def bind_timeout(args: argparse.Namespace) -> float:
    """How long a binding may take, retries included (nothing is sent after it).

    With leader election, a leader starts binds until the renew deadline has passed since
    its last renewal, and a standby may lead once the lease duration has passed since then
    (as the Lease records it, in whole seconds). A binding sent at the last moment must be
    over before that, or the old leader's binding could be stored while the new leader binds
    the same pod or GPU: so it gets lease duration minus renew deadline (5 s with the
    defaults), and never more than the binder's own limit. (The apiserver may still finish a
    request after its client gave up; no client timeout can close that gap.)
    """
    from gpu_scheduler.kube.binder import BIND_TIMEOUT_SECONDS
    from gpu_scheduler.kube.leader import lease_seconds

    if not args.leader_elect:
        return BIND_TIMEOUT_SECONDS
    return min(BIND_TIMEOUT_SECONDS, lease_seconds(args.leader_elect_lease_duration) - args.leader_elect_renew_deadline)


def drain_seconds(bind_timeout: float) -> float:
    """How long SIGTERM waits for the attempts in flight: each ends within its bind timeout."""
    return bind_timeout + DRAIN_MARGIN_SECONDS


def _check_backoff(args: argparse.Namespace) -> str | None:
    if args.pod_initial_backoff_seconds > args.pod_max_backoff_seconds:
        return (
            f"--pod-initial-backoff-seconds ({args.pod_initial_backoff_seconds:g}) must not be longer "
            f"than --pod-max-backoff-seconds ({args.pod_max_backoff_seconds:g})"
        )
    return None


def run(args: argparse.Namespace) -> int:
    problem = (_check_lease_timing(args) if args.leader_elect else None) or _check_backoff(args)
    if problem:
        log.error("%s", problem)
        return 2
    # Imported here so that building the CLI parser stays fast (kubernetes
    # and prometheus_client take a while to import).
    from kubernetes.config.config_exception import ConfigException

    from gpu_scheduler.kube.client import USER_AGENT, new_client
    from gpu_scheduler.kube.events import EventRecorder
    from gpu_scheduler.kube.leader import LeaderElector, new_identity
    from gpu_scheduler.kube.pod_status import PodConditionWriter
    from gpu_scheduler.scheduling import SharingPolicy

    from .health import HealthServer
    from .metrics import SchedulerMetrics
    from .runner import Scheduler, SchedulerConfig

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
    lost = threading.Event()
    stop = threading.Event()
    elector = None
    if args.leader_elect:

        def lose() -> None:
            scheduler.set_leading(False)
            lost.set()

        elector = LeaderElector(
            lease_client,
            namespace=args.leader_elect_resource_namespace,
            name=args.leader_elect_resource_name,
            identity=identity,
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
            on_started_leading=lambda: scheduler.set_leading(True),
            on_stopped_leading=lose,
        )
    may_bind = elector.is_leader if elector else (lambda: True)
    config = SchedulerConfig(
        args.scheduler_name,
        args.namespace,
        SharingPolicy.parse(args.gpu_sharing),
        args.alias_label,
        args.workers,
        args.pod_initial_backoff_seconds,
        args.pod_max_backoff_seconds,
        bind_timeout=bind_timeout(args),
    )
    # PodScheduled conditions share the Events' client and rate limit: both report, neither binds.
    conditions = PodConditionWriter(events_client)
    metrics.watch_reports(recorder.counts, conditions.counts)
    scheduler = Scheduler(client, config, recorder, metrics, may_bind, conditions)

    def healthy() -> str | None:
        dead = scheduler.dead_parts()
        if elector is not None and not elector.alive():
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
    if elector is not None:
        elector.start()
    else:
        scheduler.set_leading(True)

    # Signal handlers run on the main thread, so it waits in short slices.
    while not stop.wait(0.5):
        if lost.is_set():
            log.error("leadership lost: exiting so that a standby takes over")
            return 1
    drained = stop_binding(scheduler, elector, config.bind_timeout)
    # The last pods' Scheduled events are worth a moment; binding is over.
    recorder.flush(EVENT_FLUSH_SECONDS)
    conditions.flush(EVENT_FLUSH_SECONDS)
    server.stop()
    log.info("stopped", extra={"fields": {"drained": drained}})
    return 0


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

"""`gpu-scheduler scheduler`: flags, wiring, and the process lifecycle.

The process runs until SIGTERM or SIGINT: then it takes no new pods, lets the
binds in flight finish, hands back the leader lease and exits 0. If it loses
the lease (it could not renew in time), it stops binding at once and exits 1
so that its Deployment restarts it as a standby, as kube-scheduler does.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading

from gpu_scheduler.config import boolean, env, env_help, positive_float, positive_int

log = logging.getLogger("gpu_scheduler.scheduler")

# One sender, like client-go's event sink: Events go out one at a time, so
# in a burst the apiserver's attention goes to the binds.
EVENT_SENDERS = 1
# Connections beyond the bind workers: three watches and slack for retries.
EXTRA_CONNECTIONS = 8
DRAIN_SECONDS = 10.0
EVENT_FLUSH_SECONDS = 2.0


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
            "seconds a standby waits after the last renewal before taking the lease", "LEADER_ELECT_LEASE_DURATION"
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
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check_lease_timing(args) if args.leader_elect else None
    if problem:
        log.error("%s", problem)
        return 2
    # Imported here so that building the CLI parser stays fast (kubernetes
    # and prometheus_client take a while to import).
    from kubernetes.config.config_exception import ConfigException

    from gpu_scheduler.kube.client import new_client
    from gpu_scheduler.kube.events import EventRecorder
    from gpu_scheduler.kube.leader import LeaderElector, new_identity
    from gpu_scheduler.scheduling import SharingPolicy

    from .health import HealthServer
    from .metrics import SchedulerMetrics
    from .runner import Scheduler, SchedulerConfig

    try:
        client = new_client(
            args.kubeconfig,
            pool_size=args.workers + EXTRA_CONNECTIONS,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
        )
        # Events and the Lease get clients of their own, each with its own
        # rate limit, as in kube-scheduler: a burst of binds must neither
        # starve lease renewal (and lose leadership) nor be slowed by the
        # Scheduled event that follows each bind.
        events_client = new_client(
            args.kubeconfig, pool_size=EVENT_SENDERS + 1, qps=args.kube_api_qps, burst=args.kube_api_burst
        )
        lease_client = new_client(args.kubeconfig, pool_size=2, qps=0, burst=1)
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
            identity=new_identity(),
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
            on_started_leading=lambda: scheduler.set_leading(True),
            on_stopped_leading=lose,
        )
    may_bind = elector.is_leader if elector else (lambda: True)
    config = SchedulerConfig(
        args.scheduler_name, args.namespace, SharingPolicy.parse(args.gpu_sharing), args.alias_label, args.workers
    )
    scheduler = Scheduler(client, config, recorder, metrics, may_bind)

    def healthy() -> str | None:
        dead = scheduler.dead_parts()
        if elector is not None and not elector.alive():
            dead.append("leader election")
        return f"stopped: {', '.join(dead)}" if dead else None

    def ready() -> str | None:
        return None if scheduler.synced() else "caches not synced yet (initial list of pods and nodes)"

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
                "metrics": f"{args.bind_address}:{server.port}",
            }
        },
    )
    if elector is not None:
        elector.start()
    else:
        scheduler.set_leading(True)

    # Signal handlers run on the main thread, so it waits in short slices.
    while not stop.wait(0.5):
        if lost.is_set():
            log.error("leadership lost: exiting so that a standby takes over")
            return 1
    log.info("shutting down: finishing binds in flight")
    scheduler.set_leading(False)
    drained = scheduler.stop(DRAIN_SECONDS)
    if elector is not None:
        elector.release()
    # The last pods' Scheduled events are worth a moment; the lease is already free.
    recorder.flush(EVENT_FLUSH_SECONDS)
    server.stop()
    log.info("stopped", extra={"fields": {"drained": drained}})
    return 0

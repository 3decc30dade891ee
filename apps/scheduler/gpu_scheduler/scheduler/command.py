"""`gpu-scheduler scheduler`: its flags, their checks, and the settings they make.

run() refuses flags that do not fit together (exit 2), turns the rest into a
SchedulerConfig and hands the process over to process.py.

Binds and the lease: a standby may lead once the lease has gone unrenewed for
its duration; the leader starts binds until its renew deadline has passed
since its last renewal. So a bind must be over within lease duration minus
renew deadline, or a binding of the old leader could be stored while the new
one binds (bind_timeout).
"""

from __future__ import annotations

import argparse
import logging

from gpu_scheduler.config import DEFAULT_SCHEDULER_NAME, boolean, env, env_help, positive_float, positive_int
from gpu_scheduler.scheduling.decide import FAILOVER_AFTER_SECONDS
from gpu_scheduler.scheduling.gangs import GANG_TIMEOUT_SECONDS
from gpu_scheduler.scheduling.nodes import DEFAULT_ALIAS_LABEL

from .queue import INITIAL_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS

# The process's one logger name, whichever module speaks: its lines read alike.
log = logging.getLogger("gpu_scheduler.scheduler")

# A bind timeout shorter than this would fail binds a healthy apiserver answers.
MIN_BIND_TIMEOUT_SECONDS = 1.0


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
        default=env("SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME),
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
        default=env("ALIAS_LABEL", DEFAULT_ALIAS_LABEL),
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
        default=float(env("POD_INITIAL_BACKOFF_SECONDS", f"{INITIAL_BACKOFF_SECONDS:g}")),
        help=env_help(
            "wait before the first retry of a pod that could not be placed; doubles with each retry",
            "POD_INITIAL_BACKOFF_SECONDS",
        ),
    )
    add(
        "--pod-max-backoff-seconds",
        type=positive_float,
        default=float(env("POD_MAX_BACKOFF_SECONDS", f"{MAX_BACKOFF_SECONDS:g}")),
        help=env_help("longest wait between retries of a pod", "POD_MAX_BACKOFF_SECONDS"),
    )
    add(
        "--gang-timeout-seconds",
        type=positive_float,
        default=float(env("GANG_TIMEOUT_SECONDS", f"{GANG_TIMEOUT_SECONDS:g}")),
        help=env_help(
            "how long a gang (gpu-scheduler/gang) waits with the GPUs it needs reserved under --gpu-sharing=deny, "
            "from its newest pod's creation; then they are released and a GangTimeout event says what blocked it",
            "GANG_TIMEOUT_SECONDS",
        ),
    )
    add(
        "--failover-after-seconds",
        type=positive_float,
        default=float(env("FAILOVER_AFTER_SECONDS", f"{FAILOVER_AFTER_SECONDS:g}")),
        help=env_help(
            "how long a pod whose map line names a fallback (<index>=<node>:<devices>|*[<selector>]) waits, once "
            "its node is gone or NotReady, before it is given as many GPUs on a node of the fallback",
            "FAILOVER_AFTER_SECONDS",
        ),
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
        default=env("LEADER_ELECT_RESOURCE_NAME", DEFAULT_SCHEDULER_NAME),
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
    from gpu_scheduler.scheduling import SharingPolicy

    from . import process
    from .runner import SchedulerConfig

    config = SchedulerConfig(
        args.scheduler_name,
        args.namespace,
        SharingPolicy.parse(args.gpu_sharing),
        args.alias_label,
        args.workers,
        args.pod_initial_backoff_seconds,
        args.pod_max_backoff_seconds,
        bind_timeout=bind_timeout(args),
        gang_timeout=args.gang_timeout_seconds,
        failover_after=args.failover_after_seconds,
    )
    return process.run(args, config)

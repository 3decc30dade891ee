"""`gpu-scheduler agent`: reads this node's GPUs from NVML and publishes them on its Node.

It runs on every GPU node (a DaemonSet) and repeats its cycle (runner.py)
every --interval seconds until SIGTERM or SIGINT, which end the process at
once with 0. With --once it runs one cycle, and its exit code says how that
went. docs/gpu-inventory.md describes what is published.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from ..config import env, env_help, positive_float

log = logging.getLogger("gpu_scheduler.agent")

# Exit codes of --once.
EXIT_PUBLISHED = 0  # published, or already published
EXIT_FAILED = 1
EXIT_NO_NVML = 2
# After SIGTERM, how long a cycle in flight may take to end before the process exits anyway.
STOP_GRACE_SECONDS = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-name",
        default=env("NODE_NAME", "") or None,
        help="the Node to publish on: this node's name, e.g. the downward API's spec.nodeName "
        "(env NODE_NAME; required unless --print)",
    )
    parser.add_argument(
        "--interval",
        type=positive_float,
        default=float(env("AGENT_INTERVAL", "60")),
        metavar="SECONDS",
        help=env_help("seconds between two reads of NVML", "AGENT_INTERVAL"),
    )
    parser.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG", "") or None,
        help="kubeconfig file (env KUBECONFIG); in-cluster config when unset",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help=f"one cycle, then exit: {EXIT_PUBLISHED} published (or already published), "
        f"{EXIT_FAILED} on an error, {EXIT_NO_NVML} when NVML is not available",
    )
    parser.add_argument(
        "--print",
        action="store_true",
        help="print what would be published (the annotation's JSON and the labels) and exit, "
        f"without contacting the API server: 0, or {EXIT_NO_NVML} when NVML is not available",
    )


def run(args: argparse.Namespace) -> int:
    if args.print:
        return _print()
    if not args.node_name:
        log.error("--node-name (or NODE_NAME) is required: the name of the node this agent runs on")
        return EXIT_FAILED
    # Imported here so that building the CLI parser stays fast (kubernetes takes a while).
    from ..kube.client import USER_AGENT, new_client
    from .nvml import read_inventory
    from .runner import Agent, Outcome

    def connect():
        user_agent = f"{USER_AGENT} agent ({args.node_name})"
        return new_client(args.kubeconfig, pool_size=1, qps=0, burst=1, user_agent=user_agent)

    if args.once:
        outcome = Agent(args.node_name, read_inventory, connect, retry_seconds=None).cycle()
        if outcome in (Outcome.PUBLISHED, Outcome.UNCHANGED):
            return EXIT_PUBLISHED
        return EXIT_NO_NVML if outcome is Outcome.NO_NVML else EXIT_FAILED

    agent = Agent(args.node_name, read_inventory, connect, retry_seconds=args.interval)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # The cycles run beside the main thread, so that a signal ends the process even while
    # a request waits on a slow API server; the main thread only waits for either to end.
    exit_code: list[int] = []
    worker = threading.Thread(
        target=lambda: exit_code.append(agent.loop(stop, args.interval)), name="agent-cycles", daemon=True
    )
    log.info("agent started", extra={"fields": {"node": args.node_name, "interval_seconds": args.interval}})
    worker.start()
    # Signal handlers run on the main thread, so it waits in short slices.
    while worker.is_alive() and not stop.wait(0.5):
        pass
    if stop.is_set():
        worker.join(STOP_GRACE_SECONDS)
        log.info("stopped")
        return 0
    return exit_code[0] if exit_code else EXIT_FAILED


def _print() -> int:
    """What this node would publish, on stdout as JSON: {"annotations": {...}, "labels": {...}}."""
    import json

    from ..scheduling.inventory import INVENTORY_ANNOTATION
    from .nvml import NvmlReadError, NvmlUnavailable, read_inventory

    try:
        inventory = read_inventory()
    except NvmlUnavailable as err:
        log.warning("NVML is not available: %s", err)
        return EXIT_NO_NVML
    except NvmlReadError as err:
        log.error("%s", err)
        return EXIT_FAILED
    document = {"annotations": {INVENTORY_ANNOTATION: inventory.to_annotation()}, "labels": inventory.labels()}
    print(json.dumps(document, indent=2))
    return EXIT_PUBLISHED

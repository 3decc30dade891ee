"""The engine of `make demo` (scripts/demo.sh): the product on this host against the local cluster.

    python -m e2e.demo start     certs, webhook and scheduler in the background, webhooks registered
    python -m e2e.demo wait      wait until the check pods are placed (exit 1 on timeout)
    python -m e2e.demo verdict   each pod's node and CUDA_VISIBLE_DEVICES against the map; PASS or FAIL (exit 1)
    python -m e2e.demo stop      stop the processes, unregister the webhooks

Run with tests/ on PYTHONPATH. The processes outlive `start`: their PIDs and
logs are in DEMO_DIR (.cache/local-cluster/demo/), whose *.pid files
`make local-down` also reads to stop them. Uses the same code as the e2e fixtures.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kubernetes import client, config

from . import webhook_registration
from .cluster import list_pods, node_aliases
from .components import REPO, SchedulerProcess, WebhookProcess, make_certs
from .placement_check import PodPlacement, statefulset_placements, table
from .processes import stop_pid
from .waiting import NotYet, WaitTimeout, wait_for
from .workloads import TASK_EXPECTED

# scripts/demo.sh sets DEMO_DIR; .cache/local-cluster/demo by default.
DEMO_DIR = Path(os.environ.get("DEMO_DIR") or REPO / ".cache" / "local-cluster" / "demo")
LOCAL_KUBECONFIG = REPO / ".cache" / "local-cluster" / "kubeconfig"
WEBHOOK_CONFIGURATION = "gpu-scheduler-demo"
CHECK_PODS = "app.kubernetes.io/name=gpu-scheduler-check"
PROCESSES = ("webhook", "scheduler")


def kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(LOCAL_KUBECONFIG)


def pid_file(name: str) -> Path:
    return DEMO_DIR / f"{name}.pid"


def stop_processes() -> None:
    for name in PROCESSES:
        path = pid_file(name)
        if not path.exists():
            continue
        pid = int(path.read_text())
        # Only our own process: a PID from a run before a reboot may belong to anything now.
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except FileNotFoundError:
            command = ""
        if f"gpu-scheduler {name}" in command and stop_pid(pid):
            print(f"stopped the {name} (pid {pid})")
        path.unlink()


def start(api_client, namespace: str) -> None:
    stop_processes()  # a second `make demo` starts afresh
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    certs = make_certs(DEMO_DIR / "certs")
    webhook = WebhookProcess(certs, DEMO_DIR / "webhook.log", kubeconfig=kubeconfig())
    scheduler = SchedulerProcess(kubeconfig(), DEMO_DIR / "scheduler.log")
    for process in (webhook, scheduler):
        process.start()
        pid_file(process.name).write_text(f"{process.pid}\n")
    webhook.wait_http_ok(f"{webhook.base_url}/readyz", 60, ca_file=certs.ca_file)
    scheduler.wait_http_ok(f"{scheduler.base_url}/readyz", 60)
    print(f"webhook   pid {webhook.pid}, {webhook.base_url} (log {webhook.log_path})")
    print(f"scheduler pid {scheduler.pid}, {scheduler.base_url}/metrics (log {scheduler.log_path})")

    webhook_registration.apply(
        api_client, webhook_registration.render(WEBHOOK_CONFIGURATION, webhook.base_url, certs.ca_bundle)
    )
    core = client.CoreV1Api(api_client)
    if not core.list_namespace(field_selector=f"metadata.name={namespace}").items:
        core.create_namespace({"metadata": {"name": namespace}})
    webhook_registration.wait_until_called(api_client, namespace)
    print(f"registered MutatingWebhookConfiguration and ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION}")


def check_placements(api_client, namespace: str) -> list[PodPlacement]:
    pods = list_pods(api_client, namespace, CHECK_PODS)
    return statefulset_placements(pods, TASK_EXPECTED, node_aliases(api_client))


def wait(api_client, namespace: str, timeout: float) -> bool:
    """Waits until every check pod is placed as the map says; on timeout says what it saw."""

    def all_placed() -> None:
        rows = check_placements(api_client, namespace)
        if len(rows) != len(TASK_EXPECTED) or any(row.problems() for row in rows):
            raise NotYet("\n" + table(rows))

    try:
        wait_for(f"{len(TASK_EXPECTED)} check pods in {namespace} placed as the map says", all_placed, timeout)
    except WaitTimeout as err:
        print(err)
        return False
    return True


def verdict(api_client, namespace: str) -> bool:
    """Prints each pod's node and CUDA_VISIBLE_DEVICES against the map, then PASS or FAIL."""
    rows = check_placements(api_client, namespace)
    good = sum(1 for row in rows if not row.problems())
    print(table(rows) + "\n")
    if good == len(TASK_EXPECTED) == len(rows):
        print(f"PASS: {good}/{len(TASK_EXPECTED)} pods placed as the map says")
        return True
    print(
        f"FAIL: {good}/{len(TASK_EXPECTED)} pods placed as the map says "
        f"(see the table above and the logs in {DEMO_DIR})"
    )
    return False


def stop(api_client) -> None:
    stop_processes()
    if api_client is not None:
        webhook_registration.delete(api_client, WEBHOOK_CONFIGURATION)
        print(f"unregistered the webhook configurations {WEBHOOK_CONFIGURATION}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("start", "wait", "verdict", "stop"))
    parser.add_argument("--namespace", default="gpu-demo", help="where the check StatefulSet runs")
    parser.add_argument("--timeout", type=float, default=120, help="seconds `wait` waits for the pods")
    args = parser.parse_args(argv)
    api_client = None
    if Path(kubeconfig()).is_file():
        api_client = config.new_client_from_config(config_file=kubeconfig())
    elif args.command != "stop":
        print(f"no kubeconfig at {kubeconfig()}: run `make local-up` first", file=sys.stderr)
        return 2
    if args.command == "start":
        start(api_client, args.namespace)
    elif args.command == "wait":
        return 0 if wait(api_client, args.namespace, args.timeout) else 1
    elif args.command == "verdict":
        return 0 if verdict(api_client, args.namespace) else 1
    else:
        stop(api_client)
    return 0


if __name__ == "__main__":
    sys.exit(main())

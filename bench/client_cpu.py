"""The API client's own CPU per request, each way it can send one, against a real apiserver.

    python -m bench.client_cpu [--kubeconfig F] [--requests N] [--rounds R]

Sends N POSTs of a ConfigMap with dryRun=All (a request and an answer of the
size of the scheduler's Event, nothing stored) from one thread, through
gpu-scheduler's KubeClient:
- direct: its own HTTP/1.1 connection per thread (kube/direct.py), as the scheduler sends
  bindings and events;
- urllib3: the same client with that path turned off, through urllib3's pool (what every
  request used before, and what a proxy or unusual TLS settings still use).
The figure is this process's CPU time (user + system) per request, the median over R
rounds taken in turns, so a busy moment of the machine falls on both; the apiserver's
CPU is not in it. Prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from gpu_scheduler.kube.client import KubeClient, load_configuration

WAYS = ("direct", "urllib3")


def client_for(way: str, kubeconfig: str | None) -> KubeClient:
    return KubeClient(load_configuration(kubeconfig), pool_size=4, direct=way == "direct")


def cpu_us_per_request(client: KubeClient, requests: int) -> float:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"client-cpu-{uuid.uuid4().hex[:8]}", "namespace": "default"},
        "data": {"note": "x" * 300},
    }
    started = time.process_time()
    for _ in range(requests):
        client.call("POST", "/api/v1/namespaces/default/configmaps", query={"dryRun": "All"}, body=body)
    return (time.process_time() - started) / requests * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="the cluster (default: in-cluster, then ~/.kube/config)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per round and way (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each way once per round (default 5)")
    args = parser.parse_args(argv)
    clients = {way: client_for(way, args.kubeconfig) for way in WAYS}
    for client in clients.values():
        cpu_us_per_request(client, 50)  # connections open, code paths warm
    figures: dict[str, list[float]] = {way: [] for way in WAYS}
    for round_number in range(args.rounds):
        for way in WAYS if round_number % 2 == 0 else reversed(WAYS):
            figures[way].append(cpu_us_per_request(clients[way], args.requests))
    print(f"client CPU per request, POST with dryRun=All, {args.requests} requests x {args.rounds} rounds")
    print("| way | median us | min-max us |")
    print("|---|---|---|")
    for way in WAYS:
        print(f"| {way} | {statistics.median(figures[way]):.0f} | {min(figures[way]):.0f}-{max(figures[way]):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

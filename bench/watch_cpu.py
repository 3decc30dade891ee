"""The scheduler's own CPU per watch event: reading the stream and decoding the JSON, each way.

    python -m bench.watch_cpu [--events N] [--rounds R]

A local server (its own process, so its CPU is not counted) streams N copies of one
pod event (a bench pod as the apiserver sends it, about 2 KB) as a chunked watch
body, four chunks per write; gpu-scheduler's KubeClient.stream reads the lines and
each is decoded:
- stream: `chunked` (kube/chunked.py, what the scheduler uses) or `urllib3` (its
  line iterator, what it used before and still uses for an encoded body);
- decode: `orjson` (what the informer uses) or `json` (the standard library).
The figure is the reading thread's CPU time per event, the median over R rounds
taken in turns. No TLS: what TLS adds is the same either way. Prints a table.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time

import orjson
from gpu_scheduler.kube import client as kube_client
from kubernetes.client import Configuration

from .workload import group_leader

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
STREAMS = ("urllib3", "chunked")
DECODERS = {"json": json.loads, "orjson": orjson.loads}


def event() -> bytes:
    pod = group_leader(3, 100, 100, "gpu-scheduler", "gpu-bench")
    pod["metadata"].update(
        {"uid": "0f3c2c4e-1111-2222-3333-444455556666", "resourceVersion": "123456",
         "creationTimestamp": "2026-11-27T04:00:00Z"}
    )  # fmt: skip
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return json.dumps({"type": "MODIFIED", "object": pod}, separators=(",", ":")).encode() + b"\n"


def serve(events: int) -> None:
    """Answers every connection with the watch body, then closes it."""
    data = event()
    batch = b"%x\r\n%s\r\n" % (len(data), data) * 4
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        connection, _ = listener.accept()
        with connection, connection.makefile("rb") as request:
            while request.readline() not in (b"\r\n", b""):
                pass
            connection.sendall(HEAD)
            for _ in range(events // 4):
                connection.sendall(batch)
            connection.sendall(b"0\r\n\r\n")
            connection.shutdown(socket.SHUT_RDWR)


def read_watch(client: kube_client.KubeClient, decode, events: int) -> float:
    """CPU microseconds per event of reading one watch body."""
    started, seen = time.thread_time(), 0
    with client.stream("/api/v1/pods", {"watch": "1"}, 30.0) as lines:
        for line in lines:
            if line.strip():
                decode(line)
                seen += 1
    spent = time.thread_time() - started
    if seen != events:
        raise RuntimeError(f"read {seen} events of {events}")
    return spent / events * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watch_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per watch (a multiple of 4)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.events -= args.events % 4
    if args.serve:
        serve(args.events)
        return 0
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.watch_cpu", "--serve", "--events", str(args.events)], stdout=subprocess.PIPE
    )
    try:
        configuration = Configuration()
        configuration.host = f"http://127.0.0.1:{int(server.stdout.readline())}"
        # urllib3's line iterator is the scheduler's fallback for bodies our decoder does not take.
        clients = {
            stream: kube_client.KubeClient(configuration, pool_size=1, watch_decoder=stream == "chunked")
            for stream in STREAMS
        }
        figures: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for stream in STREAMS:
                for name, decode in DECODERS.items():
                    figures.setdefault((stream, name), []).append(read_watch(clients[stream], decode, args.events))
    finally:
        server.kill()
    print(f"{args.events:,} events of {len(event()):,} bytes, {args.rounds} rounds; CPU us per event (median, min-max)")
    print("| stream | decode | us per event |\n|---|---|---|")
    for (stream, name), values in figures.items():
        print(f"| {stream} | {name} | {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

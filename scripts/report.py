#!/usr/bin/env python3
"""`make report`: where the gpu-scheduler-check pods run, and what the ones on node3 and node4 log.

Writes Markdown (rendered from scripts/templates/report.md.j2) with
`kubectl get pod -o wide -A`, each check pod's node and CUDA_VISIBLE_DEVICES
against the task's map, and the logs of the check pods on node3 and node4.

Logs: on a node that runs containers (KinD, any real cluster) they are
`kubectl logs` of the pod's `check` container, and nothing else: when they
cannot be read, the report says so and the exit status is 1. Only on a KWOK
fake node (annotation kwok.x-k8s.io/node=fake, the local control plane's
nodes), which runs no container, does the report run `gpu-scheduler-check
--once` on this host with the environment the API server's copy of the pod
gives its `check` container (as the kubelet would: CUDA_VISIBLE_DEVICES as a
literal, or the devices the bind wrote through its fieldRef, and the other
downward-API references NODE_NAME, POD_NAME, EXPECTED_PLACEMENT resolved from
the pod), and it says so in the report.

Usage: scripts/report.py [--namespace gpu-demo] [--out .cache/report/report.md]
(KUBECONFIG names the cluster; the local cluster's when unset.) `make report`
(scripts/report.sh) chooses the cluster: KinD when it runs, else the local one.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2
from kubernetes import config

REPO = Path(__file__).resolve().parents[1]
# The e2e suite's placement check, shared with `make demo`; importable only
# once tests/ is on the path, hence the imports below the insert.
sys.path.insert(0, str(REPO / "tests"))

from e2e.cluster import env_seen, kwok_fake_nodes, list_pods, node_aliases  # noqa: E402
from e2e.placement_check import statefulset_placements, table  # noqa: E402
from e2e.workloads import TASK_EXPECTED  # noqa: E402

KUBECTL = REPO / ".cache" / "bin" / "kubectl"
CHECK = REPO / ".venv" / "bin" / "gpu-scheduler-check"
TEMPLATES = REPO / "scripts" / "templates"
LOCAL_KUBECONFIG = REPO / ".cache" / "local-cluster" / "kubeconfig"
CHECK_PODS = "app.kubernetes.io/name=gpu-scheduler-check"
CHECK_CONTAINER = "check"
LOG_NODES = ("node3", "node4")
LOG_LINES = 20


SOURCE_REAL = "kubectl logs"
SOURCE_SIMULATED = "gpu-scheduler-check --once"


@dataclass(frozen=True)
class PodLog:
    pod: str
    node: str
    source: str  # SOURCE_REAL or SOURCE_SIMULATED
    environment: dict[str, str]  # what the check ran with (simulated only)
    output: str
    error: str = ""  # why the real logs could not be read


def kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", kubeconfig, *args], check=False, capture_output=True, text=True, timeout=60
    )


def container_environment(pod: dict, container_name: str) -> dict[str, str]:
    """The env the stored pod gives one container, as the kubelet resolves it (e2e.cluster.env_seen:
    literal values and fieldRefs, the bind's devices annotation among them; "" for a key the pod lacks)."""
    return env_seen(pod, next(c for c in pod["spec"]["containers"] if c["name"] == container_name))


def real_logs(kubeconfig: str, pod: dict) -> tuple[str, str]:
    """(`kubectl logs` of the check container, "") or ("", why there are none)."""
    result = kubectl(
        kubeconfig,
        "logs",
        "-n",
        pod["metadata"]["namespace"],
        pod["metadata"]["name"],
        "-c",
        CHECK_CONTAINER,
        f"--tail={LOG_LINES}",
    )
    if result.returncode != 0:
        return "", f"kubectl logs failed: {result.stderr.strip()}"
    if not result.stdout.strip():
        return "", "kubectl logs returned nothing: the container has not logged yet"
    return result.stdout.rstrip(), ""


def simulated_logs(pod: dict) -> tuple[dict[str, str], str]:
    environment = container_environment(pod, CHECK_CONTAINER)
    result = subprocess.run(
        [str(CHECK), "--once"],
        env={"PATH": os.environ.get("PATH", ""), **environment},
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout.rstrip()
    if result.stderr.strip():
        output += "\n# stderr:\n" + result.stderr.rstrip()
    return environment, output


def collect_logs(kubeconfig: str, pods: list[dict], aliases: dict[str, str], fake_nodes: set[str]) -> list[PodLog]:
    """The logs of the check pods on LOG_NODES: real ones wherever the node runs containers."""
    logs = []
    for pod in pods:
        node = pod["spec"].get("nodeName") or ""
        if aliases.get(node, node) not in LOG_NODES:
            continue
        if node in fake_nodes:
            environment, output = simulated_logs(pod)
            logs.append(PodLog(pod["metadata"]["name"], node, SOURCE_SIMULATED, environment, output))
        else:
            output, error = real_logs(kubeconfig, pod)
            logs.append(PodLog(pod["metadata"]["name"], node, SOURCE_REAL, {}, output, error))
    return logs


def render(**context) -> str:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
    )
    return environment.get_template("report.md.j2").render(**context)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--namespace",
        default=os.environ.get("DEMO_NAMESPACE", "gpu-demo"),
        help="namespace of the gpu-scheduler-check StatefulSet (default: gpu-demo)",
    )
    parser.add_argument("--out", type=Path, default=REPO / ".cache" / "report" / "report.md")
    args = parser.parse_args(argv)
    kubeconfig = os.environ.get("KUBECONFIG") or str(LOCAL_KUBECONFIG)
    if not Path(kubeconfig).is_file():
        print(f"no kubeconfig at {kubeconfig}: run `make demo KEEP=1` first, or set KUBECONFIG", file=sys.stderr)
        return 2
    api_client = config.new_client_from_config(config_file=kubeconfig)

    pods = list_pods(api_client, args.namespace, CHECK_PODS)
    if not pods:
        print(
            f"no gpu-scheduler-check pods in namespace {args.namespace}: run `make demo KEEP=1` first", file=sys.stderr
        )
        return 1
    aliases = node_aliases(api_client)
    rows = statefulset_placements(pods, TASK_EXPECTED, aliases)
    good = sum(1 for row in rows if not row.problems())
    logs = collect_logs(kubeconfig, pods, aliases, kwok_fake_nodes(api_client))
    get_pods = kubectl(kubeconfig, "get", "pod", "-o", "wide", "-A")

    report = render(
        generated=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        server=api_client.configuration.host,
        namespace=args.namespace,
        get_pods=(get_pods.stdout or get_pods.stderr).rstrip(),
        placement_table=table(rows),
        verdict=(
            f"PASS: {good}/{len(TASK_EXPECTED)} pods placed as the map says"
            if good == len(TASK_EXPECTED) == len(rows)
            else f"FAIL: {good}/{len(TASK_EXPECTED)} pods placed as the map says"
        ),
        logs=logs,
        simulated=any(log.source == SOURCE_SIMULATED for log in logs),
        real=any(log.source == SOURCE_REAL for log in logs),
        log_nodes=" and ".join(LOG_NODES),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(f"report written to {args.out.resolve()}")
    failed = [log for log in logs if log.error]
    for log in failed:
        print(f"no logs of {log.pod} on {log.node}: {log.error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The local control plane under the benchmark: bring it up if needed, the bench namespace and nodes, cleanup."""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from .kubeapi import KubeApi
from .paths import CACHE, LOCAL_CLUSTER_DIR, REPO
from .workload import BENCH_LABEL, kwok_node, node_name

API_THREADS = 16


def cluster_answers(kubeconfig: Path) -> bool:
    if not kubeconfig.is_file():
        return False
    try:
        status, _ = KubeApi(str(kubeconfig)).request("GET", "/readyz")
    except Exception:  # noqa: BLE001 - no config, no certificate, no answer: all mean "not up"
        return False
    return status == 200


def local_script(name: str) -> None:
    """Runs scripts/<name> (local-up.sh or local-down.sh) with its output on our stderr."""
    env = {**os.environ, "CACHE_DIR": str(CACHE)}
    subprocess.run(["bash", str(REPO / "scripts" / name)], check=True, env=env, cwd=REPO)


def _parallel(function, items) -> list:
    with ThreadPoolExecutor(API_THREADS) as pool:
        return list(pool.map(function, items))


class BenchCluster:
    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    # -- namespace ------------------------------------------------------------------------------

    def create_namespace(self, timeout: float = 180) -> None:
        """A fresh bench namespace. One left by an aborted run is emptied and reused;
        one still being deleted (by the previous run's cleanup) is waited for."""
        path = f"/api/v1/namespaces/{self.namespace}"
        deadline = time.monotonic() + timeout
        while True:
            status, data = self.api.request("GET", path)
            if status == 404:
                break
            if json.loads(data).get("status", {}).get("phase") != "Terminating":
                self.delete_pods()
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {self.namespace} is still being deleted after {timeout:.0f}s")
            time.sleep(1)
        self.api.call(
            "POST",
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.namespace, "labels": {BENCH_LABEL: "true"}},
            },
        )

    def delete_namespace(self) -> None:
        self.api.call("DELETE", f"/api/v1/namespaces/{self.namespace}", ok=(404,))

    # -- nodes ----------------------------------------------------------------------------------

    def ensure_nodes(self, count: int, timeout: float = 180) -> None:
        """Nodes bn-0 .. bn-<count-1> exist, are Ready and carry no taint (so any scheduler may use them)."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        _parallel(lambda j: self.api.call("POST", "/api/v1/nodes", kwok_node(j, now), ok=(409,)), range(count))
        wanted = {node_name(j) for j in range(count)}
        deadline = time.monotonic() + timeout
        while True:
            nodes = [
                n
                for n in self.api.get("/api/v1/nodes", labelSelector=f"{BENCH_LABEL}=true")["items"]
                if n["metadata"]["name"] in wanted and _is_ready(n)
            ]
            # The apiserver taints every new node not-ready; the node lifecycle
            # controller lifts it at its own pace (minutes for 1,000 nodes at its
            # client rate), so lift it here: these nodes are Ready.
            tainted = [n for n in nodes if n["spec"].get("taints")]
            _parallel(
                lambda n: self.api.call(
                    "PATCH",
                    f"/api/v1/nodes/{quote(n['metadata']['name'])}",
                    {"spec": {"taints": None}},
                    ok=(404, 409),
                    content_type="application/merge-patch+json",
                ),
                tainted,
            )
            if len(nodes) == len(wanted) and not tainted:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {len(nodes) - len(tainted)} of {len(wanted)} bench nodes Ready and "
                    f"untainted after {timeout:.0f}s; are kwok and kube-controller-manager running? "
                    f"See {LOCAL_CLUSTER_DIR}/clusters/*/logs/"
                )
            time.sleep(0.5)

    def delete_nodes(self) -> None:
        nodes = self.api.get("/api/v1/nodes", labelSelector=f"{BENCH_LABEL}=true")["items"]
        _parallel(lambda n: self.api.call("DELETE", f"/api/v1/nodes/{quote(n['metadata']['name'])}", ok=(404,)), nodes)

    # -- pods and workloads ----------------------------------------------------------------

    def delete_pods(self, timeout: float = 600) -> float:
        """Deletes every pod of the namespace at once (grace period 0) and waits until
        none is left; returns the seconds it took."""
        started = time.monotonic()
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while True:
            pods = self.api.get(path)["items"]
            if not pods:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"{len(pods)} pods still in {self.namespace} after {timeout:.0f}s")
            _parallel(
                lambda p: self.api.call(
                    "DELETE", f"{path}/{quote(p['metadata']['name'])}?gracePeriodSeconds=0", ok=(404, 409)
                ),
                pods,
            )
            time.sleep(0.5)

    def delete_statefulset(self, name: str) -> None:
        # Background: the StatefulSet goes at once (its controller stops making
        # pods); delete_pods() then removes the pods without waiting on the GC.
        self.api.call(
            "DELETE",
            f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets/{name}?propagationPolicy=Background",
            ok=(404,),
        )


def _is_ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions") or ()
    )

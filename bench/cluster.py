"""The local control plane under the benchmark: bring it up if needed, the bench namespace and nodes, cleanup."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

from .kubeapi import KubeApi
from .workload import BENCH_LABEL, kwok_node, node_name

REPO = Path(__file__).resolve().parents[1]
LOCAL_KUBECONFIG = REPO / ".cache" / "local-cluster" / "kubeconfig"
API_THREADS = 16


def cluster_answers(kubeconfig: Path) -> bool:
    if not kubeconfig.is_file():
        return False
    try:
        status, _ = KubeApi(str(kubeconfig)).request("GET", "/readyz")
    except Exception:  # no config, no certificate, no answer: all mean "not up"
        return False
    return status == 200


def local_script(name: str) -> None:
    """Runs scripts/<name> (local-up.sh or local-down.sh) with its output on our stderr."""
    env = {**os.environ, "CACHE_DIR": str(REPO / ".cache")}
    subprocess.run(["bash", str(REPO / "scripts" / name)], check=True, env=env, cwd=REPO)


def _parallel(function, items) -> list:
    with ThreadPoolExecutor(API_THREADS) as pool:
        return list(pool.map(function, items))


class BenchCluster:
    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    # -- namespace ------------------------------------------------------------------------------

    def create_namespace(self) -> None:
        """A fresh bench namespace; one left by an aborted run is emptied and reused."""
        path = f"/api/v1/namespaces/{self.namespace}"
        status, _ = self.api.request("GET", path)
        if status == 200:
            self.delete_pods()
            return
        self.api.call("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": self.namespace, "labels": {BENCH_LABEL: "true"}}})

    def delete_namespace(self) -> None:
        self.api.call("DELETE", f"/api/v1/namespaces/{self.namespace}", ok=(404,))

    # -- nodes ----------------------------------------------------------------------------------

    def ensure_nodes(self, count: int, timeout: float = 180) -> None:
        """Nodes bn-0 .. bn-<count-1> exist and are Ready (kwok reports them so)."""
        def create(j: int) -> None:
            self.api.call("POST", "/api/v1/nodes", kwok_node(j), ok=(409,))

        _parallel(create, range(count))
        wanted = {node_name(j) for j in range(count)}
        deadline = time.monotonic() + timeout
        while True:
            nodes = self.api.get("/api/v1/nodes", labelSelector=f"{BENCH_LABEL}=true")["items"]
            ready = {n["metadata"]["name"] for n in nodes if _is_ready(n)} & wanted
            if len(ready) == len(wanted):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(ready)} of {len(wanted)} bench nodes Ready after {timeout:.0f}s; "
                                   "is kwok running? see .cache/local-cluster/clusters/*/logs/")
            time.sleep(1)

    def delete_nodes(self) -> None:
        nodes = self.api.get("/api/v1/nodes", labelSelector=f"{BENCH_LABEL}=true")["items"]
        _parallel(lambda n: self.api.call("DELETE", f"/api/v1/nodes/{quote(n['metadata']['name'])}", ok=(404,)),
                  nodes)

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
            _parallel(lambda p: self.api.call("DELETE", f"{path}/{quote(p['metadata']['name'])}?gracePeriodSeconds=0",
                                              ok=(404, 409)), pods)
            time.sleep(0.5)

    def delete_statefulset(self, name: str) -> None:
        # Background: the StatefulSet goes at once (its controller stops making
        # pods); delete_pods() then removes the pods without waiting on the GC.
        self.api.call("DELETE", f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets/{name}"
                      "?propagationPolicy=Background", ok=(404,))


def _is_ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions") or ())


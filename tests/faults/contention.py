"""Pods competing for the same GPUs under --gpu-sharing=deny while a fault test runs, and the GPU
oracle (gpu_oracle.py) reading the cluster's pod list all along.

Issue 16: "a GPU held by a live pod is never given to another" has to hold while the scheduler
is killed, fails over, is paused, loses its API server or etcd, or its watches break; a claim
like that is proven from the cluster's state, not from what the scheduler says. So every fault
test that places pods also runs a GpuContention beside its own workload:

- one contended GPU per node (node1..node4, or the nodes a test leaves free), each wanted by
  CONTENDERS_PER_GPU pods at a time, in a namespace of its own, all of the test's scheduler;
- a churner deletes each holder HOLD_SECONDS after it was seen bound and creates a new
  contender for the same GPU, so the GPUs change hands throughout the fault and the watch of
  pods on nodes stays busy;
- an oracle thread lists the live bound pods of the scheduler every ORACLE_INTERVAL and keeps
  every (node, device) it saw named by two of them (the CUDA_VISIBLE_DEVICES their containers
  see: gpu_oracle.py; here the value the webhook wrote);
- verify() stops the churn, fails on any double grant seen, and waits until every contended
  GPU has a holder again: no GPU stays free while a pod that wants it waits.

Devices are written as GPU UUIDs made up per test (GPU-<uuid>), so no earlier test's pods and
no other workload of the test (its bursts use UUIDs of their own, bursts.burst_device) can name
one: the oracle reads the contention's namespace only (a few small pods, five times a second)
and still sees every pod that can hold these GPUs. Under deny the scheduler checks the UUIDs of
a node as it checks ordinals. A contender's index is the number its name ends with
(want-<serial>-<gpu>), so the map has one line per GPU.
Pods only get CUDA_VISIBLE_DEVICES from a webhook serving the scheduler's name: the fixture
that makes a GpuContention (conftest.gpu_contention) registers one first; or, with
bind_entries, the contenders carry the README's entry and see the devices their binding wrote.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from e2e.cluster import get_json
from e2e.isolation import create_namespace, delete_namespace
from e2e.waiting import NotYet, WaitTimeout, wait_for
from e2e.workloads import bare_pod
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from .gpu_oracle import holders

NODES = ("node1", "node2", "node3", "node4")
CONTENDERS_PER_GPU = 3
# A holder is deleted this long after it was first seen bound: about two handovers per GPU
# and second, enough to keep the ledger moving without flooding a 2-core machine.
HOLD_SECONDS = 1.0
CHURN_INTERVAL = 0.25
ORACLE_INTERVAL = 0.2
REQUEST_TIMEOUT = 5


def contended_device() -> str:
    return f"GPU-{uuid.uuid4()}"


@dataclass
class OracleReport:
    """What the oracle saw, read from the API only."""

    reads: int = 0
    failed_reads: int = 0  # the API server was away (a fault test's outage)
    # (node, device) -> the pods holding it when it was first seen held twice
    double_grants: dict[tuple[str, str], list[str]] = field(default_factory=dict)


@dataclass
class ChurnReport:
    created: int = 0
    handovers: int = 0  # holders deleted so that a contender could take their GPU
    failed_requests: Counter = field(default_factory=Counter)


class GpuContention:
    """See the module's docstring. start() before the test's fault, verify() after its recovery."""

    def __init__(
        self,
        kubeconfig: str,
        api_client,
        scheduler_name: str,
        nodes: tuple[str, ...] = NODES,
        bind_entries: bool = False,
    ) -> None:
        self.scheduler_name = scheduler_name
        # Contenders with the README's entry (the devices the bind writes), for a scheduler no
        # webhook serves; else bare, for the webhook to give them their devices.
        self.bind_entries = bind_entries
        self._api_client = api_client
        self._kubeconfig = kubeconfig
        self.nodes = nodes
        self.gpus = {node: contended_device() for node in nodes}
        self._map = "".join(f"{i}={node}:{self.gpus[node]}\n" for i, node in enumerate(nodes))
        self.namespace = ""
        self._serial = 0
        self._stop = threading.Event()
        self._churning = threading.Event()
        self._threads: list[threading.Thread] = []
        self.oracle = OracleReport()
        self.churn = ChurnReport()
        self._first_seen_bound: dict[str, float] = {}

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> GpuContention:
        self.namespace = create_namespace(self._api_client, "contention")
        core = client.CoreV1Api(self._api_client)
        for node in self.nodes:
            for _ in range(CONTENDERS_PER_GPU):
                core.create_namespaced_pod(self.namespace, self._new_contender(node))
                self.churn.created += 1
        self._churning.set()
        self._threads = [
            threading.Thread(target=self._oracle_loop, name="gpu-oracle", daemon=True),
            threading.Thread(target=self._churn_loop, name="gpu-churn", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._churning.clear()
        for thread in self._threads:
            thread.join(timeout=REQUEST_TIMEOUT * 3)
        if self.namespace:
            delete_namespace(self._api_client, self.namespace)

    def verify(self, settle_timeout: float = 60.0) -> str:
        """Stops the churn, waits until each contended GPU is held again (the oracle keeps
        reading meanwhile), and fails on any GPU the oracle saw held twice. Returns a line for
        the test's report. A short test waits for a handover per GPU first: a contention in
        which no GPU changed hands would prove little."""
        wait_for(
            f"{len(self.nodes)} handovers of the contended GPUs",
            self._enough_handovers,
            settle_timeout,
            interval=0.25,
        )
        self._churning.clear()
        started = time.monotonic()
        try:
            wait_for(
                f"every contended GPU to be held while contenders wait for it ({self.namespace})",
                self._every_gpu_held,
                settle_timeout,
                interval=0.5,
            )
        except WaitTimeout:
            self._fail_on_double_grants()
            raise
        settled = time.monotonic() - started
        time.sleep(ORACLE_INTERVAL * 3)  # a last read or two after the settling
        self._fail_on_double_grants()
        if self.oracle.reads - self.oracle.failed_reads < 10:
            raise AssertionError(f"the GPU oracle read the cluster only {self.oracle.reads} times: it proves nothing")
        return (
            f"GPU oracle (--gpu-sharing=deny): {self.oracle.reads} reads of the cluster's pods "
            f"({self.oracle.failed_reads} failed while the API was away), {self.churn.handovers} handovers "
            f"among {self.churn.created} contenders for {len(self.nodes)} GPUs (churn requests failed: "
            f"{dict(self.churn.failed_requests) or 0}), no GPU held twice; every GPU held again {settled:.1f}s "
            "after the churn stopped"
        )

    # -- the oracle -------------------------------------------------------------------------

    def _oracle_loop(self) -> None:
        api = config.new_client_from_config(config_file=self._kubeconfig)
        try:
            while not self._stop.is_set():
                self._read_once(api)
                self._stop.wait(ORACLE_INTERVAL)
        finally:
            api.close()

    def _read_once(self, api) -> None:
        self.oracle.reads += 1
        try:
            held = holders(api, self.scheduler_name, self.namespace)
        except (ApiException, HTTPError, OSError, AssertionError):
            self.oracle.failed_reads += 1
            return
        for where, pods in held.items():
            if len(pods) > 1 and where not in self.oracle.double_grants:
                self.oracle.double_grants[where] = sorted(pods)

    def _fail_on_double_grants(self) -> None:
        if self.oracle.double_grants:
            shown = {f"{node}:{device}": pods for (node, device), pods in self.oracle.double_grants.items()}
            raise AssertionError(
                f"the GPU oracle saw GPUs held by two live pods of {self.scheduler_name} under deny: {shown}"
            )

    # -- the contenders ---------------------------------------------------------------------

    def _new_contender(self, node: str) -> dict:
        self._serial += 1
        name = f"want-{self._serial}-{self.nodes.index(node)}"  # its index: the line of `node`
        return bare_pod(
            name, self._map, scheduler_name=self.scheduler_name, labels={"gpu": node}, bind_entries=self.bind_entries
        )

    def _pods(self, api) -> list[dict]:
        return get_json(api, f"/api/v1/namespaces/{self.namespace}/pods")["items"]

    def _churn_loop(self) -> None:
        api = config.new_client_from_config(config_file=self._kubeconfig)
        core = client.CoreV1Api(api)
        try:
            while not self._stop.is_set():
                if self._churning.is_set():
                    try:
                        self._churn_once(core, api)
                    except (ApiException, HTTPError, OSError) as err:
                        self.churn.failed_requests[err.__class__.__name__] += 1
                self._stop.wait(CHURN_INTERVAL)
        finally:
            api.close()

    def _churn_once(self, core, api) -> None:
        now = time.monotonic()
        for pod in self._pods(api):
            name = pod["metadata"]["name"]
            if not pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            seen = self._first_seen_bound.setdefault(name, now)
            if now - seen < HOLD_SECONDS or not self._churning.is_set():
                continue
            node = pod["metadata"]["labels"]["gpu"]
            # The successor first: a contender always waits for the GPU the holder gives up.
            core.create_namespaced_pod(self.namespace, self._new_contender(node), _request_timeout=REQUEST_TIMEOUT)
            self.churn.created += 1
            core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0, _request_timeout=REQUEST_TIMEOUT)
            self.churn.handovers += 1

    def _enough_handovers(self) -> None:
        if self.churn.handovers < len(self.nodes):
            raise NotYet(f"{self.churn.handovers} handovers")

    def _every_gpu_held(self) -> None:
        try:
            pods = self._pods(self._api_client)
        except (ApiException, HTTPError, OSError) as err:
            raise NotYet(f"listing the contenders failed: {err.__class__.__name__}") from None
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        free = []
        for node in self.nodes:
            wanting = [p for p in live if p["metadata"]["labels"]["gpu"] == node]
            if wanting and not any(p["spec"].get("nodeName") for p in wanting):
                free.append(f"{node}:{self.gpus[node]} ({len(wanting)} waiting)")
        if free:
            raise NotYet(f"free while contenders wait: {', '.join(free)}")

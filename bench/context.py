"""Settings of one benchmark run, and what every phase shares (API client, cluster, webhook, clock)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cluster import BenchCluster
from .cpuwork import IDLE_SECONDS, SCALE_IDLE_SECONDS, SCALE_SETTLE_TIMEOUT_SECONDS, SETTLE_TIMEOUT_SECONDS
from .kubeapi import KubeApi
from .paths import LOCAL_CLUSTER_DIR
from .settle import baseline_cores, check_alive, wait_baseline, wait_quiet
from .webhook import Webhook

NAMESPACE = "gpu-bench"
OUR_SCHEDULER = "bench-gpu-scheduler"
# Not the webhook's schedulerName: no admission of the bench touches these pods
# (bind mode: they carry their own env entry; measure.make_runner checks with a dry run).
OUR_BIND_SCHEDULER = OUR_SCHEDULER + "-bind"
KUBE_SCHEDULER = "bench-kube-scheduler"
CEILING_SCHEDULER = "bench-ceiling"
PYTHON_BINDER_SCHEDULER = "bench-python-binder"


@dataclass(frozen=True)
class Settings:
    quick: bool
    pods: int  # pods per burst
    nodes: int  # KWOK nodes for the bursts
    group: int  # pods sharing one map text
    runs: int  # rounds of the interleaved runners
    threads: int  # concurrent create requests
    sts_replicas: int  # StatefulSet replicas = lines of its map
    admission_rates: tuple[int, ...]
    admission_seconds: float
    mem_pods: int
    mem_nodes: int
    out: Path
    phases: tuple[str, ...]
    profile: str = ""  # py-spy's view of gpu-scheduler during its runs: "" (none), "all" or "gil" (profile.py)
    runners: tuple[str, ...] = ()  # contenders keys of the throughput phase, in contenders.ALL_RUNNERS order
    modes: tuple[str, ...] = ("burst", "drain")
    admission_workloads: tuple[str, ...] = ("repeated", "distinct")
    scale: bool = False  # `make bench-scale`: the scale phase only
    scale_pods: int = 10000
    scale_nodes: int = 5000
    strict: bool = False  # exit non-zero when a target is missed (BENCH_STRICT=1)
    admission_hold_seconds: float = 60.0  # the highest admission rate is held this long
    record: bool = False  # keep the results and plot in docs/bench/ (BENCH_RECORD=1)
    webhook_workers: int = 2  # the webhook's worker processes (the chart's webhook.workers)

    @property
    def idle_s(self) -> float:
        """How long each run's idle rate is measured (cpuwork.py). At 5,000 nodes the control plane
        at rest works in bursts (node leases), which a 2 s sample catches or misses."""
        return SCALE_IDLE_SECONDS if self.scale else IDLE_SECONDS

    @property
    def settle_timeout_s(self) -> float:
        """How long a run's CPU window may wait to settle after its last bind (cpuwork.py). After
        10,000 binds the control plane works on for longer than 20 s (kwok marking the pods Running)."""
        return SCALE_SETTLE_TIMEOUT_SECONDS if self.scale else SETTLE_TIMEOUT_SECONDS

    def burst_timeout(self, pods: int) -> float:
        # kube-scheduler at its defaults binds ~50 pods/s; leave it room, but end a stuck run.
        return 60 + pods / 10

    @property
    def kind(self) -> str:
        """Which targets this run measures (performance-config.yaml's `run`)."""
        return "scale" if self.scale else "bench"

    def to_json(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


@dataclass
class Bench:
    settings: Settings
    kubeconfig: str
    api: KubeApi
    api_client: object  # kubernetes.client.ApiClient, for the webhook registration
    cluster: BenchCluster
    webhook: Webhook
    started: float = field(default_factory=time.monotonic)
    control_plane_processes: dict[str, int] = field(default_factory=dict)  # name -> pid, of the local cluster
    # The control plane's rate at rest, in cores (settle.baseline_cores), once learn_baseline() has run.
    control_plane_baseline: float | None = None

    @property
    def control_plane(self) -> list[int]:
        """The pids whose CPU is the control plane's, and which settle() waits on."""
        return list(self.control_plane_processes.values())

    @property
    def namespace(self) -> str:
        return self.cluster.namespace

    @property
    def logs(self) -> Path:
        return self.settings.out / "logs"

    def settle(self) -> dict:
        """Checks that the control plane is whole and waits for it to be back at its baseline once
        that is known (learn_baseline), else under settle.QUIET_CORES (see settle.py); what it found
        goes with the run."""
        check_alive(self.control_plane_processes, LOCAL_CLUSTER_DIR)
        if self.control_plane_baseline is None:
            waited, cores = wait_quiet(self.control_plane)
            return {"settle_waited_s": round(waited, 1), "control_plane_cores_at_start": round(cores, 2)}
        waited, cores, at_rest = wait_baseline(self.control_plane, self.control_plane_baseline)
        if waited > 4:
            self.phase(
                f"  waited {waited:.0f}s for the control plane to come back to its baseline "
                f"({cores:.2f} cores busy, baseline {self.control_plane_baseline:.2f})"
            )
        return {
            "settle_waited_s": round(waited, 1),
            "control_plane_cores_at_start": round(cores, 3),
            "control_plane_baseline": round(self.control_plane_baseline, 3),
            "at_baseline_at_start": at_rest,
        }

    def learn_baseline(self) -> float:
        """The control plane's rate at rest (settle.baseline_cores), learnt once the cluster is in
        the state it is in between runs (after measure.warm_up); every later settle() waits for it."""
        check_alive(self.control_plane_processes, LOCAL_CLUSTER_DIR)
        wait_quiet(self.control_plane)
        self.control_plane_baseline = baseline_cores(self.control_plane) if self.control_plane else 0.0
        self.phase(f"  the control plane's baseline at rest: {self.control_plane_baseline:.3f} cores")
        return self.control_plane_baseline

    def phase(self, text: str) -> None:
        """A progress line with the time since the benchmark started."""
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", file=sys.stderr, flush=True)

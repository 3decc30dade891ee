"""The product's own commands, run as users run them: `gpu-scheduler certs|webhook|scheduler`.

Nothing here imports gpu_scheduler: the suite drives the installed console
script (.venv/bin/gpu-scheduler) and talks to the processes over HTTP, so it
proves what a user gets, flags and all. Who holds a leader Lease is read from
the API server.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from .charts import REPO
from .processes import ManagedProcess, TrackedProcesses, child_pids, free_port
from .waiting import NotYet, wait_for
from .workloads import SCHEDULER_NAME

VENV_BIN = REPO / ".venv" / "bin"
GPU_SCHEDULER = VENV_BIN / "gpu-scheduler"
GPU_SCHEDULER_CHECK = VENV_BIN / "gpu-scheduler-check"
READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Certs:
    ca_file: Path
    cert_file: Path
    key_file: Path
    ca_bundle: str  # base64 of ca.crt, what a webhook configuration's caBundle holds


def make_certs(out_dir: Path, *extra: str) -> Certs:
    """Runs `gpu-scheduler certs --out-dir DIR --ip 127.0.0.1 *extra`; its stdout is the caBundle.

    The API server calls the webhook at https://127.0.0.1:PORT, so the serving
    certificate must be valid for that IP."""
    result = subprocess.run(
        [str(GPU_SCHEDULER), "certs", "--out-dir", str(out_dir), "--ip", "127.0.0.1", *extra],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        raise AssertionError(f"gpu-scheduler certs failed with {result.returncode}: {result.stderr}")
    return Certs(out_dir / "ca.crt", out_dir / "tls.crt", out_dir / "tls.key", result.stdout.strip())


class WebhookProcess(ManagedProcess):
    """`gpu-scheduler webhook` serving TLS on 127.0.0.1, where the host's kube-apiserver reaches it."""

    def __init__(
        self, certs: Certs, log_path: Path, scheduler_name: str = SCHEDULER_NAME, kubeconfig: str | None = None
    ) -> None:
        """With `kubeconfig` it reads nodes (--read-nodes), as the chart's webhook does by default."""
        self.port = free_port()
        self.certs = certs
        reads_nodes = ["--read-nodes", "true", "--kubeconfig", kubeconfig] if kubeconfig else []
        super().__init__(
            "webhook",
            [
                str(GPU_SCHEDULER),
                "webhook",
                "--tls-cert-file",
                str(certs.cert_file),
                "--tls-private-key-file",
                str(certs.key_file),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--workers",
                "2",
                "--scheduler-name",
                scheduler_name,
                "--log-format",
                "text",
                *reads_nodes,
            ],
            log_path,
        )

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start_and_wait(self, timeout: float = READY_TIMEOUT) -> WebhookProcess:
        self.start()
        self.wait_http_ok(f"{self.base_url}/readyz", timeout, ca_file=self.certs.ca_file)
        return self

    def workers(self) -> set[int]:
        """The PIDs of its worker processes, from /proc (not from its log)."""
        return child_pids(self.pid)

    def wait_workers_replaced(self, old: set[int], timeout: float = 40) -> None:
        """Until none of `old` runs and two new workers do: a new certificate is served by
        new workers, started one at a time (webhook/server.py)."""

        def replaced() -> None:
            now = self.workers()
            if now & old or len(now) != 2:
                raise NotYet(f"workers {sorted(now)}, of which still serving the old pair: {sorted(now & old)}")

        wait_for("the webhook's workers to be replaced", replaced, timeout)


@dataclass(frozen=True)
class LeaderElection:
    """The Lease the replicas compete for, and the timing flags (seconds)."""

    lease_name: str
    lease_namespace: str
    lease_duration: float = 15
    renew_deadline: float = 10
    retry_period: float = 2


class SchedulerProcess(ManagedProcess):
    """`gpu-scheduler scheduler` on the host, with its /metrics, /healthz and /readyz on a free port."""

    def __init__(
        self,
        kubeconfig: str,
        log_path: Path,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        leader_election: LeaderElection | None = None,
        name: str = "scheduler",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.metrics_port = free_port()
        argv = [
            str(GPU_SCHEDULER),
            "scheduler",
            "--kubeconfig",
            kubeconfig,
            "--scheduler-name",
            scheduler_name,
            "--metrics-port",
            str(self.metrics_port),
            "--bind-address",
            "127.0.0.1",
            "--log-format",
            "text",
            f"--leader-elect={'true' if leader_election else 'false'}",
        ]
        if leader_election:
            argv += [
                f"--leader-elect-resource-name={leader_election.lease_name}",
                f"--leader-elect-resource-namespace={leader_election.lease_namespace}",
                f"--leader-elect-lease-duration={leader_election.lease_duration:g}",
                f"--leader-elect-renew-deadline={leader_election.renew_deadline:g}",
                f"--leader-elect-retry-period={leader_election.retry_period:g}",
            ]
        # KUBECONFIG in the environment would be the flag's default; the flag
        # is explicit, so drop it to be sure which cluster is used.
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        super().__init__(name, argv, log_path, env={**env, **(extra_env or {})})

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def start_and_wait(self, timeout: float = READY_TIMEOUT) -> SchedulerProcess:
        self.start()
        self.wait_http_ok(f"{self.base_url}/readyz", timeout)
        return self

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample on /metrics, e.g. metric("gpu_scheduler_leader")."""
        with urllib.request.urlopen(f"{self.base_url}/metrics", timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        raise AssertionError(f"{self.name}: no sample {name}{labels or ''} on {self.base_url}/metrics")

    def is_leader(self) -> bool:
        return self.metric("gpu_scheduler_leader") == 1

    def pods_scheduled(self) -> int:
        """Bindings this process stored (a 409 for a pod that already had a node counts as
        result="already-bound" instead)."""
        return int(self.metric("gpu_scheduler_schedule_attempts_total", result="scheduled"))

    def identity(self, timeout: float = 10) -> str:
        """The identity the process logged at start ("scheduler started ... identity=..."): its
        name in the Lease and in the User-Agent of every request it makes (so in audit logs)."""

        def logged() -> str:
            match = re.search(r"scheduler started .*?\bidentity=(\S+)", self.log_path.read_text(errors="replace"))
            if match is None:
                raise NotYet("no 'scheduler started' line with an identity yet")
            return match.group(1)

        return wait_for(f"{self.name} to log its identity", logged, timeout)


@contextmanager
def started_schedulers(
    kubeconfig: str, log_dir: Path, tracked: TrackedProcesses
) -> Iterator[Callable[..., SchedulerProcess]]:
    """start(name, *extra_flags, wait=True, **SchedulerProcess options) -> a scheduler process of one
    test, started (and ready, with wait); each is stopped at the end unless the test killed it
    already. Extra flags go after the suite's own ones (argparse keeps the last value)."""
    started: list[SchedulerProcess] = []

    def start(name: str = "scheduler", *extra_flags: str, wait: bool = True, **options) -> SchedulerProcess:
        process = SchedulerProcess(kubeconfig, log_dir / f"{name}.log", name=name, **options)
        process.argv += list(extra_flags)
        started.append(tracked.track(process))
        return process.start_and_wait() if wait else process.start()

    try:
        yield start
    finally:
        for process in started:
            process.stop()
            tracked.untrack(process)


def lease_holder(api_client, election: LeaderElection) -> str:
    """The holderIdentity of the election's Lease, as the API server stores it ("" if none)."""
    try:
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease(
            election.lease_name, election.lease_namespace
        )
    except ApiException as err:
        if err.status == 404:
            return ""
        raise
    return lease.spec.holder_identity or ""


def wait_holds_lease(
    api_client, election: LeaderElection, replica: SchedulerProcess, timeout: float, interval: float = 0.2
) -> None:
    """Until the Lease (read from the API server, not from the replica) names `replica` as holder."""
    identity = replica.identity()

    def holds() -> None:
        holder = lease_holder(api_client, election)
        if holder != identity:
            raise NotYet(f"the Lease is held by {holder or 'nobody'}, not {replica.name} ({identity})")

    wait_for(f"{replica.name} to hold the Lease", holds, timeout, interval)


def start_replicas(
    api_client,
    start_scheduler: Callable[..., SchedulerProcess],
    scheduler_name: str,
    election: LeaderElection,
    *flags: str,
    **options,
) -> tuple[SchedulerProcess, SchedulerProcess]:
    """Two replicas of the scheduler for `scheduler_name` (replica-0, replica-1, with `flags` and
    SchedulerProcess `options`), competing for the election's Lease; once the Lease names one of
    them: (its holder, the other). The Lease is read from the API server: what a replica says of
    itself (its gpu_scheduler_leader gauge) is what the leader tests judge, not their oracle."""
    replicas = [
        start_scheduler(f"replica-{i}", *flags, scheduler_name=scheduler_name, leader_election=election, **options)
        for i in (0, 1)
    ]
    identities = {r.identity(): r for r in replicas}

    def held() -> SchedulerProcess:
        holder = lease_holder(api_client, election)
        if holder not in identities:
            raise NotYet(f"the Lease is held by {holder or 'nobody'}, not by a replica")
        return identities[holder]

    leader = wait_for("the Lease to name a replica", held, election.lease_duration + 10)
    (standby,) = (r for r in replicas if r is not leader)
    return leader, standby

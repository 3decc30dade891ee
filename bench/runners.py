"""The contenders: each is a process that binds the pods of its own schedulerName.

Only the runner under test runs during a burst: an idle kube-scheduler would
still process every pod event of the namespace and take CPU from the others.
Each runner is started and found ready before the clock starts, and stopped
after its pods are bound.

All of them run under the same conditions but for what is compared (client
settings, kube-scheduler's profile):
- scope: every namespace. kube-scheduler cannot be narrowed to one, so
  gpu-scheduler gets no --namespace and the bare binders list and watch
  /api/v1/pods (each binding goes to its pod's own namespace);
- leader election: on for every scheduler, as in production, each on its own
  Lease in the bench namespace with the same timing (contenders.py), deleted
  before it starts so that it takes the lease at once; a scheduler is ready
  once it holds it. The bare binders elect no leader: they are the ceiling,
  not schedulers (a renewal every 2 s is a few requests in a run).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import kube_scheduler
from .contenders import (
    BIND_WORKERS,
    CEILING,
    CEILING_WORKERS,
    KUBE_DEFAULTS,
    KUBE_PINNED,
    LABELS,
    LEASE_DURATION_SECONDS,
    OUR_BURST,
    OUR_QPS,
    OURS_BIND,
    PYTHON_BINDER,
    RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS,
    lease_name,
)
from .kubeapi import KubeApi
from .paths import BIN, GPU_SCHEDULER, REPO
from .processes import Process, http_ok, insecure_context, peak_rss_mib

# What bench/tools/ceiling prints once its first list is done.
CEILING_READY_LINE = "ceiling binder ready"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def lease_path(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


def clear_lease(api: KubeApi, namespace: str, name: str) -> None:
    """Deletes the Lease, so that the next scheduler on it takes it at once (not after a
    previous holder's lease duration)."""
    api.call("DELETE", lease_path(namespace, name), ok=(404,))


def lease_held(api: KubeApi, namespace: str, name: str) -> bool:
    """Whether someone holds the Lease: after clear_lease(), the scheduler just started."""
    status, data = api.request("GET", lease_path(namespace, name))
    return status == 200 and bool((json.loads(data).get("spec") or {}).get("holderIdentity"))


@dataclass
class Runner:
    key: str
    scheduler_name: str
    process: Process
    ready: Callable[[], bool]
    metrics_url: str = ""  # gpu-scheduler only: its /metrics
    # kube-scheduler exits 1 when it loses its lease or stops unelected; a SIGTERM'd leader exits 0.
    clean_exits: tuple[int, ...] = (0, -15)
    before_start: Callable[[], None] = lambda: None

    @property
    def label(self) -> str:
        return LABELS[self.key]

    def launch(self) -> None:
        """Starts the process (after what it needs first: a free Lease), without waiting."""
        self.before_start()
        self.process.start()

    def start(self) -> float:
        """Starts the process and waits until it is ready; returns the seconds that took."""
        self.launch()
        return self.wait_ready()

    def wait_ready(self) -> float:
        return self.process.wait_ready(self.ready, timeout=90)

    def peak_rss_mib(self) -> float | None:
        return peak_rss_mib(self.process.pid)

    def stop(self) -> None:
        code = self.process.stop()
        if code is not None and code not in self.clean_exits:
            print(f"    warning: {self.process.name} exited with {code}; see {self.process.log_path}", file=sys.stderr)


def ours(
    api: KubeApi, kubeconfig: str, lease_namespace: str, logs: Path, scheduler_name: str, key: str = OURS_BIND
) -> Runner:
    """gpu-scheduler as in production: every namespace, leader election on, its default workers and
    client settings (given explicitly, so that the bench's labels and the Python binder's threads
    say the truth), under a scheduler_name the webhook does not match: its pods carry their own env
    entry and get their devices from the Binding (contenders.OURS_BIND: no admission at all).

    --gpu-sharing=allow because the bench's maps share GPUs once there are
    more pods than nodes x 8 (see workload.placement), and sharing is not what
    is measured.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = Process(
        "gpu-scheduler",
        [
            str(GPU_SCHEDULER),
            "scheduler",
            "--kubeconfig",
            kubeconfig,
            "--scheduler-name",
            scheduler_name,
            "--gpu-sharing",
            "allow",
            "--leader-elect",
            "true",
            "--leader-elect-lease-duration",
            str(LEASE_DURATION_SECONDS),
            "--leader-elect-renew-deadline",
            str(RENEW_DEADLINE_SECONDS),
            "--leader-elect-retry-period",
            str(RETRY_PERIOD_SECONDS),
            "--leader-elect-resource-name",
            lease_name(key),
            "--leader-elect-resource-namespace",
            lease_namespace,
            "--workers",
            str(BIND_WORKERS),
            "--kube-api-qps",
            str(OUR_QPS),
            "--kube-api-burst",
            str(OUR_BURST),
            "--metrics-port",
            str(port),
            "--bind-address",
            "127.0.0.1",
        ],
        logs / f"gpu-scheduler-{key}.log",
    )

    def ready() -> bool:
        # Caches synced, and the lease is ours: it binds from the first pod on.
        return http_ok(f"{base}/readyz") and http_ok(f"{base}/metrics", contains=b"\ngpu_scheduler_leader 1.0")

    return Runner(
        key,
        scheduler_name,
        process,
        ready,
        metrics_url=f"{base}/metrics",
        before_start=lambda: clear_lease(api, lease_namespace, lease_name(key)),
    )


def kube(api: KubeApi, key: str, kubeconfig: str, lease_namespace: str, logs: Path, scheduler_name: str) -> Runner:
    """kube-scheduler at its default client settings, or at ours with its default profile or
    the pinned-pod one (kube_scheduler.py); ready once it holds its Lease (its /readyz does not
    wait for the election)."""
    qps, burst = (None, None) if key == KUBE_DEFAULTS else (OUR_QPS, OUR_BURST)
    profile = kube_scheduler.PINNED_PROFILE if key == KUBE_PINNED else kube_scheduler.DEFAULT_PROFILE
    lease = (lease_namespace, lease_name(key))
    config = kube_scheduler.scheduler_configuration(kubeconfig, scheduler_name, lease, qps, burst, profile)
    config_path = logs / f"{key}-config.yaml"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    process = Process(
        f"kube-scheduler ({key})",
        [
            str(BIN / "kube-scheduler"),
            "--config",
            str(config_path),
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(port),
        ],
        logs / f"{key}.log",
    )
    context = insecure_context()
    return Runner(
        key,
        scheduler_name,
        process,
        lambda: http_ok(f"https://127.0.0.1:{port}/readyz", context) and lease_held(api, *lease),
        clean_exits=(0, 1, -15),
        before_start=lambda: clear_lease(api, *lease),
    )


def python_binder(kubeconfig: str, logs: Path, scheduler_name: str) -> Runner:
    from .bare_binder import READY_LINE

    process = Process(
        "python binder",
        [
            sys.executable,
            "-m",
            "bench.bare_binder",
            "--kubeconfig",
            kubeconfig,
            "--scheduler-name",
            scheduler_name,
            "--threads",
            str(BIND_WORKERS),
        ],
        logs / "python-binder.log",
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return Runner(PYTHON_BINDER, scheduler_name, process, lambda: READY_LINE in process.output())


def ceiling(api: KubeApi, logs: Path, scheduler_name: str) -> Runner:
    """The Go bare binder (bench/tools/ceiling), given the kubeconfig's credentials as flags."""
    config = api.configuration
    argv = [
        str(BIN / "bench-ceiling"),
        "--server",
        config.host,
        "--scheduler-name",
        scheduler_name,
        "--workers",
        str(CEILING_WORKERS),
    ]
    for flag, value in (
        ("--ca-file", config.ssl_ca_cert),
        ("--client-cert-file", config.cert_file),
        ("--client-key-file", config.key_file),
    ):
        if value:
            argv += [flag, value]
    token = config.get_api_key_with_prefix("BearerToken", alias="authorization") or ""
    if token.startswith("Bearer "):
        argv += ["--token", token.removeprefix("Bearer ")]
    if not config.verify_ssl:
        argv.append("--insecure-skip-tls-verify")
    process = Process("ceiling", argv, logs / "ceiling.log")
    return Runner(CEILING, scheduler_name, process, lambda: CEILING_READY_LINE in process.output())

"""A real KinD cluster for the `kind` tests: brought up with `make kind-up`, as users do.

The tests use their own cluster name (KIND_TEST_CLUSTER, default
gpu-scheduler-kind-test) and kubeconfig, so they never touch a cluster a user
made with `make kind-up`. `make test` brings that cluster up first for `make
e2e` and `make report`, and these tests then reuse it; since the docker
network `kind` exists by then, it tells them whether it existed before its
`make kind-up` (KIND_TEST_NETWORK_EXISTED_BEFORE=0|1, read from Docker), so
that the last test can still prove `make kind-down` removes what `up` made.
Where no Docker engine answers they are skipped with a message that says
what to install; under CI=true they fail instead (and
scripts/docker-engine.sh may start an engine first, as `make kind-up` does).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import commands
import pytest
from e2e.cluster import Kubectl
from e2e.waiting import wait_until
from prerequisites import missing

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
KUBECTL = CACHE / "bin" / "kubectl"
CLUSTER = os.environ.get("KIND_TEST_CLUSTER", "gpu-scheduler-kind-test")
KUBECONFIG = CACHE / "kind" / f"{CLUSTER}.kubeconfig"
# A cold first run builds kind, the node image's binaries and CoreDNS.
UP_TIMEOUT = 3600


# KinD and Argo CD commands take minutes, not the default two.
run = functools.partial(commands.run, timeout=300)
tail = commands.tail


def kind_env() -> dict[str, str]:
    return {**os.environ, "KIND_CLUSTER": CLUSTER, "KIND_KUBECONFIG": str(KUBECONFIG)}


def make(target: str, timeout: float = UP_TIMEOUT) -> subprocess.CompletedProcess:
    return run(["make", "--no-print-directory", target], timeout=timeout, cwd=REPO, env=kind_env())


def cluster_containers() -> list[str]:
    """Names of the Docker containers kind made for the test cluster (any state)."""
    found = run(["docker", "ps", "-a", "--filter", f"label=io.x-k8s.kind.cluster={CLUSTER}", "--format", "{{.Names}}"])
    assert found.returncode == 0, tail(found)
    return sorted(found.stdout.split())


def docker_network_exists(name: str) -> bool:
    return run(["docker", "network", "inspect", name]).returncode == 0


@dataclass
class Kind(Kubectl):
    """The test cluster: kubectl against it, and how it was made."""

    network_existed_before: bool
    up_seconds: float

    def apply(self, manifest: dict, namespace: str) -> None:
        self.ok("apply", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))

    def namespace(self, name: str) -> str:
        self.ok("create", "namespace", name)
        return name

    def wait_for(self, what: str, predicate, timeout: float = 180, interval: float = 1.0):
        """Polls `predicate` until it returns a truthy value (the pace of a real cluster: once a second)."""
        return wait_until(what, predicate, timeout, interval)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker engine that answers, or a skip (a failure under CI=true) saying what to install."""
    ensure = run(["bash", REPO / "scripts" / "docker-engine.sh", "ensure"], timeout=600)
    if ensure.returncode == 0:
        return
    missing(f"the KinD tests need a Docker engine (https://docs.docker.com/engine/install/): {ensure.stderr.strip()}")


@pytest.fixture(scope="session")
def kubectl_binary(docker_engine) -> Path:
    if not KUBECTL.exists():
        fetched = run(["bash", REPO / "scripts" / "fetch-tools.sh"], timeout=600)
        assert KUBECTL.exists(), f"scripts/fetch-tools.sh did not provide {KUBECTL}: {tail(fetched)}"
    return KUBECTL


@pytest.fixture(scope="session")
def kind(kubectl_binary) -> Kind:
    """`make kind-up` for the test cluster (reused when it exists); `make kind-down` after, also after a failure.

    One cluster for the session: every module's tests use it, the upgrade's first (it leaves the
    release the others use), test_kind_cluster's last (its last test is `make kind-down`).

    KIND_TEST_KEEP_CLUSTER=1 (make test: its pipeline stage uses the cluster
    next, and its own last test is `make kind-down`) keeps it afterwards.
    """
    measured = os.environ.get("KIND_TEST_NETWORK_EXISTED_BEFORE")
    network_existed = measured == "1" if measured in ("0", "1") else docker_network_exists("kind")
    started = time.monotonic()
    up = make("kind-up")
    up_seconds = time.monotonic() - started
    print(f"\nmake kind-up: {up_seconds:.0f}s\n{up.stderr[-3000:]}")
    cluster = Kind(KUBECONFIG, network_existed, up_seconds)
    try:
        assert up.returncode == 0, f"make kind-up failed: {tail(up, 8000)}"
        yield cluster
    finally:
        if os.environ.get("KIND_TEST_KEEP_CLUSTER") != "1" and cluster_containers():
            make("kind-down", timeout=300)


def pinned_pod(
    name: str, node: str, devices: str, image: str = os.environ.get("CHECK_IMAGE", "gpu-scheduler-check:dev")
) -> dict:
    """A bare pod of the scheduler pinned by a one-line map, running the check image kind.sh loaded."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpu-scheduling-map": f"0={node}:{devices}\n"}},
        "spec": {
            "schedulerName": "gpu-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "check", "image": image, "imagePullPolicy": "IfNotPresent"}],
        },
    }

"""Fixtures shared by every test folder: where the real API server is, and how to reach it;
the fake NVML library.

Tests marked `cluster`, `e2e` or `faults` run against the cluster that
KUBECONFIG names (a KinD cluster, say) or, when it is unset, the local control
plane at .cache/local-cluster/kubeconfig that `make local-up` starts. When no
cluster answers they fail under CI=true and are skipped elsewhere, with a
message that says what to run.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from fake_nvml import library
from prerequisites import missing

REPO = Path(__file__).resolve().parent
LOCAL_KUBECONFIG = REPO / ".cache" / "local-cluster" / "kubeconfig"
BIN = REPO / ".cache" / "bin"


def _no_cluster(reason: str) -> None:
    missing(f"{reason}; run `make local-up` (needs Go 1.26+ to build the control plane) or set KUBECONFIG")


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    """Path of a kubeconfig whose API server answers."""
    path = os.environ.get("KUBECONFIG") or str(LOCAL_KUBECONFIG)
    if not Path(path).is_file():
        _no_cluster(f"no kubeconfig at {path}")
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=path)
    try:
        client.VersionApi(api_client).get_code(_request_timeout=5)
    except Exception as err:  # noqa: BLE001 - any failure to connect means the same thing here
        _no_cluster(f"the API server of {path} does not answer ({err.__class__.__name__}: {err})")
    finally:
        api_client.close()
    return path


@pytest.fixture(scope="session")
def api_client(kubeconfig):
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    yield api
    api.close()


@pytest.fixture
def namespace(api_client):
    """A fresh namespace for one test, deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"gpu-scheduler-test": "true"}}})
    yield name
    core.delete_namespace(name, grace_period_seconds=0, propagation_policy="Background")


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory) -> Path:
    """The folder of the fake libnvidia-ml.so.1 (tests/fake_nvml), built on this host once per
    session: for LD_LIBRARY_PATH, or to mount into an image."""
    return library.build(tmp_path_factory.mktemp("fake-nvml"))


# Files that appear in the checkout's top folder while a test runs are named
# with the test in the summary: CI twice met an empty file named with random
# bytes there, written by a test not yet found (the Argo CD e2e served the
# checkout and failed on its name).
_APPEARED: list[str] = []


@pytest.fixture(autouse=True)
def _note_files_appearing_in_the_checkout(request):
    before = set(os.listdir(os.fsencode(REPO)))
    yield
    new = set(os.listdir(os.fsencode(REPO))) - before
    if new:
        _APPEARED.append(f"{request.node.nodeid}: {sorted(new)}")


def pytest_terminal_summary(terminalreporter):
    if _APPEARED:
        terminalreporter.section("files that appeared in the checkout's top folder during a test")
        for line in _APPEARED:
            terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """JUNIT_DIR (set by .gitlab-ci.yml): each pytest run writes its JUnit report there.

    A CI job runs pytest several times (test-cluster: cluster, e2e and faults
    in turn), so each run gets a file of its own, named after the job and the
    process; an explicit --junitxml wins. Runs before pytest's junitxml plugin
    reads the option.
    """
    directory = os.environ.get("JUNIT_DIR")
    if directory and not config.option.xmlpath and not hasattr(config, "workerinput"):
        Path(directory).mkdir(parents=True, exist_ok=True)
        job = os.environ.get("CI_JOB_NAME", "pytest")
        config.option.xmlpath = str(Path(directory) / f"{job}-{os.getpid()}.xml")

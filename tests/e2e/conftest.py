"""Fixtures of the e2e suite: the real webhook and scheduler processes, and fresh namespaces.

Locally (the default) the suite runs the product on this host against the
cluster the root conftest's `kubeconfig` names: `gpu-scheduler certs`, then
`gpu-scheduler webhook` over TLS on 127.0.0.1 (registered with the API
server with the chart's own webhook configurations) and `gpu-scheduler
scheduler`. They start with the first e2e test and stop after the last one.

With E2E_USE_INSTALLED=1 (set by `make e2e`, whose KinD cluster has the
charts installed) nothing is started: the installed Deployments do the work,
and the tests marked `local_only` are skipped, since they need this host's
processes or KWOK. The tests marked `installed_only` read the installed
release (E2E_RELEASE in E2E_RELEASE_NAMESPACE) and are skipped without it;
tests that take the `containers_run` fixture need nodes that run containers
and are skipped on KWOK nodes. `make test` runs the suite both ways, so each
test runs in one of its two stages.

When a test fails, the last lines of every process's log are added to its report.
"""

from __future__ import annotations

import os

import pytest
from kubernetes import client

from . import webhook_registration
from .cluster import delete_fake_node, kwok_fake_nodes
from .components import SchedulerProcess, WebhookProcess, make_certs, started_schedulers
from .isolation import RUN_ID, create_namespace, delete_namespace
from .processes import TrackedProcesses

USE_INSTALLED = os.environ.get("E2E_USE_INSTALLED") == "1"
# The gpu-scheduler release `make e2e` installed (scripts/kind.sh).
INSTALLED_RELEASE = os.environ.get("E2E_RELEASE") or "gpu-scheduler"
INSTALLED_NAMESPACE = os.environ.get("E2E_RELEASE_NAMESPACE") or "gpu-scheduler-system"

_tracked = TrackedProcesses()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "local_only: needs the scheduler/webhook processes of this host or KWOK nodes; "
        "skipped when E2E_USE_INSTALLED=1",
    )
    config.addinivalue_line(
        "markers",
        "installed_only: reads the release `make e2e` installed with helm (its hooks' work); "
        "skipped unless E2E_USE_INSTALLED=1",
    )


LOCAL_ONLY = pytest.mark.skip(
    reason="E2E_USE_INSTALLED=1: this test drives processes on this host or KWOK nodes, "
    "which the installed cluster does not have; it runs in `make test`"
)
INSTALLED_ONLY = pytest.mark.skip(
    reason="needs the charts installed with helm on a cluster that runs containers: "
    "it runs in `make e2e` (KinD), and in the KinD stage of `make test`"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # At collection, not in a fixture: a skipped test's module-scoped fixtures (KWOK nodes,
    # say) must not run either.
    for item in items:
        if USE_INSTALLED and item.get_closest_marker("local_only"):
            item.add_marker(LOCAL_ONLY)
        if not USE_INSTALLED and item.get_closest_marker("installed_only"):
            item.add_marker(INSTALLED_ONLY)


@pytest.fixture(scope="session")
def containers_run(api_client) -> None:
    """Skips a test on KWOK fake nodes (the local control plane), which run no container."""
    fake = kwok_fake_nodes(api_client)
    if fake:
        pytest.skip(
            f"the nodes {', '.join(sorted(fake))} are KWOK fakes and run no container: "
            "this test runs in `make e2e` (KinD), and in the KinD stage of `make test`"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    _tracked.add_log_tails(report)
    return report


@pytest.fixture(scope="package")
def e2e_dir(tmp_path_factory):
    """Certificates and process logs of this run."""
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="package")
def webhook(api_client, kubeconfig, e2e_dir):
    """The webhook, registered and answering; None when the installed one is used."""
    if USE_INSTALLED:
        yield None
        return
    certs = make_certs(e2e_dir / "certs")
    process = _tracked.track(WebhookProcess(certs, e2e_dir / "webhook.log", kubeconfig=kubeconfig))
    name = f"gpu-scheduler-e2e-{RUN_ID}"
    try:
        process.start_and_wait()
        with webhook_registration.registered(api_client, name, process.base_url, certs.ca_bundle):
            yield process
    finally:
        process.stop()


@pytest.fixture(scope="package")
def scheduler(kubeconfig, e2e_dir):
    """`gpu-scheduler scheduler` for schedulerName gpu-scheduler; None when the installed one is used."""
    if USE_INSTALLED:
        yield None
        return
    process = _tracked.track(SchedulerProcess(kubeconfig, e2e_dir / "scheduler.log"))
    try:
        yield process.start_and_wait()
    finally:
        process.stop()


@pytest.fixture
def product(webhook, scheduler):
    """The webhook and the scheduler for schedulerName gpu-scheduler, both running."""
    for process in (webhook, scheduler):
        if process is not None and not process.alive():
            pytest.fail(f"{process.name} exited with {process.exit_code()}; its log:\n{process.log_tail()}")
    return webhook, scheduler


@pytest.fixture
def new_namespace(api_client):
    """Creates fresh namespaces for one test (deleted after it): new_namespace(prefix, labelled=True).

    A namespace created with labelled=False is outside the local webhook's
    reach until isolation.bring_under_webhook() labels it."""
    created: list[str] = []

    def create(prefix: str = "e2e", labelled: bool = True) -> str:
        created.append(create_namespace(api_client, prefix, labelled))
        return created[-1]

    yield create
    for name in created:
        delete_namespace(api_client, name)


@pytest.fixture
def ns(new_namespace) -> str:
    return new_namespace()


@pytest.fixture
def start_scheduler(kubeconfig, tmp_path):
    """Starts extra scheduler processes for one test: start_scheduler(name, scheduler_name=..., leader_election=...).

    Each is stopped (SIGTERM) after the test unless the test killed it already."""
    with started_schedulers(kubeconfig, tmp_path, _tracked) as start:
        yield start


@pytest.fixture
def kwok_nodes(api_client):
    """Creates KWOK nodes for one test and deletes them after it, with every pod bound to them."""
    core = client.CoreV1Api(api_client)
    created: list[str] = []

    def create(node: dict) -> None:
        core.create_node(node)
        created.append(node["metadata"]["name"])

    yield create
    for name in created:
        delete_fake_node(api_client, name)

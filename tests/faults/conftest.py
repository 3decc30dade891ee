"""Fixtures of the fault suite: the product's real processes, the control plane's processes, namespaces.

The product runs as in the e2e suite (whose helpers are imported, not copied):
`gpu-scheduler certs`, `gpu-scheduler webhook` under granian over TLS on
127.0.0.1, registered with the chart's own webhook configurations, and
`gpu-scheduler scheduler` processes that tests start, kill and restart.

Tests that crash, restart or pause something every user of the cluster depends on
(kube-apiserver, etcd, kwok-controller, a webhook registered for all namespaces)
carry the marker `disrupts_cluster`: they run after every other test of the
session (so a slow recovery can never fail someone else's test), and each
leaves the cluster healthy: every component running, /readyz ok, every node Ready.

When a test fails, the last lines of every process it started are added to its report.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import pytest
from e2e import webhook_registration
from e2e.components import WebhookProcess, make_certs, started_schedulers
from e2e.isolation import RUN_ID, create_namespace, delete_namespace
from e2e.processes import TrackedProcesses
from e2e.workloads import SCHEDULER_NAME
from prerequisites import missing

from .api_proxy import ApiProxy
from .audit import AuditLog
from .contention import NODES, GpuContention
from .control_plane import LocalControlPlane, NotALocalCluster

DISRUPTS = "disrupts_cluster"

# The processes whose logs a failed test's report shows; tests start and stop their own with
# track() and untrack().
tracked = TrackedProcesses()
track, untrack = tracked.track, tracked.untrack


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{DISRUPTS}: crashes, restarts or pauses what the whole cluster depends on; runs last in the session",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: everything else keeps its order, these go to the end.
    items.sort(key=lambda item: item.get_closest_marker(DISRUPTS) is not None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    tracked.add_log_tails(report)
    return report


@pytest.fixture(scope="package")
def faults_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="package")
def certs(faults_dir):
    return make_certs(faults_dir / "certs")


@pytest.fixture(scope="package")
def webhook(api_client, certs, faults_dir):
    """The webhook, registered as the chart renders it but only for namespaces labelled
    RUN_LABEL=RUN_ID (what `ns` creates), so other suites sharing the cluster never meet it."""
    process = track(WebhookProcess(certs, faults_dir / "webhook.log"))
    name = f"gpu-scheduler-faults-{RUN_ID}"
    try:
        process.start_and_wait()
        with webhook_registration.registered(api_client, name, process.base_url, certs.ca_bundle):
            yield process
    finally:
        process.stop()
        untrack(process)


@pytest.fixture
def ns(api_client):
    """A fresh namespace under the webhook's reach, deleted after the test."""
    name = create_namespace(api_client, "faults")
    yield name
    delete_namespace(api_client, name)


@pytest.fixture
def proxy(kubeconfig, certs):
    """A fault-injecting proxy in front of the real API server (api_proxy.py), stopped after the test."""
    with ApiProxy(kubeconfig, certs) as running:
        yield running


@pytest.fixture
def scheduler_name() -> str:
    """A schedulerName of this test only: its scheduler sees no other test's pods."""
    return f"faults-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def start_scheduler(kubeconfig, tmp_path):
    """Starts scheduler processes for one test:
    start_scheduler(name, *extra_flags, scheduler_name=..., leader_election=...).

    Extra flags go after the e2e suite's ones (argparse keeps the last value).
    Each is stopped after the test unless the test killed it already."""
    with started_schedulers(kubeconfig, tmp_path, tracked) as start:
        yield start


@pytest.fixture
def webhook_serving(api_client, certs, tmp_path, request):
    """webhook_serving(scheduler_name): makes the pods of that scheduler in this run's namespaces
    go through our webhook, as users' pods do (CUDA_VISIBLE_DEVICES, the placement annotation):
    the package's webhook for gpu-scheduler, else one started and registered for this test
    (the chart's configurations with that schedulerName), removed after the test."""
    with ExitStack() as stack:

        def serve(scheduler_name: str) -> None:
            if scheduler_name == SCHEDULER_NAME:
                request.getfixturevalue("webhook")
                return
            process = track(WebhookProcess(certs, tmp_path / f"webhook-{scheduler_name}.log", scheduler_name))
            stack.callback(untrack, process)
            stack.callback(process.stop)
            process.start_and_wait()
            stack.enter_context(
                webhook_registration.registered(
                    api_client, f"gpu-scheduler-{scheduler_name}", process.base_url, certs.ca_bundle, scheduler_name
                )
            )

        yield serve


@pytest.fixture
def gpu_contention(kubeconfig, api_client, webhook_serving):
    """gpu_contention(scheduler_name, nodes=NODES, bind_entries=False) -> a started GpuContention
    (contention.py): pods of that scheduler competing for one GPU of each node, and the GPU oracle
    reading the cluster meanwhile. The webhook serves that scheduler first (webhook_serving), so
    the contenders and the test's own pods in `ns` get CUDA_VISIBLE_DEVICES; with bind_entries no
    webhook serves it, and the contenders carry the README's entry (the devices the bind writes).
    Stopped after the test."""
    with ExitStack() as stack:

        def start(scheduler_name: str, nodes: tuple[str, ...] = NODES, bind_entries: bool = False) -> GpuContention:
            if not bind_entries:
                webhook_serving(scheduler_name)
            contention = GpuContention(kubeconfig, api_client, scheduler_name, nodes, bind_entries)
            stack.callback(contention.stop)
            return contention.start()

        yield start


@pytest.fixture(scope="session")
def control_plane(kubeconfig):
    """The local control plane's processes; the restart tests need them on this host."""
    try:
        plane = LocalControlPlane(kubeconfig)
    except NotALocalCluster as err:
        missing(f"fault tests that restart the control plane need the local cluster (make local-up): {err}")
    return plane


@pytest.fixture(scope="session")
def audit_log(control_plane):
    """The API server's audit log of pods/binding requests: the oracle for double binds."""
    return AuditLog(control_plane.log_file("audit"))


@pytest.fixture
def healthy_afterwards(control_plane):
    """Whatever the test did to the control plane, it is whole again when the test ends."""
    yield control_plane
    for component in control_plane.launches:
        if control_plane.running(component):
            control_plane.resume(component)  # in case the test stopped with it paused
    revived = control_plane.revive()
    seconds = control_plane.wait_healthy()
    print(f"\ncontrol plane healthy {seconds:.1f}s after the test" + (f"; restarted {revived}" if revived else ""))

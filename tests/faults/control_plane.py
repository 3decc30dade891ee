"""The local control plane's own processes (etcd, kube-apiserver, kube-controller-manager,
kwok-controller): crashed, stopped, paused and started again by PID, as kwokctl starts them.

Everything is found from the kubeconfig: its CA file is <cluster dir>/pki/ca.crt,
and in <cluster dir> kwokctl keeps each component's command (kwok.yaml), PID
(pids/<component>.pid) and output (logs/<component>.log). A start runs that
command again, appends to the same log and writes the new PID to the same pid
file, so `make local-down` (and kwokctl) still find the process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from e2e.cluster import current_cluster_and_user
from e2e.waiting import NotYet, wait_for
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

STOP_TIMEOUT = 30.0
# A component that fails to start (a port in use) exits within a second.
EARLY_EXIT_SECONDS = 1.5
START_RETRY_SECONDS = 60.0
CONTROLLERS_GRACE = 10.0
# A kube-apiserver starting on a busy 2-core machine needs 10-20 s to be ready.
READY_TIMEOUT = 120.0


class NotALocalCluster(Exception):
    """The kubeconfig names a cluster whose processes do not run on this host (KinD, a real one)."""


def cluster_dir(kubeconfig: str) -> Path:
    """<cluster dir> of the kubeconfig's current cluster, from the path of its CA file."""
    cluster, _ = current_cluster_and_user(kubeconfig)
    ca_file = cluster["cluster"].get("certificate-authority")
    if not ca_file:
        raise NotALocalCluster(f"{kubeconfig}: cluster {cluster['name']} has no certificate-authority file")
    directory = Path(ca_file).resolve().parent.parent
    if not (directory / "pids").is_dir():
        raise NotALocalCluster(f"{kubeconfig}: {directory} has no pids/ directory of kwokctl")
    return directory


def _proc_strings(pid: int, name: str) -> list[str]:
    raw = Path(f"/proc/{pid}/{name}").read_bytes()
    return [item.decode(errors="surrogateescape") for item in raw.split(b"\0") if item]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited; only its parent has not collected it yet


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def raw_get(api_client, path: str, timeout: float = 5) -> tuple[int, str]:
    """GET an API path with the client's credentials: (HTTP status, body)."""
    method, url, headers, _, _ = api_client.param_serialize("GET", path, auth_settings=["BearerToken"])
    response = api_client.call_api(method, url, header_params=headers, _request_timeout=timeout)
    response.read()
    return response.status, response.data.decode(errors="replace")


ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok-controller")


@dataclass(frozen=True)
class Launch:
    """How kwokctl starts a component: its binary and arguments, in the cluster directory."""

    argv: list[str]
    cwd: str


class LocalControlPlane:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.directory = cluster_dir(kubeconfig)
        self.launches = self._read_launches()

    def _read_launches(self) -> dict[str, Launch]:
        """Each component's command, from the KwokctlConfiguration kwokctl wrote for this cluster."""
        path = self.directory / "kwok.yaml"
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "KwokctlConfiguration":
                return {
                    c["name"]: Launch([c["binary"], *c.get("args", [])], c.get("workDir") or str(self.directory))
                    for c in document["components"]
                }
        raise NotALocalCluster(f"{path} has no KwokctlConfiguration")

    def pid_file(self, component: str) -> Path:
        return self.directory / "pids" / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.directory / "logs" / f"{component}.log"

    def pid(self, component: str) -> int | None:
        """The component's PID if it runs: the pid file's, checked against /proc (a reused PID runs
        another program)."""
        try:
            pid = int(self.pid_file(component).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if not _alive(pid):
            return None
        argv = _proc_strings(pid, "cmdline")
        return pid if argv and argv[0] == self.launches[component].argv[0] else None

    def running(self, component: str) -> bool:
        return self.pid(component) is not None

    def kill(self, component: str, signum: int = signal.SIGKILL) -> None:
        """Sends `signum` (a crash by default) and waits for the exit; SIGKILL after STOP_TIMEOUT."""
        pid = self.pid(component)
        if pid is None:
            raise AssertionError(f"{component} is not running (pid file {self.pid_file(component)})")
        os.kill(pid, signum)
        if not _wait_exit(pid, STOP_TIMEOUT):
            os.kill(pid, signal.SIGKILL)
            _wait_exit(pid, 10)

    def start(self, component: str) -> int:
        """Starts the component as kwokctl does; tries again while it exits at once (its port
        may still be held by the connections of the process it replaces, for a moment)."""
        launch = self.launches[component]
        deadline = time.monotonic() + START_RETRY_SECONDS
        while True:
            with open(self.log_file(component), "ab") as log:
                process = subprocess.Popen(
                    launch.argv,
                    cwd=launch.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # as kwokctl does: outside pytest's process group
                )
            try:
                process.wait(EARLY_EXIT_SECONDS)
            except subprocess.TimeoutExpired:
                self.pid_file(component).write_text(str(process.pid))
                return process.pid
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{component} keeps exiting at start (code {process.returncode}); see {self.log_file(component)}"
                )
            time.sleep(1)

    def revive(self) -> list[str]:
        """Starts, in dependency order, every component that is not running; returns their names.

        kwokctl supervises nothing, and kube-controller-manager exits when it
        cannot renew its leader lease for 10 s, as it may while the API
        server or etcd is down (in a real cluster the kubelet restarts it)."""
        revived = [name for name in ORDER if name in self.launches and not self.running(name)]
        for name in revived:
            self.start(name)
        return revived

    def pause(self, component: str) -> None:
        """SIGSTOP: the process keeps its connections open and does nothing until resume()."""
        os.kill(self._running_pid(component), signal.SIGSTOP)

    def resume(self, component: str) -> None:
        os.kill(self._running_pid(component), signal.SIGCONT)

    def _running_pid(self, component: str) -> int:
        pid = self.pid(component)
        if pid is None:
            raise AssertionError(f"{component} is not running (pid file {self.pid_file(component)})")
        return pid

    def wait_serving(self, timeout: float = READY_TIMEOUT) -> float:
        """Waits until /readyz answers ok and every node is Ready; returns the seconds it took."""
        started = time.monotonic()
        api = config.new_client_from_config(config_file=self.kubeconfig)
        core = client.CoreV1Api(api)

        def serving() -> None:
            try:
                status, body = raw_get(api, "/readyz", timeout=3)
                if status != 200:
                    raise NotYet(f"/readyz answered {status}: {body[:300]}")
                nodes = core.list_node(_request_timeout=3).items
            except (ApiException, HTTPError, OSError) as err:
                raise NotYet(f"{err.__class__.__name__}: {str(err)[:200]}") from None
            not_ready = [
                n.metadata.name
                for n in nodes
                if not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
            ]
            if not nodes or not_ready:
                raise NotYet(f"nodes not Ready: {not_ready or 'no nodes at all'}")

        try:
            wait_for("the API server to be ready with every node Ready", serving, timeout, interval=0.5)
        finally:
            api.close()
        return time.monotonic() - started

    def controllers_work(self, timeout: float) -> bool:
        """Whether kube-controller-manager gives a new namespace its default ServiceAccount (without
        which no pod can be created in it) within `timeout` seconds."""
        api = config.new_client_from_config(config_file=self.kubeconfig)
        core = client.CoreV1Api(api)
        namespace = f"faults-health-{uuid.uuid4().hex[:6]}"

        def has_account() -> None:
            try:
                core.read_namespaced_service_account("default", namespace, _request_timeout=3)
            except (ApiException, HTTPError, OSError) as err:
                raise NotYet(f"no default ServiceAccount in {namespace} yet ({err})") from None

        try:
            core.create_namespace({"metadata": {"name": namespace}})
            wait_for("kube-controller-manager to work", has_account, timeout, interval=0.5)
            return True
        except AssertionError:
            return False
        finally:
            core.delete_namespace(namespace)
            api.close()

    def wait_healthy(self, timeout: float = READY_TIMEOUT) -> float:
        """wait_serving(), then the controllers working too; returns the seconds it took.

        After an API server outage kube-controller-manager's watches come back only after
        their growing back-off (a minute and more after several outages in a row); a new
        process starts them at once and needs only its predecessor's leader Lease to expire
        (15 s). So one that does not work within CONTROLLERS_GRACE is restarted."""
        started = time.monotonic()
        self.wait_serving(timeout)
        if not self.controllers_work(CONTROLLERS_GRACE):
            self.kill("kube-controller-manager", signal.SIGTERM)
            self.start("kube-controller-manager")
            if not self.controllers_work(timeout):
                log = self.log_file("kube-controller-manager")
                raise AssertionError(f"kube-controller-manager does not work after a restart; see {log}")
        return time.monotonic() - started

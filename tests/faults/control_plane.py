"""The local control plane's own processes (kube-apiserver, etcd, kwok-controller), stopped,
paused and started again by PID, exactly as kwokctl started them.

The processes belong to the cluster the kubeconfig names: its CA file is
<cluster dir>/pki/ca.crt, and kwokctl keeps each component's PID in
<cluster dir>/pids/<component>.pid and its output in <cluster dir>/logs/<component>.log.
A restart reads the running process's argv, environment and working directory
from /proc, stops it, and starts the same command again, appending to the
same log and writing the new PID to the same pid file, so `make local-down`
(and kwokctl) still find it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client, config

from e2e.waiting import NotYet, wait_for

STOP_TIMEOUT = 30.0
# A kube-apiserver starting on a busy 2-core machine needs 10-20 s to be ready.
READY_TIMEOUT = 120.0


class NotALocalCluster(Exception):
    """The kubeconfig names a cluster whose processes do not run on this host (KinD, a real one)."""


def cluster_dir(kubeconfig: str) -> Path:
    """<cluster dir> of the kubeconfig's current cluster, from the path of its CA file."""
    document = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(c for c in document["contexts"] if c["name"] == document["current-context"])
    cluster = next(c for c in document["clusters"] if c["name"] == context["context"]["cluster"])
    ca_file = cluster["cluster"].get("certificate-authority")
    if not ca_file:
        raise NotALocalCluster(f"{kubeconfig}: cluster {cluster['name']} has no certificate-authority file")
    directory = Path(ca_file).resolve().parent.parent
    if not (directory / "pids").is_dir():
        raise NotALocalCluster(f"{kubeconfig}: {directory} has no pids/ directory of kwokctl")
    return directory


@dataclass(frozen=True)
class Launch:
    """How a process was started: enough to start it again the same way."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


def _proc_strings(pid: int, name: str) -> list[str]:
    raw = Path(f"/proc/{pid}/{name}").read_bytes()
    return [item.decode(errors="surrogateescape") for item in raw.split(b"\0") if item]


def _launch_of(pid: int) -> Launch:
    env = dict(item.split("=", 1) for item in _proc_strings(pid, "environ") if "=" in item)
    return Launch(_proc_strings(pid, "cmdline"), env, os.readlink(f"/proc/{pid}/cwd"))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


def raw_get(api_client, path: str, timeout: float = 5) -> tuple[int, str]:
    """GET an API path with the client's credentials: (HTTP status, body)."""
    method, url, headers, _, _ = api_client.param_serialize("GET", path, auth_settings=["BearerToken"])
    response = api_client.call_api(method, url, header_params=headers, _request_timeout=timeout)
    response.read()
    return response.status, response.data.decode(errors="replace")


class LocalControlPlane:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.directory = cluster_dir(kubeconfig)

    def pid_file(self, component: str) -> Path:
        path = self.directory / "pids" / f"{component}.pid"
        if not path.is_file():
            raise NotALocalCluster(f"no pid file {path}")
        return path

    def log_file(self, component: str) -> Path:
        return self.directory / "logs" / f"{component}.log"

    def pid(self, component: str) -> int:
        """The component's PID, checked against /proc: its argv must name the component's binary."""
        pid = int(self.pid_file(component).read_text().strip())
        argv = _proc_strings(pid, "cmdline") if _alive(pid) else []
        if not argv or not Path(argv[0]).name.startswith(component.split("-controller")[0]):
            raise AssertionError(f"{component}: pid {pid} from {self.pid_file(component)} is not running it: {argv}")
        return pid

    def stop(self, component: str) -> Launch:
        """SIGTERM (SIGKILL after STOP_TIMEOUT); returns how to start it again."""
        pid = self.pid(component)
        launch = _launch_of(pid)
        os.kill(pid, signal.SIGTERM)
        if not _wait_exit(pid, STOP_TIMEOUT):
            os.kill(pid, signal.SIGKILL)
            _wait_exit(pid, 10)
        return launch

    def start(self, component: str, launch: Launch) -> int:
        with open(self.log_file(component), "ab") as log:
            process = subprocess.Popen(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # as kwokctl does: outside pytest's process group
            )
        self.pid_file(component).write_text(str(process.pid))
        return process.pid

    def pause(self, component: str) -> None:
        """SIGSTOP: the process keeps its connections open and does nothing until resume()."""
        os.kill(self.pid(component), signal.SIGSTOP)

    def resume(self, component: str) -> None:
        os.kill(self.pid(component), signal.SIGCONT)

    def wait_healthy(self, timeout: float = READY_TIMEOUT) -> float:
        """Waits until /readyz answers ok and every node is Ready; returns the seconds it took."""
        started = time.monotonic()

        def probe() -> None:
            api = config.new_client_from_config(config_file=self.kubeconfig)
            try:
                status, body = raw_get(api, "/readyz", timeout=3)
                if status != 200:
                    raise NotYet(f"/readyz answered {status}: {body[:300]}")
                nodes = client.CoreV1Api(api).list_node(_request_timeout=3).items
                not_ready = [
                    n.metadata.name
                    for n in nodes
                    if not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                ]
                if not nodes or not_ready:
                    raise NotYet(f"nodes not Ready: {not_ready or 'no nodes at all'}")
            except NotYet:
                raise
            except Exception as err:  # noqa: BLE001 - no answer at all also means "not yet"
                raise NotYet(f"{err.__class__.__name__}: {str(err)[:200]}") from None
            finally:
                api.close()

        wait_for("the API server to be ready with every node Ready", probe, timeout, interval=0.5)
        return time.monotonic() - started

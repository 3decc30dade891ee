"""gpu-scheduler's webhook as deployed (granian, TLS, 2 workers, reading nodes), registered as the chart registers it.

The configurations are the chart's own (`helm template`: rules,
matchConditions, failurePolicy, timeouts), rendered for the benchmark's
schedulerName and pointed at a URL on this host, as the e2e suite does. The
e2e helper renders them for schedulerName gpu-scheduler only, which the e2e
suite's own scheduler uses in every namespace of the shared cluster; so the
benchmark renders its own and reuses the helper's apply/delete.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
from pathlib import Path

import yaml

from .chart import CHART
from .kubeapi import KubeApi
from .paths import BIN, GPU_SCHEDULER, REPO
from .processes import Process, http_ok
from .workload import MAP_ANNOTATION, PAUSE_IMAGE

HELM = BIN / "helm"
RELEASE = "gpu-bench"
REGISTRATION_TIMEOUT = 60.0

sys.path.insert(0, str(REPO / "tests"))
from e2e import webhook_registration  # noqa: E402
from e2e.charts import KUBE_VERSION_ARGS  # noqa: E402


def render(base_url: str, ca_bundle: str, scheduler_name: str, namespace_label: tuple[str, str]) -> list[dict]:
    """The chart's webhook configurations for scheduler_name, calling base_url, limited to
    namespaces with namespace_label."""
    rendered = subprocess.run(
        [
            str(HELM),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            "gpu-scheduler",
            "--show-only",
            "templates/webhook-configurations.yaml",
            *KUBE_VERSION_ARGS,  # the chart's kubeVersion refuses helm's own default (tests/e2e/charts.py)
            "--set",
            f"schedulerName={scheduler_name}",
            # No --api-versions: rendered as for 1.35, where a pod lacking the bind entry goes
            # through the webhook (on 1.36+ the chart's MutatingAdmissionPolicy gives it instead).
            # The chart refuses its placeholder registry even where, as here, no image is rendered.
            "--set-string",
            "image.registry=",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if rendered.returncode != 0:
        raise RuntimeError(f"helm template {CHART} failed: {rendered.stderr}")
    configurations = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    key, value = namespace_label
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            webhook["clientConfig"] = {
                "url": base_url + webhook["clientConfig"]["service"]["path"],
                "caBundle": ca_bundle,
            }
            webhook.setdefault("namespaceSelector", {}).setdefault("matchExpressions", []).append(
                {"key": key, "operator": "In", "values": [value]}
            )
    return configurations


def dry_run_admitted(api: KubeApi, namespace: str, scheduler_name: str) -> tuple[bool, bytes]:
    """Whether the apiserver sends a pod of scheduler_name in namespace through the webhook: a
    server-side dry run of one comes back with the entry that reads the bind's devices. Also the answer."""
    from gpu_scheduler.placement import DEVICES_FIELD_PATH

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "webhook-probe-0", "annotations": {MAP_ANNOTATION: "0=bn-0:0"}},
        "spec": {"schedulerName": scheduler_name, "containers": [{"name": "probe", "image": PAUSE_IMAGE}]},
    }
    status, answer = api.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", json.dumps(pod).encode())
    if status != 201:
        return False, answer
    env = json.loads(answer)["spec"]["containers"][0].get("env") or []
    read = [((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") for e in env]
    return DEVICES_FIELD_PATH in read, answer


def dry_run_untouched(api: KubeApi, namespace: str, pod: dict) -> tuple[bool, bytes]:
    """Whether the apiserver creates pod in namespace as it was sent: a server-side dry run of it
    comes back (201) with every container's env and the annotations it was sent with, i.e. no
    webhook or admission policy of the bench mutated it (nor refused it). Also the answer."""
    probe = {**pod, "metadata": {**pod["metadata"], "name": "bind-probe-0", "namespace": namespace}}
    status, answer = api.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", json.dumps(probe).encode())
    if status != 201:
        return False, answer
    stored = json.loads(answer)

    def seen(obj: dict) -> tuple:
        spec = obj.get("spec") or {}
        env = tuple(
            tuple(json.dumps(e, sort_keys=True) for e in c.get("env") or ())
            for field in ("initContainers", "containers")
            for c in spec.get(field) or ()
        )
        return env, (obj.get("metadata") or {}).get("annotations") or {}

    # The apiserver defaults a fieldRef's apiVersion to "v1": the entry it stores says so.
    def defaulted(obj: dict) -> dict:
        obj = json.loads(json.dumps(obj))
        for field in ("initContainers", "containers"):
            for c in obj.get("spec", {}).get(field) or ():
                for e in c.get("env") or ():
                    ref = (e.get("valueFrom") or {}).get("fieldRef")
                    if ref is not None:
                        ref.setdefault("apiVersion", "v1")
        return obj

    return seen(defaulted(probe)) == seen(stored), answer


def wait_until_called(api: KubeApi, namespace: str, scheduler_name: str) -> None:
    """Waits until the apiserver sends the namespace's pods of scheduler_name through the webhook."""
    deadline = time.monotonic() + REGISTRATION_TIMEOUT
    answer = b""
    while time.monotonic() < deadline:
        admitted, answer = dry_run_admitted(api, namespace, scheduler_name)
        if admitted:
            return
        time.sleep(0.5)
    raise TimeoutError(
        f"the apiserver did not call the webhook within {REGISTRATION_TIMEOUT:.0f}s; "
        f"last dry-run answer: {answer[:300]!r}"
    )


class Webhook:
    def __init__(self, out_dir: Path, scheduler_name: str, port: int, kubeconfig: str, workers: int = 2) -> None:
        self.out_dir = out_dir
        self.scheduler_name = scheduler_name
        self.port = port
        self.workers = workers
        self.certs = out_dir / "certs"
        self.ca_bundle = ""
        self.process = Process(
            "webhook",
            [
                str(GPU_SCHEDULER),
                "webhook",
                "--tls-cert-file",
                str(self.certs / "tls.crt"),
                "--tls-private-key-file",
                str(self.certs / "tls.key"),
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--scheduler-name",
                scheduler_name,
                # As the chart deploys it (webhook.readNodes defaults to true): each
                # worker watches the nodes that publish GPUs (webhook/gpu_nodes.py; none
                # of the bench's) and reads a node when a pod is created on one, which
                # the figures must include.
                "--read-nodes",
                "true",
                "--kubeconfig",
                kubeconfig,
            ],
            out_dir / "logs" / "webhook.log",
        )
        self._configurations: list[dict] = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs / "ca.crt"))

    def start(self) -> float:
        """Writes a CA and serving certificate for 127.0.0.1, starts the webhook, waits for /readyz."""
        result = subprocess.run(
            [str(GPU_SCHEDULER), "certs", "--out-dir", str(self.certs), "--ip", "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise RuntimeError(f"gpu-scheduler certs failed ({result.returncode}): {result.stderr}")
        self.ca_bundle = result.stdout.strip()
        self.process.start()
        context = self.tls_context()
        return self.process.wait_ready(lambda: http_ok(f"{self.url}/readyz", context), timeout=60)

    def register(self, api_client, api: KubeApi, namespace: str, namespace_label: tuple[str, str]) -> None:
        """Mutating and validating configurations as the chart has them, limited to
        namespaces with namespace_label; returns once the apiserver calls the webhook."""
        self._configurations = render(self.url, self.ca_bundle, self.scheduler_name, namespace_label)
        webhook_registration.apply(api_client, self._configurations)
        wait_until_called(api, namespace, self.scheduler_name)

    def unregister(self, api_client) -> None:
        for name in {c["metadata"]["name"] for c in self._configurations}:
            webhook_registration.delete(api_client, name)
        self._configurations = []

    def stop(self) -> None:
        self.process.stop()

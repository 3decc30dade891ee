"""gpu-scheduler's webhook as deployed (gunicorn, TLS, 2 workers), registered as the chart registers it."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

from .processes import Process, http_ok

REPO = Path(__file__).resolve().parents[1]
GPU_SCHEDULER = REPO / ".venv" / "bin" / "gpu-scheduler"
RELEASE = "gpu-bench"

# The e2e suite's registration renders the chart's own webhook configurations
# (rules, matchConditions, failurePolicy, timeouts) and points them at a URL
# on this host; the benchmark registers the webhook the same way.
sys.path.insert(0, str(REPO / "tests"))
from e2e import webhook_registration  # noqa: E402


class Webhook:
    def __init__(self, out_dir: Path, scheduler_name: str, port: int, workers: int = 2) -> None:
        self.out_dir = out_dir
        self.scheduler_name = scheduler_name
        self.port = port
        self.certs = out_dir / "certs"
        self.ca_bundle = ""
        self.process = Process("webhook", [
            str(GPU_SCHEDULER), "webhook",
            "--tls-cert-file", str(self.certs / "tls.crt"), "--tls-private-key-file", str(self.certs / "tls.key"),
            "--bind", "127.0.0.1", "--port", str(port), "--workers", str(workers),
            "--scheduler-name", scheduler_name,
        ], out_dir / "logs" / "webhook.log")
        self._configurations: list[dict] = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs / "ca.crt"))

    def start(self) -> float:
        """Writes a CA and serving certificate for 127.0.0.1, starts gunicorn, waits for /readyz."""
        result = subprocess.run([str(GPU_SCHEDULER), "certs", "--out-dir", str(self.certs), "--ip", "127.0.0.1"],
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"gpu-scheduler certs failed ({result.returncode}): {result.stderr}")
        self.ca_bundle = result.stdout.strip()
        self.process.start()
        context = self.tls_context()
        return self.process.wait_ready(lambda: http_ok(f"{self.url}/readyz", context), timeout=60)

    def register(self, api_client, namespace: str, namespace_label: tuple[str, str]) -> None:
        """Mutating and validating configurations as the chart has them, limited to
        namespaces with namespace_label; returns once the apiserver calls the webhook."""
        self._configurations = webhook_registration.render(
            RELEASE, self.url, self.ca_bundle, scheduler_name=self.scheduler_name,
            namespace_label=namespace_label)
        webhook_registration.apply(api_client, self._configurations)
        webhook_registration.wait_until_called(api_client, namespace, self.scheduler_name)

    def unregister(self, api_client) -> None:
        for name in {c["metadata"]["name"] for c in self._configurations}:
            webhook_registration.delete(api_client, name)
        self._configurations = []

    def stop(self) -> None:
        self.process.stop()

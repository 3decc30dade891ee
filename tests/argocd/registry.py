"""The release's OCI registry, as the repo server in KinD can reach it: Debian's docker-registry on this host.

The same registry `make pipeline` runs (scripts/pipeline.sh), empty, on the
gateway address of the cluster's Docker network, without TLS: Argo CD is
told so by a repository Secret (scripts/argocd.sh plain-http-registry).
Charts reach it as the release job pushes them: `helm package`, `helm push`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

from e2e.processes import free_port

from .answering import wait_answering


class OCIRegistry:
    """`docker-registry serve` on address:port with its data under `root`, until stop()."""

    def __init__(self, root: Path, address: str):
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RuntimeError(
                "docker-registry is missing: apt-get install docker-registry (make pipeline uses it too)"
            )
        self.address = address
        self.port = free_port(address)
        self.log = root / "registry.log"
        (root / "registry-data").mkdir(parents=True)
        config = root / "registry.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn, formatter: text}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'registry-data'}}}}}\n"
            f"http: {{addr: '{address}:{self.port}'}}\n"
        )
        with self.log.open("wb") as out:
            self.process = subprocess.Popen([binary, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
        self._wait_answering()

    @property
    def host(self) -> str:
        """HOST:PORT, as an OCI reference names a registry."""
        return f"{self.address}:{self.port}"

    def _wait_answering(self) -> None:
        def probe() -> None:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1):
                pass

        wait_answering(self.process, self.log, f"docker-registry on {self.host}", probe)

    def tags(self, repository: str) -> list[str]:
        """The tags the registry holds for `repository` (its own API: what a pull would find)."""
        with urllib.request.urlopen(f"http://{self.host}/v2/{repository}/tags/list", timeout=10) as answer:
            return json.load(answer).get("tags") or []

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

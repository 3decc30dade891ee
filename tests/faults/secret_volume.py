"""A Secret mounted into a directory the way the kubelet mounts a Secret volume, for host processes.

KWOK runs no kubelet, so a webhook process on this host reads its certificate
from a directory this class keeps in step with the Secret, in the kubelet's own
layout (its AtomicWriter): every key is a symlink `<key> -> ..data/<key>`,
`..data` is a symlink to a timestamped directory, and an update writes a new
directory and swaps `..data` with one rename. The real kubelet refreshes a
volume on its sync period (about a minute); this one polls every `interval`
seconds, so a certificate the API server does not trust yet would be served
almost at once: the harshest case for a renewal.
"""

from __future__ import annotations

import base64
import datetime
import os
import shutil
import threading
from pathlib import Path

from kubernetes import client


class SecretVolume:
    def __init__(self, api_client, namespace: str, name: str, directory: Path, interval: float = 0.2) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.directory = directory
        self.interval = interval
        self.swaps: list[str] = []  # resourceVersions of the Secret written, in order
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"volume-{name}", daemon=True)

    def file(self, key: str) -> Path:
        return self.directory / key

    def start(self) -> SecretVolume:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.sync()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> SecretVolume:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as err:  # noqa: BLE001 - recorded for the test to report
                self.errors.append(f"{type(err).__name__}: {err}")

    def sync(self) -> None:
        secret = self.core.read_namespaced_secret(self.name, self.namespace)
        version = secret.metadata.resource_version
        if self.swaps and self.swaps[-1] == version:
            return
        stamp = datetime.datetime.now(datetime.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
        new = self.directory / stamp
        new.mkdir()
        for key, value in (secret.data or {}).items():
            (new / key).write_bytes(base64.b64decode(value))
            os.chmod(new / key, 0o440 if key == "tls.key" else 0o444)
        old = (self.directory / "..data").resolve() if (self.directory / "..data").exists() else None
        (self.directory / "..data_tmp").symlink_to(stamp)
        os.rename(self.directory / "..data_tmp", self.directory / "..data")
        for key in secret.data or {}:
            link = self.directory / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")
        if old is not None and old != new:
            shutil.rmtree(old)
        self.swaps.append(version)

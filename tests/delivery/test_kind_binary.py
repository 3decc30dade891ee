"""scripts/kind-binary.sh: the kind release binary is taken only with the sha256 pinned for it.

Our machines reach no GitHub, so the download itself cannot run here: a fake
`curl` serves a stand-in that would pass every other check (it runs and
reports the pinned version), which makes the checksum the only thing that
can refuse it. The real path (download, checksum, kept) runs in CI's e2e-kind job.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from .conftest import REPO, fake_curl

pytestmark = pytest.mark.delivery

SCRIPT = REPO / "scripts" / "kind-binary.sh"
SYSTEM_TOOLS = ("awk", "cat", "chmod", "cut", "dirname", "mkdir", "mv", "rm", "sha256sum", "uname", "seq", "sleep")

# curl ... -o OUT URL: writes a kind stand-in that claims the pinned version.
FAKE_CURL = fake_curl(r"""printf '#!/bin/sh\necho "kind v0.30.0 go1.24.6 linux/amd64"\n' > "$out"
""")


# cluster/kind/go.mod moved to kind v0.33.0 (Kubernetes 1.37) on a machine that reaches no
# GitHub, so its release checksums could not be read and the script still pins v0.30.0's: until
# they are pinned, the script downloads nothing and builds kind from the Go module proxy. Strict:
# pinning them makes these pass, and then this mark must go.
CHECKSUMS_NOT_PINNED = pytest.mark.xfail(
    strict=True, reason="kind v0.33.0's release checksums are not pinned yet (no GitHub here)"
)


def pinned() -> tuple[str, dict[str, str]]:
    text = SCRIPT.read_text()
    version = re.search(r"^RELEASE_SHA256_VERSION=(\S+)$", text, re.M).group(1)
    sums = dict(re.findall(r"^\s+\[(\w+/\w+)\]=([0-9a-f]+)$", text, re.M))
    return version, sums


@CHECKSUMS_NOT_PINNED
def test_release_checksums_are_pinned_for_the_kind_version_the_go_module_requires():
    go_mod = (REPO / "cluster" / "kind" / "go.mod").read_text()
    version, sums = pinned()

    assert re.search(rf"^\s*sigs\.k8s\.io/kind {re.escape(version)}( //.*)?$", go_mod, re.M), go_mod
    assert set(sums) == {"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in sums.values()), sums
    assert len(set(sums.values())) == 4


@CHECKSUMS_NOT_PINNED
def test_a_download_without_the_pinned_checksum_is_refused_and_not_kept(tmp_path):
    sys_bin, cache, calls = tmp_path / "bin", tmp_path / "cache", tmp_path / "curl-calls"
    sys_bin.mkdir()
    for tool in SYSTEM_TOOLS:
        (sys_bin / tool).symlink_to(shutil.which(tool))
    (sys_bin / "curl").write_text(FAKE_CURL)
    (sys_bin / "curl").chmod(0o755)

    result = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={
            "PATH": str(sys_bin),  # no go, no kind: the download is the only way left
            "CACHE_DIR": str(cache),
            "TOOLS_OS": "linux",
            "TOOLS_ARCH": "arm64",
            "FAKE_CURL_CALLS": str(calls),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode != 0, result.stderr
    assert calls.read_text().split() == [
        "https://github.com/kubernetes-sigs/kind/releases/download/v0.30.0/kind-linux-arm64"
    ]
    assert f"does not have the pinned sha256 {pinned()[1]['linux/arm64']}: not used" in result.stderr
    assert "install it (https://kind.sigs.k8s.io/docs/user/quick-start/#installation) or Go" in result.stderr
    assert not (cache / "bin" / "kind").exists()
    assert not list((cache / "bin").iterdir()), "the refused download was left behind"

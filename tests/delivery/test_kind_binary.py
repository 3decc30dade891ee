"""scripts/kind-binary.sh: the kind release binary is taken only with the sha256 its release publishes.

Our machines reach no GitHub, so the download itself cannot run here: a fake
`curl` serves a stand-in that would pass every other check (it runs and
reports the version cluster/kind/go.mod pins) and the release's .sha256sum
file, which makes the checksum the only thing that can refuse it. The real
path (download, checksum, kept) is a user's.
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
GO_MOD = (REPO / "cluster" / "kind" / "go.mod").read_text()
KIND_VERSION = re.search(r"^\s*sigs\.k8s\.io/kind (v\S+)", GO_MOD, re.M).group(1)
RELEASE = f"https://github.com/kubernetes-sigs/kind/releases/download/{KIND_VERSION}/kind-linux-arm64"


def fake_release(published: str) -> str:
    """curl serving a kind stand-in reporting our version, and a .sha256sum naming `published`
    ("own": the stand-in's real sha256; "none": no .sha256sum, curl fails)."""
    return fake_curl(rf"""stand_in='#!/bin/sh\necho "kind {KIND_VERSION} go1.26 linux/arm64"\n'
case "$url" in
  *.sha256sum)
    case "{published}" in
      none) exit 22 ;;
      own) printf "$stand_in" | sha256sum | awk '{{print $1 "  kind-linux-arm64"}}' > "$out" ;;
      *) echo "{published}  kind-linux-arm64" > "$out" ;;
    esac ;;
  *) printf "$stand_in" > "$out" ;;
esac
""")


def run_script(tmp_path, published: str):
    sys_bin, cache, calls = tmp_path / "bin", tmp_path / "cache", tmp_path / "curl-calls"
    sys_bin.mkdir()
    for tool in SYSTEM_TOOLS:
        (sys_bin / tool).symlink_to(shutil.which(tool))
    (sys_bin / "curl").write_text(fake_release(published))
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
    return result, cache, calls.read_text().split() if calls.exists() else []


def test_a_download_with_the_sha256_its_release_publishes_is_kept(tmp_path):
    result, cache, calls = run_script(tmp_path, "own")
    assert result.returncode == 0, result.stderr
    assert calls == [RELEASE + ".sha256sum", RELEASE]
    assert result.stdout.strip() == str(cache / "bin" / "kind")
    assert "sha256 checked against the release's" in result.stderr


@pytest.mark.parametrize("published", ["0" * 64, "not-a-checksum", "none"])
def test_a_download_without_the_published_sha256_is_refused_and_not_kept(tmp_path, published):
    result, cache, calls = run_script(tmp_path, published)
    assert result.returncode != 0, result.stderr
    assert calls[0] == RELEASE + ".sha256sum"
    if published == "none":
        assert "could not download" in result.stderr
    else:
        assert "does not have the sha256 its release publishes" in result.stderr
    assert "install it (https://kind.sigs.k8s.io/docs/user/quick-start/#installation) or Go" in result.stderr
    assert not (cache / "bin" / "kind").exists()
    assert not list((cache / "bin").iterdir()), "the refused download was left behind"

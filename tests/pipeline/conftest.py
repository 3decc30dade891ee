"""`make pipeline` run once for the `pipeline` tests, and the real records they read.

The fixture runs scripts/pipeline.sh with PIPELINE_KEEP=1, so that what the
pipeline made is still there to ask: the registry (its HTTP API and its
access log), the KinD cluster (the nodes' containerd, the pods, Argo CD's
Applications) and gitlab-ci-local's output. It runs `scripts/pipeline.sh
down` at the end, whatever happened. PIPELINE_TEST_REUSE=1 reads a pipeline
left by `make pipeline PIPELINE_KEEP=1` instead of running one (for working
on these tests; it is never set by make or CI) and leaves it running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from commands import run

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
KUBECTL = CACHE / "bin" / "kubectl"
PIPELINE_DIR = CACHE / "pipeline"
CLUSTER = os.environ.get("PIPELINE_CLUSTER", "gpu-scheduler-pipeline")
KUBECONFIG = CACHE / "kind" / f"{CLUSTER}.kubeconfig"
REGISTRY = f"127.0.0.1:{os.environ.get('PIPELINE_REGISTRY_PORT', '5001')}"
REGISTRY_IMAGE = f"{REGISTRY}/gpu-scheduler"
IMAGES = ("gpu-scheduler", "gpu-scheduler-check")
# A cold machine builds the control plane, the KinD node image and Argo CD.
PIPELINE_TIMEOUT = 5400


@dataclass(frozen=True)
class Pipeline:
    commit: str  # CI_COMMIT_SHORT_SHA: the first 8 hex digits of HEAD
    ref_slug: str  # CI_COMMIT_REF_SLUG of this checkout
    log: str  # gitlab-ci-local's output of the pipeline (lint .. e2e)
    deploy_log: str  # and of the manual deploy job

    def kubectl(self, *args: str) -> str:
        result = run([KUBECTL, "--kubeconfig", KUBECONFIG, *args], timeout=60)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def registry(self, path: str, method: str = "GET", accept: str = "") -> tuple[dict, dict]:
        """The registry's answer to `method path`: its headers and its JSON body (empty for HEAD)."""
        request = urllib.request.Request(f"http://{REGISTRY}{path}", method=method)
        if accept:
            request.add_header("Accept", accept)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            return dict(response.headers), (json.loads(body) if body else {})


def ref_slug() -> str:
    """GitLab's CI_COMMIT_REF_SLUG of the current branch (lower case, [a-z0-9-], at most 63)."""
    branch = run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=REPO).stdout.strip()
    return re.sub(r"[^a-z0-9]", "-", branch.lower())[:63].strip("-")


@pytest.fixture(scope="session")
def pipeline() -> Pipeline:
    env = {**os.environ, "PIPELINE_KEEP": "1", "KIND_CLUSTER": CLUSTER}
    reuse = os.environ.get("PIPELINE_TEST_REUSE") == "1"
    # Under CI=true scripts/pipeline.sh starts an engine itself (or fails).
    docker_answers = shutil.which("docker") is not None and run(["docker", "info"]).returncode == 0
    if os.environ.get("CI") != "true" and not docker_answers:
        pytest.skip(
            "no Docker engine answers ('docker info'): make pipeline needs one for its images and KinD; "
            "install Docker (https://docs.docker.com/engine/install/) and run 'make test-pipeline' again"
        )
    if not reuse:
        # Output straight to the terminal (pytest -s): a long run shows its progress.
        result = subprocess.run(
            ["bash", REPO / "scripts" / "pipeline.sh", "run"], env=env, timeout=PIPELINE_TIMEOUT, check=False
        )
    try:
        if not reuse:
            assert result.returncode == 0, f"scripts/pipeline.sh run failed (exit {result.returncode}); output above"
        head = run(["git", "rev-parse", "HEAD"], cwd=REPO).stdout.strip()
        yield Pipeline(
            commit=head[:8],
            ref_slug=ref_slug(),
            log=(PIPELINE_DIR / "pipeline.log").read_text(),
            deploy_log=(PIPELINE_DIR / "deploy.log").read_text(),
        )
    finally:
        if not reuse:
            subprocess.run(["bash", REPO / "scripts" / "pipeline.sh", "down"], env=env, timeout=600, check=False)

"""`make pipeline` (a release tag's pipeline) run for the `pipeline` tests, and the real records they read.

Two runs, one after the other: test_blocked_release.py's, whose test jobs
run only tests forced to fail, then test_pipeline.py's, which must pass. The
test jobs of both run a selection (PIPELINE_TEST_SELECTION, the jobs'
TEST_SELECTION): `make test` ran every suite before, on this commit; here the
jobs prove they run them (SAMPLE, the tests marked pipeline_sample). Each
fixture runs scripts/pipeline.sh with PIPELINE_KEEP=1, so that what the
pipeline made is still there to ask: the registry (its HTTP API and its
access log), the KinD cluster (the nodes' containerd, the pods, Argo CD's
Applications), gitlab-ci-local's output, the JUnit reports and KinD's logs.
It runs `scripts/pipeline.sh down` at the end, whatever happened.
PIPELINE_TEST_REUSE=1 reads a pipeline left by `make pipeline
PIPELINE_KEEP=1` instead of running one (for working on these tests; it is
never set by make or CI) and leaves it running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
import xml.etree.ElementTree as ElementTree
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from commands import run

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
KUBECTL = CACHE / "bin" / "kubectl"
# What scripts/signing-tools.sh linked for the pipeline's sign job.
COSIGN = CACHE / "bin" / "cosign"
PIPELINE_DIR = CACHE / "pipeline"
CLUSTER = os.environ.get("PIPELINE_CLUSTER", "gpu-scheduler-pipeline")
KUBECONFIG = CACHE / "kind" / f"{CLUSTER}.kubeconfig"
REGISTRY = f"127.0.0.1:{os.environ.get('PIPELINE_REGISTRY_PORT', '5001')}"
REGISTRY_IMAGE = f"{REGISTRY}/gpu-scheduler"
IMAGES = ("gpu-scheduler", "gpu-scheduler-check")
# The platforms each image is built for (.gitlab-ci.yml's IMAGE_PLATFORMS): linux/<arch>.
ARCHES = ("amd64", "arm64")
# A cold machine builds the control plane, the KinD node image and Argo CD.
PIPELINE_TIMEOUT = 5400
# What the passing pipeline's test jobs run: the tests marked pipeline_sample.
SAMPLE = "pipeline_sample"


JUNIT_DIR = CACHE / "junit"
KIND_LOGS = CACHE / "kind-logs"


@dataclass(frozen=True)
class Pipeline:
    returncode: int  # scripts/pipeline.sh run's
    commit: str  # CI_COMMIT_SHORT_SHA: the first 8 hex digits of HEAD
    tag: str  # CI_COMMIT_TAG: v<version>
    log: str  # gitlab-ci-local's output of the pipeline (lint .. release)
    deploy_log: str  # and of the manual deploy job ("" when it did not run)

    @property
    def version(self) -> str:
        return self.tag.removeprefix("v")

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


@contextmanager
def pipeline_run(selection: str):
    """scripts/pipeline.sh run, its test jobs running `selection` (a pytest -k expression);
    then the Pipeline it left to read; `down` afterwards, whatever happened."""
    env = {**os.environ, "PIPELINE_KEEP": "1", "KIND_CLUSTER": CLUSTER, "PIPELINE_TEST_SELECTION": selection}
    reuse = os.environ.get("PIPELINE_TEST_REUSE") == "1"
    # Under CI=true scripts/pipeline.sh starts an engine itself (or fails).
    docker_answers = shutil.which("docker") is not None and run(["docker", "info"]).returncode == 0
    if os.environ.get("CI") != "true" and not docker_answers:
        pytest.skip(
            "no Docker engine answers ('docker info'): make pipeline needs one for its images and KinD; "
            "install Docker (https://docs.docker.com/engine/install/) and run 'make test-pipeline' again"
        )
    returncode = 0
    if not reuse:
        # Output straight to the terminal (pytest -s): a long run shows its progress.
        returncode = subprocess.run(
            ["bash", REPO / "scripts" / "pipeline.sh", "run"], env=env, timeout=PIPELINE_TIMEOUT, check=False
        ).returncode
    try:
        deploy = PIPELINE_DIR / "deploy.log"
        yield Pipeline(
            returncode=returncode,
            commit=(PIPELINE_DIR / "commit").read_text().strip(),
            tag=(PIPELINE_DIR / "tag").read_text().strip(),
            log=(PIPELINE_DIR / "pipeline.log").read_text(),
            deploy_log=deploy.read_text() if deploy.exists() else "",
        )
    finally:
        if not reuse:
            subprocess.run(["bash", REPO / "scripts" / "pipeline.sh", "down"], env=env, timeout=600, check=False)


@pytest.fixture(scope="session")
def pipeline():
    """The release pipeline of HEAD, which must pass, deploy included."""
    with pipeline_run(SAMPLE) as run_:
        assert run_.returncode == 0, f"scripts/pipeline.sh run failed (exit {run_.returncode}); output above"
        yield run_


def junit_reports(job: str) -> list[dict[str, int]]:
    """Each JUnit report that `job`'s pytest runs wrote: its tests, failures, errors and skipped counts."""
    reports = []
    for path in sorted(JUNIT_DIR.glob(f"{job}-*.xml")):
        suite = ElementTree.parse(path).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        reports.append({key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")})
    return reports


def junit_outcomes(job: str) -> dict[str, str]:
    """Test function (parameters stripped) -> passed, failed or skipped, from `job`'s JUnit reports."""
    outcomes = {}
    for path in sorted(JUNIT_DIR.glob(f"{job}-*.xml")):
        for case in ElementTree.parse(path).getroot().iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            outcome = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
            outcomes[case.get("name").split("[")[0]] = outcome
    return outcomes


def marked_tests(marker: str) -> set[str]:
    """The test functions (parameters stripped) pytest collects with `marker`, in the whole tree."""
    collected = run(
        [REPO / ".venv" / "bin" / "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker], cwd=REPO
    )
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    return {line.split("::")[-1].split("[")[0] for line in collected.stdout.splitlines() if "::" in line}


def job_seconds(log: str, job: str) -> float:
    """How long gitlab-ci-local says `job` took ("[HH:MM:SS 1.2 min] job  finished in 1.2 min")."""
    found = re.search(rf"^\[[^\]]*\] {re.escape(job)}\s+finished in ([\d.]+) (ms|s|min)", log, re.M)
    assert found, f"{job} never logged 'finished in'"
    return float(found[1]) * {"ms": 0.001, "s": 1, "min": 60}[found[2]]


def summary(log: str) -> dict[str, str]:
    """gitlab-ci-local's closing lines: job -> PASS, FAIL, WARN, ..."""
    # " PASS  [   43 s] build-image  " (--timestamps adds the job's time).
    return dict((m[2], m[1]) for m in re.finditer(r"^ ([A-Z]+) +(?:\[[^\]]*\] +)?(\S+) *$", log, re.M))


def logged_at(log: str, job: str, event: str) -> int | None:
    """Where gitlab-ci-local logged `job` "starting" or "finished in" (--timestamps lines), or None."""
    found = re.search(rf"^\[[^\]]*\] {re.escape(job)}\s+{event}", log, re.M)
    return found.start() if found else None


def line_of(log: str, job: str, event: str) -> int:
    at = logged_at(log, job, event)
    assert at is not None, f"{job} never logged '{event}'"
    return at

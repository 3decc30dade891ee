"""A release tag whose tests fail is not released: `make pipeline` with one test forced to fail.

The fixture writes a test into tests/e2e that fails on the installed release
only, so test-cluster (the local control plane, where such tests are skipped)
passes and the last test job, e2e-kind, fails after the images were built and
pushed: the latest point at which a pipeline could still leak a release. It
runs the tag's pipeline (scripts/pipeline.sh run), reads what it left, and
removes the test and the pipeline again. This module runs before
test_pipeline.py's passing run (file order), never beside it.

Oracles the pipeline's scripts do not write: the registry's HTTP API (tags,
repositories), gitlab-ci-local's summary, the JUnit report pytest wrote and
the files `kind export logs` wrote.
"""

from __future__ import annotations

import pytest

from .conftest import (
    IMAGES,
    JUNIT_DIR,
    KIND_LOGS,
    PIPELINE_TIMEOUT,
    REPO,
    junit_reports,
    logged_at,
    pipeline_run,
    summary,
)

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(PIPELINE_TIMEOUT + 600)]

FORCED = REPO / "tests" / "e2e" / "test_forced_release_blocker.py"
FORCED_TEST = '''"""Written by tests/pipeline/test_blocked_release.py for one pipeline run, and removed after it."""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.installed_only]


def test_fails_on_purpose_so_that_this_tag_is_not_released():
    pytest.fail("forced by tests/pipeline/test_blocked_release.py: this tag must not be released")
'''


@pytest.fixture(scope="module")
def blocked():
    assert not FORCED.exists(), f"{FORCED} is left from an earlier run: remove it"
    FORCED.write_text(FORCED_TEST)
    try:
        with pipeline_run() as run_:
            yield run_
    finally:
        FORCED.unlink(missing_ok=True)


def test_the_pipeline_fails_on_the_e2e_job_and_runs_no_release_job(blocked):
    assert blocked.returncode != 0, "scripts/pipeline.sh run passed with a failing test"
    assert summary(blocked.log) == {
        "lint": "PASS",
        "release-check": "PASS",
        "test-unit": "PASS",
        "test-cluster": "PASS",
        "build-image": "PASS",
        "e2e-kind": "FAIL",
    }, blocked.log[-3000:]
    for job in ("promote", "publish-charts", "gitlab-release"):
        assert logged_at(blocked.log, job, "starting") is None, f"{job} ran"
    assert blocked.deploy_log == ""


def test_the_registry_holds_the_commit_tag_only_and_no_chart(blocked):
    _, catalog = blocked.registry("/v2/_catalog")

    assert sorted(catalog["repositories"]) == [f"gpu-scheduler/{image}" for image in IMAGES], catalog
    for image in IMAGES:
        _, tags = blocked.registry(f"/v2/gpu-scheduler/{image}/tags/list")
        assert tags["tags"] == [blocked.commit], tags


def test_the_e2e_jobs_junit_report_names_the_failure(blocked):
    reports = junit_reports("e2e-kind")

    assert reports, "e2e-kind left no JUnit report"
    assert sum(report["failures"] for report in reports) == 1, reports
    text = "".join(path.read_text() for path in JUNIT_DIR.glob("e2e-kind-*.xml"))
    assert "test_fails_on_purpose_so_that_this_tag_is_not_released" in text


def test_the_failed_e2e_kept_the_kind_clusters_logs(blocked):
    nodes = [path for path in KIND_LOGS.iterdir() if path.is_dir()] if KIND_LOGS.is_dir() else []

    assert nodes, f"no node logs in {KIND_LOGS}"
    # kind export logs: each node's kubelet and containerd journal, and its pods' logs.
    for node in nodes:
        assert (node / "kubelet.log").stat().st_size > 0, node
        assert (node / "containerd.log").exists(), node
    assert any((node / "pods").is_dir() for node in nodes), nodes

"""A release tag whose tests fail is not released: `make pipeline` whose test jobs run only tests forced to fail.

The fixture writes two tests that fail on purpose and runs the tag's pipeline
(scripts/pipeline.sh run) with TEST_SELECTION=forced_release_blocker, so that
each test job runs those alone: test-unit, the first test job, fails within
seconds on the unit one; test-cluster skips the e2e one (it reads an
installed release, which the local control plane has not), and so does
test-compat on Kubernetes 1.35; e2e-kind, after
the images were built and pushed, fails on it: the latest point at which a
pipeline could still leak a release. It reads what the pipeline left, and
removes the tests and the pipeline again. This module runs before
test_pipeline.py's passing run (scripts/test.sh), never beside it.

Oracles the pipeline's scripts do not write: the registry's HTTP API (tags,
repositories), gitlab-ci-local's summary and timestamps, the JUnit reports
pytest wrote and the files `kind export logs` wrote.
"""

from __future__ import annotations

import pytest

from .conftest import (
    ARCHES,
    IMAGES,
    JUNIT_DIR,
    KIND_LOGS,
    PIPELINE_TIMEOUT,
    REPO,
    job_seconds,
    junit_outcomes,
    junit_reports,
    logged_at,
    pipeline_run,
    summary,
)

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(PIPELINE_TIMEOUT + 600)]

SELECTION = "forced_release_blocker"
FORCED_UNIT = REPO / "tests" / "test_forced_release_blocker.py"
FORCED_E2E = REPO / "tests" / "e2e" / "test_forced_release_blocker.py"
FORCED_UNIT_TEST = '''"""Written by tests/pipeline/test_blocked_release.py for one pipeline run; removed after it."""

import pytest


def test_fails_on_purpose_in_the_first_test_job():
    pytest.fail("forced by tests/pipeline/test_blocked_release.py: this tag must not be released")
'''
FORCED_E2E_TEST = '''"""Written by tests/pipeline/test_blocked_release.py for one pipeline run; removed after it."""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.installed_only, pytest.mark.compat]


def test_fails_on_purpose_on_the_installed_release():
    pytest.fail("forced by tests/pipeline/test_blocked_release.py: this tag must not be released")
'''
# How soon the first test job must fail: make install and pytest's start, one test.
FIRST_FAILURE_SECONDS = 60


@pytest.fixture(scope="module")
def blocked():
    for path in (FORCED_UNIT, FORCED_E2E):
        assert not path.exists(), f"{path} is left from an earlier run: remove it"
    FORCED_UNIT.write_text(FORCED_UNIT_TEST)
    FORCED_E2E.write_text(FORCED_E2E_TEST)
    try:
        with pipeline_run(SELECTION) as run_:
            yield run_
    finally:
        FORCED_UNIT.unlink(missing_ok=True)
        FORCED_E2E.unlink(missing_ok=True)


def test_the_pipeline_fails_in_its_test_jobs_and_runs_no_release_job(blocked):
    assert blocked.returncode != 0, "scripts/pipeline.sh run passed with failing tests"
    assert summary(blocked.log) == {
        "lint": "PASS",
        "release-check": "PASS",
        "test-unit": "FAIL",
        "test-cluster": "PASS",
        "test-compat": "PASS",
        "build-image": "PASS",
        "e2e-kind": "FAIL",
    }, blocked.log[-3000:]
    for job in ("promote", "sign", "publish-charts", "gitlab-release"):
        assert logged_at(blocked.log, job, "starting") is None, f"{job} ran"
    assert blocked.deploy_log == ""


def test_the_first_test_job_failed_within_seconds_on_the_forced_test_alone(blocked):
    assert junit_outcomes("test-unit") == {"test_fails_on_purpose_in_the_first_test_job": "failed"}
    seconds = job_seconds(blocked.log, "test-unit")
    assert seconds < FIRST_FAILURE_SECONDS, f"test-unit took {seconds:.0f}s to fail"
    # test-cluster ran the same selection: the e2e test, which needs an installed release, skipped.
    assert junit_outcomes("test-cluster") == {"test_fails_on_purpose_on_the_installed_release": "skipped"}
    # So did test-compat (the test is marked compat too, so that its selection is not empty).
    assert junit_outcomes("test-compat") == {"test_fails_on_purpose_on_the_installed_release": "skipped"}


def test_the_registry_holds_the_commit_tag_only_and_no_chart(blocked):
    _, catalog = blocked.registry("/v2/_catalog")

    assert sorted(catalog["repositories"]) == [f"gpu-scheduler/{image}" for image in IMAGES], catalog
    for image in IMAGES:
        _, tags = blocked.registry(f"/v2/gpu-scheduler/{image}/tags/list")
        # build-image's index and the image of each platform it lists, nothing promoted.
        assert sorted(tags["tags"]) == sorted([blocked.commit] + [f"{blocked.commit}-{arch}" for arch in ARCHES]), tags


def test_the_e2e_jobs_junit_report_names_the_failure(blocked):
    reports = junit_reports("e2e-kind")

    assert reports, "e2e-kind left no JUnit report"
    assert sum(report["failures"] for report in reports) == 1, reports
    text = "".join(path.read_text() for path in JUNIT_DIR.glob("e2e-kind-*.xml"))
    assert "test_fails_on_purpose_on_the_installed_release" in text


def test_the_failed_e2e_kept_the_kind_clusters_logs(blocked):
    nodes = [path for path in KIND_LOGS.iterdir() if path.is_dir()] if KIND_LOGS.is_dir() else []

    assert nodes, f"no node logs in {KIND_LOGS}"
    # kind export logs: each node's kubelet and containerd journal, and its pods' logs.
    for node in nodes:
        assert (node / "kubelet.log").stat().st_size > 0, node
        assert (node / "containerd.log").exists(), node
    assert any((node / "pods").is_dir() for node in nodes), nodes

"""Written by tests/pipeline/test_blocked_release.py for one pipeline run; removed after it."""

import pytest


def test_fails_on_purpose_in_the_first_test_job():
    pytest.fail("forced by tests/pipeline/test_blocked_release.py: this tag must not be released")

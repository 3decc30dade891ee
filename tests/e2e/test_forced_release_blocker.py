"""Written by tests/pipeline/test_blocked_release.py for one pipeline run; removed after it."""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.installed_only, pytest.mark.compat]


def test_fails_on_purpose_on_the_installed_release():
    pytest.fail("forced by tests/pipeline/test_blocked_release.py: this tag must not be released")

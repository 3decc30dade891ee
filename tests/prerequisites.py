"""What a test needs that this machine may lack (a cluster, a Docker engine, a release).

CI provides all of it, so there a missing one fails the test; elsewhere the test is skipped,
with a message that says what to run or install.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(message: str, ci_detail: str = "") -> NoReturn:
    """Fails the test under CI=true (with `ci_detail` after the message), skips it elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}\n{ci_detail}" if ci_detail else message, pytrace=False)
    pytest.skip(message)

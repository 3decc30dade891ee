"""Polling with a deadline, and a failure that says what was expected and what was seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class NotYet(Exception):
    """Raised by a probe that is not satisfied yet; str() is what it saw."""


class WaitTimeout(AssertionError):
    """A wait ran out of time. An AssertionError so pytest reports it as a failed check."""


def wait_for(what: str, probe: Callable[[], T], timeout: float, interval: float = 0.2) -> T:
    """Calls probe() until it returns instead of raising NotYet; returns its value.

    On timeout the error names `what` was awaited and the probe's last NotYet
    message, e.g. "timed out after 30s waiting for 5 pods bound; last seen:
    3 bound (web-3, web-4 pending)".
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return probe()
        except NotYet as err:
            seen = str(err) or "(nothing)"
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}; last seen: {seen}")
        time.sleep(interval)


def wait_until(
    what: str, probe: Callable[[], T], timeout: float, interval: float = 0.2, explain: Callable[[], str] | None = None
) -> T:
    """Calls probe() until it returns something truthy; returns that.

    For probes that answer yes or no rather than say what they saw: on timeout the error
    names `what` was awaited, with explain()'s text when given."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain else ""
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)

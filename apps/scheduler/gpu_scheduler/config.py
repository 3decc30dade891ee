"""Flag defaults from the environment, so a container is configured the Kubernetes way."""

from __future__ import annotations

import argparse
import os

# The schedulerName whose pods are ours, unless --scheduler-name says otherwise.
DEFAULT_SCHEDULER_NAME = "gpu-scheduler"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env(name: str, default: str) -> str:
    """The environment variable `name`, or `default` when unset or empty."""
    return os.environ.get(name) or default


def env_help(text: str, name: str) -> str:
    """A flag's help text that names its environment variable and default."""
    return f"{text} (env {name}; default: %(default)s)"


def boolean(value: str) -> bool:
    """argparse type for `--flag=true|false`, the form Kubernetes components use."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return number

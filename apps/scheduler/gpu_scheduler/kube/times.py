"""Timestamps in the formats the Kubernetes API uses."""

from __future__ import annotations

from datetime import datetime, timezone


def micro_time(epoch: float) -> str:
    """metav1.MicroTime (Events' eventTime, Leases' renewTime) for a Unix time."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

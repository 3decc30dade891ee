"""Timestamps in the formats the Kubernetes API uses."""

from __future__ import annotations

from datetime import UTC, datetime


def micro_time(epoch: float) -> str:
    """metav1.MicroTime (Events' eventTime, Leases' renewTime) for a Unix time."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(epoch: float) -> str:
    """metav1.Time (conditions' lastTransitionTime): whole seconds."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

"""Decisions on plain data: which node, whether it can take the pod, which GPUs are held."""

from .decide import ENV_NOT_INJECTED, GPU_SHARED, BindWarning, Decision, decide, injected_devices
from .ledger import GpuLedger, SharingPolicy
from .nodes import (
    DEFAULT_ALIAS_LABEL,
    AmbiguousAliasError,
    NodeIndex,
    NodeInfo,
    NodeNotFoundError,
    NodeResolutionError,
    unschedulable_reason,
)

__all__ = [
    "DEFAULT_ALIAS_LABEL",
    "ENV_NOT_INJECTED",
    "GPU_SHARED",
    "BindWarning",
    "AmbiguousAliasError",
    "Decision",
    "GpuLedger",
    "NodeIndex",
    "NodeInfo",
    "NodeNotFoundError",
    "NodeResolutionError",
    "SharingPolicy",
    "decide",
    "injected_devices",
    "unschedulable_reason",
]

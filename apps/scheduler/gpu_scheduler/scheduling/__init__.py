"""Decisions on plain data: which node, whether it can take the pod, which GPUs are held."""

from .cache import AssignedPod, ClusterCache
from .decide import ANY_NODE_CHANGE, DYNAMIC_RESOURCES, GPU_SHARED, BindWarning, Code, Decision, decide
from .filters import FilterFailure, run_filters, unavailable_message
from .ledger import GpuLedger, SharingPolicy
from .nodes import (
    DEFAULT_ALIAS_LABEL,
    GPU_RESOURCE,
    AmbiguousAliasError,
    NodeIndex,
    NodeInfo,
    NodeNotFoundError,
    NodeResolutionError,
    Taint,
)
from .ports import NODE_PORTS, HostPort, UsedPorts, host_ports
from .resources import CPU, MEMORY, PODS, NodeUsage, Requests, requests_of
from .volumes import VOLUME_BINDING, WAIT_FOR_FIRST_CONSUMER, Claim, Volume, VolumeCache

__all__ = [
    "CPU",
    "DEFAULT_ALIAS_LABEL",
    "DYNAMIC_RESOURCES",
    "GPU_RESOURCE",
    "GPU_SHARED",
    "MEMORY",
    "NODE_PORTS",
    "PODS",
    "VOLUME_BINDING",
    "WAIT_FOR_FIRST_CONSUMER",
    "ANY_NODE_CHANGE",
    "AmbiguousAliasError",
    "AssignedPod",
    "BindWarning",
    "Claim",
    "ClusterCache",
    "Code",
    "Decision",
    "FilterFailure",
    "GpuLedger",
    "HostPort",
    "NodeIndex",
    "NodeInfo",
    "NodeNotFoundError",
    "NodeResolutionError",
    "NodeUsage",
    "Requests",
    "SharingPolicy",
    "Taint",
    "UsedPorts",
    "Volume",
    "VolumeCache",
    "decide",
    "host_ports",
    "requests_of",
    "run_filters",
    "unavailable_message",
]

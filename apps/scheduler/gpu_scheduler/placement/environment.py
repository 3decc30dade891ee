"""The GPUs a pod's containers were given: CUDA_VISIBLE_DEVICES as their environment says.

This, not the gpu-scheduler/placement annotation, is what a live pod holds. A
container's environment cannot change once the pod exists, and it is what the
workload reads; the annotation is a copy anyone who may edit the pod can
overwrite (`kubectl annotate --overwrite`), and no webhook sees that edit.

The webhook writes one literal value, the devices of the pod's map line, into
every init container and container when the pod is created (webhook/patch.py).
Ephemeral containers cannot exist at creation; `kubectl debug` adds them later
and the webhook gives them this same value, so they are not read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import quote
from .grammar import device_identity, is_device

CUDA_ENV = "CUDA_VISIBLE_DEVICES"
# The containers the webhook gives devices to at creation, in spec order.
GIVEN_CONTAINER_LISTS = ("initContainers", "containers")
# A message names this many containers at most; a pod may have hundreds.
_MAX_DESCRIBED = 8


def given_value(container: Mapping) -> str | None:
    """The container's CUDA_VISIBLE_DEVICES as a literal value, or None when it has none.

    With the name twice the last entry wins, as for the kubelet. A value taken from
    elsewhere (valueFrom) counts as none: the webhook never writes one (it replaces
    it), and the scheduler cannot read a ConfigMap's or a field's value at bind time.
    An entry without "value" is the empty string, as the API omits it.
    """
    value = None
    for item in container.get("env") or ():
        if isinstance(item, Mapping) and item.get("name") == CUDA_ENV:
            literal = item.get("valueFrom") is None
            value = str(item.get("value") or "") if literal else None
    return value


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """(container name, its CUDA_VISIBLE_DEVICES or None) for every init container and
    container, in spec order."""

    values: tuple[tuple[str, str | None], ...]

    @property
    def none_given(self) -> bool:
        """No container has a value: the pod was not admitted by the webhook, nor set its own."""
        return all(value is None for _, value in self.values)

    @property
    def agreed(self) -> str | None:
        """The one value every container has; None when one has none or two differ."""
        distinct = {value for _, value in self.values}
        return next(iter(distinct)) if len(distinct) == 1 else None

    @property
    def disagree(self) -> bool:
        """Some containers have a value but not all the same one. The webhook gives them all one
        value, so it did not write these (or another mutating webhook changed some after it)."""
        return not self.none_given and self.agreed is None

    def devices(self) -> tuple[str, ...]:
        """Every device any container was given, once each (by identity), in order; tokens the
        map could not hold (`all`, `-1`) are left out, since no map line can ask for them."""
        seen: dict[str, str] = {}
        for _, value in self.values:
            for token in _tokens(value):
                if is_device(token):
                    seen.setdefault(device_identity(token), token)
        return tuple(seen.values())

    def describe(self) -> str:
        """`main='0,1', sidecar unset`, for messages."""
        shown = [f"{name}={quote(value)}" if value is not None else f"{name} unset" for name, value in self.values]
        if len(shown) > _MAX_DESCRIBED:
            shown = [*shown[:_MAX_DESCRIBED], f"and {len(shown) - _MAX_DESCRIBED} more"]
        return ", ".join(shown)


def _tokens(value: str | None) -> Iterable[str]:
    return (token.strip() for token in (value or "").split(",") if token.strip())


def container_devices(pod: Mapping) -> ContainerDevices:
    """What the pod's init containers and containers were given (pod as API JSON, or as
    kube.objects trims it)."""
    spec = pod.get("spec") or {}
    values = tuple(
        (str(container.get("name") or ""), given_value(container))
        for field in GIVEN_CONTAINER_LISTS
        for container in spec.get(field) or ()
        if isinstance(container, Mapping)
    )
    return ContainerDevices(values)

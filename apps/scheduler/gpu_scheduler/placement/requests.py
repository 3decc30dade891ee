"""Lines that ask for a number of GPUs and leave the node and the devices to the scheduler.

    <index>=*:gpus=<count>                 <count> GPUs on any node the pod may run on
    <index>=*[<selector>]:gpus=<count>     ... on a node whose labels match <selector>
    *=*:gpus=<count>                       the line of every pod that has no line of its own

`*` is never a node name nor an alias (neither may contain it), and `gpus=` never a device,
so no map that was valid before means anything else now. <selector> is a label selector as
kubectl's `-l` takes it: requirements separated by commas, each `key=value`, `key==value`,
`key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (the label exists) or `!key` (it
does not). The scheduler's choice (scheduling.dynamic) is written in the pod's Binding as a
pinned line's devices would be.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import InvalidDeviceError, InvalidNodeError, quote
from .numbers import bounded_int

ANY_NODE = "*"
# The index of the line for every pod without one of its own (and pods without an index).
ANY_INDEX = "*"
COUNT_PREFIX = "gpus="
# More GPUs than any node has; a bound, so that a count of a thousand digits is an error.
MAX_GPUS_PER_POD = 1024

# A label key: an optional DNS subdomain prefix and a name (k8s.io/apimachinery's
# IsQualifiedName); a label value: at most 63 characters of the same alphabet.
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_LABEL_VALUE = re.compile(rf"(?:{_NAME})?")
_SET_REQUIREMENT = re.compile(r"(\S+)\s+(in|notin)\s*\((.*)\)")
_COUNT = re.compile(r"[0-9]+")

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of a node selector, as a NodeSelectorRequirement has it."""

    key: str
    operator: str  # IN, NOT_IN, EXISTS or DOES_NOT_EXIST
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == IN:
            return present and labels[self.key] in self.values
        if self.operator == NOT_IN:
            return not present or labels[self.key] not in self.values
        return present if self.operator == EXISTS else not present


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """A line that asks for `count` GPUs on a node `selector` admits (every node when empty)."""

    index: int | None  # None: the line of every pod (ANY_INDEX)
    count: int
    selector: tuple[Requirement, ...]
    selector_text: str  # as written, for messages
    line: int

    def admits(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.selector)

    def describe(self) -> str:
        """`2 GPUs on nodes with pool=a100`, for messages."""
        gpus = f"{self.count} GPU{'s' if self.count != 1 else ''}"
        return f"{gpus} on nodes with {self.selector_text}" if self.selector else f"{gpus} on any node"


def is_label_key(text: str) -> bool:
    return bool(_LABEL_KEY.fullmatch(text))


def is_request(node_part: str) -> bool:
    """Whether a line's node part asks the scheduler to choose (`*` or `*[...]`)."""
    return node_part.startswith(ANY_NODE)


def parse_request(line: int, text: str, index: int | None, node_part: str, devices_part: str) -> GpuRequest:
    """The request of a line whose node part is `*` or `*[<selector>]`; MapLineError when wrong."""
    selector_text = ""
    if node_part != ANY_NODE:
        if not (node_part.startswith(f"{ANY_NODE}[") and node_part.endswith("]")):
            raise InvalidNodeError(
                line,
                text,
                f"{quote(node_part)} in {quote(text)} is neither a node nor `*` (any node) nor "
                "`*[<label selector>]` (any node whose labels match)",
            )
        selector_text = node_part[2:-1].strip()
        if not selector_text:
            raise InvalidNodeError(line, text, f"empty node selector `*[]` in {quote(text)}; write `*` for any node")
    selector = parse_selector(line, text, selector_text) if selector_text else ()
    return GpuRequest(index, _parse_count(line, text, devices_part.strip()), selector, selector_text, line)


def _parse_count(line: int, text: str, token: str) -> int:
    if not token.startswith(COUNT_PREFIX):
        raise InvalidDeviceError(
            line,
            text,
            f"{quote(token)} in {quote(text)}: a line for any node (`*`) asks for a number of GPUs, "
            f"`{COUNT_PREFIX}<count>`; the scheduler chooses the devices",
        )
    digits = token[len(COUNT_PREFIX) :].strip()
    count = bounded_int(digits, MAX_GPUS_PER_POD) if _COUNT.fullmatch(digits) else None
    if count is None or count < 1:
        raise InvalidDeviceError(
            line,
            text,
            f"{quote(token)} in {quote(text)}: the count must be a whole number from 1 to {MAX_GPUS_PER_POD}",
        )
    return count


def _split_requirements(selector: str) -> list[str]:
    """The selector's requirements: split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(selector):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(selector[start:at])
            start = at + 1
    parts.append(selector[start:])
    return [part.strip() for part in parts]


def parse_selector(line: int, text: str, selector: str) -> tuple[Requirement, ...]:
    """A kubectl-style label selector; InvalidNodeError naming the requirement that is wrong."""
    requirements = []
    for part in _split_requirements(selector):
        requirement = _parse_requirement(part)
        if requirement is None:
            raise InvalidNodeError(
                line,
                text,
                f"{quote(part)} in the node selector of {quote(text)} is not a label requirement "
                "(key=value, key!=value, key in (a,b), key notin (a,b), key, !key; keys and values as "
                "Kubernetes labels have them)",
            )
        requirements.append(requirement)
    return tuple(requirements)


def _parse_requirement(part: str) -> Requirement | None:
    matched = _SET_REQUIREMENT.fullmatch(part)
    if matched is not None:
        key, operator, listed = matched.groups()
        values = tuple(value.strip() for value in listed.split(","))
        if not _LABEL_KEY.fullmatch(key) or not all(_LABEL_VALUE.fullmatch(v) for v in values):
            return None
        return Requirement(key, IN if operator == "in" else NOT_IN, values)
    for operator, name in (("!=", NOT_IN), ("==", IN), ("=", IN)):
        key, found, value = part.partition(operator)
        if found:
            key, value = key.strip(), value.strip()
            if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
                return None
            return Requirement(key, name, (value,))
    if part.startswith("!"):
        key = part[1:].strip()
        return Requirement(key, DOES_NOT_EXIST) if _LABEL_KEY.fullmatch(key) else None
    return Requirement(part, EXISTS) if _LABEL_KEY.fullmatch(part) else None

"""Reading one sample out of a Prometheus text exposition. Pure."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the first sample called `name` whose labels include `labels`."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] != name:
            continue
        found = dict(_LABEL.findall(match["labels"] or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match["value"])
    return None

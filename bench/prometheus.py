"""Reading samples out of a Prometheus text exposition. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterator

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """Every sample of the exposition: (name, labels, value); comments and other lines skipped."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            yield match["name"], dict(_LABEL.findall(match["labels"] or "")), float(match["value"])


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the first sample called `name` whose labels include `labels`."""
    for found_name, found, value in samples(text):
        if found_name == name and all(found.get(k) == v for k, v in labels.items()):
            return value
    return None

"""Typed errors of the placement layer.

Every error a user can cause carries a message that says what is wrong, where
(line number and text, or the pod's name) and, where it helps, what to do.
"""

from __future__ import annotations

# Offending text is quoted in messages; a 256 KiB line must not become a
# 256 KiB event message.
_MAX_QUOTED = 80


def quote(text: str) -> str:
    """The offending text as it appears in a message, shortened if long."""
    if len(text) > _MAX_QUOTED:
        text = text[: _MAX_QUOTED - 3] + "..."
    return repr(text)


class PlacementError(ValueError):
    """Base of every error that keeps a pod from being placed; str() is for users."""


class MapLineError(PlacementError):
    """One violation of the map grammar, on one line."""

    def __init__(self, line: int, text: str, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.text = text
        self.message = message


class MalformedEntryError(MapLineError):
    """The line is not of the form <index>=<node>:<devices>."""


class InvalidIndexError(MapLineError):
    """The index is not a non-negative integer."""


class DuplicateIndexError(MapLineError):
    """The same index appears on two lines."""


class InvalidNodeError(MapLineError):
    """The node is neither a node name nor an alias label value."""


class InvalidDeviceError(MapLineError):
    """A device is neither a non-negative integer nor a GPU-/MIG- UUID."""


class DuplicateDeviceError(MapLineError):
    """The same device appears twice in one entry."""


class MigDeviceError(MapLineError):
    """A MIG device shares its line with another device, which CUDA cannot give one process."""


class MixedSpellingError(MapLineError):
    """A line names GPUs both by ordinal and by UUID, which may be the same GPU twice."""


class EmptyMapError(MapLineError):
    """The annotation has no entry at all."""


class MapTooLargeError(MapLineError):
    """The annotation is larger than Kubernetes allows any object's annotations to be."""


class InvalidMapError(PlacementError):
    """The grammar violations of one annotation, in line order.

    `errors` holds the first ones (the parser keeps a bounded number);
    `total` counts them all.
    """

    # Enough to fix a broken map; an event or a denial must stay readable.
    MAX_LISTED = 20

    def __init__(self, errors: list[MapLineError], total: int | None = None) -> None:
        self.errors = errors
        self.total = len(errors) if total is None else total
        lines = [str(e) for e in errors[: self.MAX_LISTED]]
        if self.total > self.MAX_LISTED:
            lines.append(f"... and {self.total - self.MAX_LISTED} more errors")
        super().__init__("\n".join(lines))


class MissingMapError(PlacementError):
    """The pod has no gpu-scheduling-map annotation."""


class PodIndexError(PlacementError):
    """The pod's index cannot be told."""


class MissingEntryError(PlacementError):
    """The map has no entry for the pod's index."""

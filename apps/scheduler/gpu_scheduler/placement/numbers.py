"""Decimal text to int, bounded before it is converted.

int() refuses a string of more than 4,300 digits with a bare ValueError
(Python's guard against quadratic conversion time). Every number the
placement layer reads has a much smaller upper bound, so the length of the
text, leading zeros aside, decides first and int() only ever sees a few digits.
"""

from __future__ import annotations

# Indexes come from StatefulSet ordinals and Job completion indexes, both int32.
MAX_INDEX = 2**31 - 1
# CUDA takes device ordinals as a C int.
MAX_DEVICE_ORDINAL = 2**31 - 1

_SHOWN_DIGITS = 20


def bounded_int(digits: str, maximum: int) -> int | None:
    """The value of `digits` (ASCII 0-9 only, checked by the caller), or None when it is larger than `maximum`."""
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(maximum)):
        return None
    value = int(significant)
    return value if value <= maximum else None


def shown(digits: str) -> str:
    """A number as a message shows it: a long one cut, with its length."""
    if len(digits) <= _SHOWN_DIGITS:
        return digits
    return f"{digits[:_SHOWN_DIGITS]}... ({len(digits)} digits)"

"""Percentiles, medians and ratios of benchmark figures. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100), interpolated linearly between the two
    nearest ranks (numpy's default), so p50 of an even count is the mean of
    the middle two. NaN for no values."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0-100, got {p}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    """Median of the values that are numbers (NaN when none is)."""
    return percentile([v for v in values if not math.isnan(v)], 50)


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of latencies given in seconds, in seconds."""
    return {
        "p50": percentile(seconds, 50),
        "p99": percentile(seconds, 99),
        "max": max(seconds) if seconds else math.nan,
    }


def ratio(numerator: float, denominator: float) -> float:
    if math.isnan(numerator) or math.isnan(denominator) or denominator <= 0:
        return math.nan
    return numerator / denominator


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Ratios of runs made side by side (round r of one runner over round r of the other)."""
    if len(numerators) != len(denominators):
        raise ValueError(f"cannot pair {len(numerators)} runs with {len(denominators)}")
    return [ratio(n, d) for n, d in zip(numerators, denominators, strict=True)]

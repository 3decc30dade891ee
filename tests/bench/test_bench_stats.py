"""The benchmark's arithmetic: percentiles, medians, paired ratios, Prometheus samples."""

import math

import pytest

from bench.prometheus import sample
from bench.stats import latency_summary, median, paired_ratios, percentile, ratio


def test_percentile_interpolates_between_the_two_nearest_ranks():
    values = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 99) == pytest.approx(3.97)


def test_percentile_of_one_value_is_that_value_and_of_none_is_nan():
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_percentile_rejects_a_rank_outside_0_to_100():
    with pytest.raises(ValueError, match="within 0-100"):
        percentile([1.0], 101)


def test_p99_of_a_hundred_latencies_sits_just_below_the_slowest():
    latencies = [i / 1000 for i in range(1, 101)]  # 1 ms .. 100 ms
    summary = latency_summary(latencies)
    assert summary["p50"] == pytest.approx(0.0505)
    assert summary["p99"] == pytest.approx(0.09901)
    assert summary["max"] == 0.1


def test_median_ignores_runs_that_measured_nothing():
    assert median([3.0, math.nan, 1.0, 2.0]) == 2.0
    assert math.isnan(median([math.nan]))


def test_ratios_pair_runs_of_the_same_round():
    assert paired_ratios([100.0, 90.0], [50.0, 30.0]) == [2.0, 3.0]


def test_a_ratio_over_nothing_is_nan_not_a_crash():
    assert math.isnan(ratio(10.0, 0.0))
    assert math.isnan(ratio(math.nan, 2.0))


def test_ratios_of_unequal_run_counts_are_refused():
    with pytest.raises(ValueError, match="cannot pair 2 runs with 1"):
        paired_ratios([1.0, 2.0], [1.0])


def test_sample_finds_the_series_with_the_given_labels():
    text = "\n".join(
        [
            "# HELP x_seconds A histogram.",
            'x_seconds_sum{result="error"} 9.5',
            'x_seconds_sum{result="scheduled"} 1.25',
            'x_seconds_count{result="scheduled"} 5.0',
            "plain_total 3",
        ]
    )
    assert sample(text, "x_seconds_sum", result="scheduled") == 1.25
    assert sample(text, "x_seconds_count", result="scheduled") == 5.0
    assert sample(text, "plain_total") == 3.0
    assert sample(text, "x_seconds_sum", result="unknown") is None

"""kit.core.durations: a job's measured durations and the run lease they call for."""

from __future__ import annotations

import pytest

from kit.core.durations import (
    MIN_SAMPLES,
    RECENT,
    REMEASURE_MS,
    Durations,
    LeaseBounds,
    durations_of,
    quantile,
    remeasure_due,
    sized_lease_ms,
)

BOUNDS = LeaseBounds(1_000, 600_000)


def test_quantiles_are_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert (quantile(values, 0.5), quantile(values, 0.99), quantile(values, 1.0)) == (50, 99, 100)
    assert quantile([7], 0.99) == 7
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_a_job_is_leased_half_again_its_p99_within_the_bounds() -> None:
    measured = durations_of([200] * 90 + [4_000] * 10)
    assert measured == Durations(200, 4_000, 100)
    assert sized_lease_ms(measured, BOUNDS) == 6_000
    # a dead worker's run is recovered one p99 and one beat (a third of the lease) after
    # it began; a run that takes its p99 ends before the fence (a quarter of the lease)
    lease = 6_000
    assert lease == measured.p99_ms + lease // 3 and measured.p99_ms < lease - lease // 4
    assert sized_lease_ms(durations_of([10] * 20), BOUNDS) == 1_000  # the lower bound
    assert sized_lease_ms(durations_of([10**7] * 20), BOUNDS) == 600_000  # the upper bound


def test_too_few_runs_measured_keep_the_fleets_default() -> None:
    assert sized_lease_ms(durations_of([5_000] * (MIN_SAMPLES - 1)), BOUNDS) is None
    assert sized_lease_ms(durations_of([5_000] * MIN_SAMPLES), BOUNDS) == 7_500
    assert sized_lease_ms(None, BOUNDS) is None and durations_of([]) is None


def test_bounds_must_be_ordered_and_positive() -> None:
    with pytest.raises(ValueError):
        LeaseBounds(2_000, 1_000)
    with pytest.raises(ValueError):
        LeaseBounds(0, 1_000)


def test_a_job_never_measured_or_short_of_samples_is_measured_at_every_refresh() -> None:
    assert remeasure_due(None, 0, now_ms=1_000)
    assert remeasure_due(1_000, MIN_SAMPLES - 1, now_ms=1_001)


def test_a_measured_job_is_measured_again_only_after_the_interval() -> None:
    assert not remeasure_due(1_000, MIN_SAMPLES, now_ms=1_000 + REMEASURE_MS - 1)
    assert remeasure_due(1_000, MIN_SAMPLES, now_ms=1_000 + REMEASURE_MS)
    assert not remeasure_due(1_000, RECENT, now_ms=60_000, every_ms=60_000)
    assert remeasure_due(1_000, RECENT, now_ms=61_000, every_ms=60_000)


def test_bounds_may_pin_the_lease_to_one_length_and_refuse_a_zero_or_crossed_pair() -> None:
    assert LeaseBounds(1, 1).clamp(5_000) == 1
    for lo, hi in ((0, 5), (6, 5)):
        with pytest.raises(ValueError, match=r"^lease bounds: need 0 < min_ms <= max_ms$"):
            LeaseBounds(lo, hi)


def test_the_quantile_of_nothing_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^quantile of nothing$"):
        quantile([], 0.5)

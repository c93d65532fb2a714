"""The token bucket of a tenant's API requests (kit.core.rate): over any sequence of
requests, no more are allowed than the burst plus what the rate refilled, a refusal's
Retry-After is a whole second or more and waiting it is enough, and a bucket left alone
fills up to the burst."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.rate import Bucket, take

rates = st.floats(min_value=0.01, max_value=1000, allow_nan=False, allow_infinity=False)
bursts = st.integers(min_value=1, max_value=500)
gaps = st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), min_size=1, max_size=300)


@settings(max_examples=300, deadline=None)
@given(rates, bursts, gaps)
def test_no_more_allowed_than_the_burst_and_the_refill(
    rate: float, burst: int, steps: list[float]
) -> None:
    bucket: Bucket | None = None
    now = 0.0
    allowed = 0
    for gap in steps:
        now += gap
        taken = take(bucket, rate, burst, now)
        bucket = taken.bucket
        allowed += taken.allowed
        assert allowed <= burst + rate * now + 1e-6
        assert 0 <= bucket.tokens <= burst


@settings(max_examples=300, deadline=None)
@given(rates, bursts, gaps)
def test_a_refusal_says_a_whole_second_or_more_and_waiting_it_is_enough(
    rate: float, burst: int, steps: list[float]
) -> None:
    bucket: Bucket | None = None
    now = 0.0
    for gap in steps:
        now += gap
        taken = take(bucket, rate, burst, now)
        bucket = taken.bucket
        if taken.allowed:
            assert taken.retry_after_s == 0
        else:
            assert taken.retry_after_s >= 1 and taken.retry_after_s == math.ceil(
                taken.retry_after_s
            )
            assert take(bucket, rate, burst, now + taken.retry_after_s).allowed


@given(rates, bursts)
def test_a_new_bucket_allows_exactly_the_burst_at_once(rate: float, burst: int) -> None:
    bucket: Bucket | None = None
    results = []
    for _ in range(burst + 1):
        taken = take(bucket, rate, burst, 100.0)
        bucket = taken.bucket
        results.append(taken.allowed)
    assert results == [True] * burst + [False]


@given(rates, bursts, st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_a_clock_that_goes_back_refills_nothing(rate: float, burst: int, back: float) -> None:
    empty = Bucket(0.0, 1e6)
    assert not take(empty, rate, burst, 1e6 - back).allowed

"""kit.core.backlog: how much a worker takes on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.core.backlog import (
    ASSUMED_SLOT_S,
    RATE_WEIGHT,
    RATE_WINDOW_MS,
    StartRate,
    claim_room,
    start_budget,
)


def test_an_unmeasured_worker_assumes_a_second_per_slot() -> None:
    # 1,024 slots, 30 s lease: what it starts in 15 s at 1,024 a second
    assert start_budget(1024, 30_000, None) == int(1024 / ASSUMED_SLOT_S * 15)
    assert start_budget(2, 4_000, None) == 4


def test_a_measured_rate_replaces_the_assumption_and_never_goes_below_the_slots() -> None:
    assert start_budget(8, 30_000, 100.0) == 1500
    assert start_budget(8, 30_000, 0.1) == 8  # a crawling worker still fills its slots


@given(st.integers(1, 4096), st.integers(1000, 600_000), st.none() | st.floats(0, 1e6))
def test_the_budget_is_what_starts_within_half_the_lease_and_at_least_the_slots(
    slots: int, ttl_ms: int, rate: float | None
) -> None:
    budget = start_budget(slots, ttl_ms, rate)
    per_s = slots / ASSUMED_SLOT_S if rate is None else rate
    assert budget >= slots
    assert budget == max(slots, int(per_s * ttl_ms / 2000))


def test_claim_room_is_the_budget_less_what_waits_and_never_negative() -> None:
    assert claim_room(0, 10) == 10
    assert claim_room(7, 10) == 3
    assert claim_room(12, 10) == 0


def test_the_rate_is_measured_only_over_windows_at_capacity() -> None:
    rate = StartRate()
    rate.observe(0, 0, waiting=True)
    rate.observe(RATE_WINDOW_MS, 50, waiting=True)  # a full window at capacity: 50/s
    assert rate.per_s == 50
    rate.observe(RATE_WINDOW_MS + 500, 60, waiting=False)  # capacity left mid-window
    rate.observe(2 * RATE_WINDOW_MS + 10, 70, waiting=True)
    assert rate.per_s == 50  # that window said how much work came, not how much it can do
    rate.observe(3 * RATE_WINDOW_MS + 10, 170, waiting=True)  # 100/s at capacity
    # a moving average: the newest window weighs RATE_WEIGHT (0.3), the past the rest
    assert rate.per_s == pytest.approx(RATE_WEIGHT * 100 + (1 - RATE_WEIGHT) * 50)


def test_an_idle_worker_has_no_rate() -> None:
    rate = StartRate()
    for t in range(0, 10 * RATE_WINDOW_MS, 100):
        rate.observe(t, t // 100, waiting=False)
    assert rate.per_s is None

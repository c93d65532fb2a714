import pytest

from kit.core.defaults import SCAN_AHEAD_MS
from kit.core.dispatch import (
    PRIORITY_TIERS,
    TimerWheel,
    catch_up_order,
    next_scan_at_ms,
    rescan_at_once,
    scan_window,
    tier_rank,
    tier_to_serve,
)
from kit.core.errors import FieldError


def test_scan_window():
    assert scan_window(10_000) == (10_000, 10_000 + SCAN_AHEAD_MS)
    assert scan_window(10_000, 2_000) == (10_000, 12_000)
    with pytest.raises(FieldError):
        scan_window(0, -1)


def test_tier_rank():
    assert [tier_rank(t) for t in PRIORITY_TIERS] == [0, 1, 2, 3]
    with pytest.raises(FieldError) as exc:
        tier_rank("urgent")
    assert exc.value.field == "priority"


def test_timer_wheel_orders_by_due_then_tier_then_insertion():
    w = TimerWheel()
    w.add(2000, "late-normal")
    w.add(1000, "a-low", "low")
    w.add(1000, "b-normal")
    w.add(1000, "c-critical", "critical")
    w.add(1000, "d-normal")
    w.add(3000, "future")
    assert len(w) == 6 and w.next_due_ms() == 1000
    assert w.pop_due(999) == []
    assert w.pop_due(2000) == ["c-critical", "b-normal", "d-normal", "a-low", "late-normal"]
    assert len(w) == 1 and w.next_due_ms() == 3000
    assert w.pop_due(10_000) == ["future"]
    assert w.next_due_ms() is None and len(w) == 0


def test_timer_wheel_accepts_ranks_and_unorderable_items():
    w = TimerWheel()
    w.add(5, {"id": 1}, 3)
    w.add(5, {"id": 2}, 0)
    assert w.pop_due(5) == [{"id": 2}, {"id": 1}]


def test_catch_up_order_priority_then_age():
    items = [("low", 1), ("normal", 5), ("critical", 9), ("normal", 2), ("high", 7)]
    out = catch_up_order(items, lambda x: x[0], lambda x: x[1])
    assert out == [("critical", 9), ("high", 7), ("normal", 2), ("normal", 5), ("low", 1)]


def test_a_node_rescans_at_once_only_after_a_full_scan_that_took_something():
    assert rescan_at_once(batch_full=True, triggers_taken=3)
    # full but nothing taken: the same rows again, and nothing taken again (a busy loop)
    assert not rescan_at_once(batch_full=True, triggers_taken=0)
    assert not rescan_at_once(batch_full=False, triggers_taken=3)
    assert not rescan_at_once(batch_full=False, triggers_taken=0)


def test_scans_fall_on_whole_periods_so_a_second_is_reached_a_scan_ahead_before_it():
    assert next_scan_at_ms(10_000) == 11_000  # at a boundary: the next one
    assert next_scan_at_ms(10_001) == 11_000
    assert next_scan_at_ms(10_999) == 11_000
    assert next_scan_at_ms(-20_000) == -19_000  # the model's times before T
    assert next_scan_at_ms(1_250, 500) == 1_500
    # the scan that first reaches second T starts at T - scan-ahead
    t, now = 50_000, 38_400
    while scan_window(now)[1] < t:
        now = next_scan_at_ms(now)
    assert now == t - SCAN_AHEAD_MS
    with pytest.raises(FieldError, match="scan_period_ms"):
        next_scan_at_ms(0, 0)


NOW = 1_800_000_000_000  # ms


def test_a_due_backlog_is_served_highest_tier_first():
    assert tier_to_serve([NOW - 5_000, None, NOW - 60_000, NOW], NOW) == 0
    assert tier_to_serve([None, None, NOW - 60_000, NOW - 1], NOW) == 2


def test_a_lower_tiers_run_due_now_comes_before_a_higher_tiers_run_due_later():
    # the soak's starvation: critical and high published ahead, low due now
    assert tier_to_serve([NOW + 3_000, NOW + 1_000, None, NOW - 200], NOW) == 3
    assert tier_to_serve([NOW + 8_000, None, None, NOW + 2_000], NOW) == 3


def test_within_one_second_the_higher_tier_wins():
    second = (NOW // 1000 + 5) * 1000
    assert tier_to_serve([second + 900, None, None, second], NOW) == 0
    assert tier_to_serve([second + 1_000, None, None, second + 999], NOW) == 3


def test_a_tier_with_messages_not_fetched_yet_counts_as_due_now():
    # 0: lag known, next message not here: a lower tier's due run must wait for it
    assert tier_to_serve([0, None, None, NOW - 10_000], NOW) == 0
    assert tier_to_serve([NOW + 5_000, None, 0, None], NOW) == 2


def test_nothing_anywhere_serves_no_tier_and_no_clock_is_strict_rank_order():
    assert tier_to_serve([None, None, None, None], NOW) is None
    assert tier_to_serve([], NOW) is None
    assert tier_to_serve([None, NOW + 60_000, None, NOW - 60_000], None) == 1

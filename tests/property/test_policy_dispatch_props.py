"""Misfire plans partition the missed list; overlap decisions follow the policy; the
timer wheel pops exactly the due items in (due, tier, insertion) order."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.dispatch import (
    PRIORITY_TIERS,
    TimerWheel,
    catch_up_order,
    tier_rank,
    tier_to_serve,
)
from kit.core.invariants import InvariantViolation, check_unique_runs
from kit.core.policies import (
    MISFIRE_KINDS,
    MisfirePolicy,
    OverlapAction,
    OverlapPolicy,
    decide_overlap,
    plan_misfire,
)

NOW_MS = 10**12
missed_lists = st.lists(st.integers(NOW_MS - 86_400_000, NOW_MS), max_size=50, unique=True)
misfire_policies = st.builds(MisfirePolicy, st.sampled_from(MISFIRE_KINDS), st.integers(0, 3600))


@settings(max_examples=200)
@given(missed_lists, misfire_policies)
def test_misfire_plan_partitions_the_missed_list(missed, policy):
    plan = plan_misfire(missed, NOW_MS, policy)
    assert sorted(plan.fire_ms + plan.skipped_ms) == sorted(missed)
    assert plan.fire_ms == sorted(plan.fire_ms) and plan.skipped_ms == sorted(plan.skipped_ms)
    if policy.kind == "run_all":
        assert plan.skipped_ms == []
    elif policy.kind == "run_once":
        assert plan.fire_ms == ([max(missed)] if missed else [])
    else:
        limit = policy.deadline_s * 1000
        assert all(NOW_MS - t <= limit for t in plan.fire_ms)
        assert all(NOW_MS - t > limit for t in plan.skipped_ms)


@settings(max_examples=50)
@given(st.sampled_from(list(OverlapPolicy)), st.integers(0, 1000))
def test_overlap_fires_when_nothing_runs_and_only_allow_or_replace_fire_otherwise(policy, running):
    action = decide_overlap(policy, running)
    if running == 0 or policy is OverlapPolicy.allow:
        assert action is OverlapAction.fire
    else:
        assert action is not OverlapAction.fire
        assert (action is OverlapAction.fire_and_cancel_running) == (
            policy is OverlapPolicy.replace
        )


items = st.lists(st.tuples(st.integers(0, 100), st.sampled_from(PRIORITY_TIERS)), max_size=200)


@settings(max_examples=150)
@given(items, st.lists(st.integers(0, 120), max_size=6))
def test_timer_wheel_pops_due_items_in_order(entries, nows):
    wheel: TimerWheel[int] = TimerWheel()
    for i, (due, tier) in enumerate(entries):
        wheel.add(due, i, tier)
    expected = sorted(
        range(len(entries)), key=lambda i: (entries[i][0], tier_rank(entries[i][1]), i)
    )
    popped: list[int] = []
    for now in sorted(nows):
        batch = wheel.pop_due(now)
        assert all(entries[i][0] <= now for i in batch)
        assert wheel.next_due_ms() is None or wheel.next_due_ms() > now
        popped += batch
        assert len(wheel) == len(entries) - len(popped)
    popped += wheel.pop_due(10**9)
    assert popped == expected


@settings(max_examples=100)
@given(items)
def test_catch_up_order_is_priority_then_age(entries):
    out = catch_up_order(entries, lambda e: e[1], lambda e: e[0])
    assert sorted(out) == sorted(entries)
    keys = [(tier_rank(t), due) for due, t in out]
    assert keys == sorted(keys)


@settings(max_examples=100)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5)), max_size=20))
def test_unique_runs_checker_agrees_with_a_set(runs):
    duplicate = len(set(runs)) != len(runs)
    try:
        check_unique_runs(runs)
    except InvariantViolation:
        assert duplicate
    else:
        assert not duplicate


heads = st.lists(
    st.one_of(st.none(), st.just(0), st.integers(NOW_MS - 86_400_000, NOW_MS + 86_400_000)),
    min_size=0,
    max_size=len(PRIORITY_TIERS),
)


@settings(max_examples=300)
@given(heads, st.integers(NOW_MS - 3_600_000, NOW_MS + 3_600_000))
def test_the_tier_served_is_one_with_the_soonest_second_and_the_highest_within_it(heads, now):
    pick = tier_to_serve(heads, now)
    present = [i for i, h in enumerate(heads) if h is not None]
    if not present:
        assert pick is None
        return
    assert pick in present
    second = {i: max(heads[i], now) // 1000 for i in present}
    soonest = min(second.values())
    assert second[pick] == soonest
    assert pick == min(i for i in present if second[i] == soonest)
    # anything already due (or unknown) outranks every run due in a later second
    if any(heads[i] <= now for i in present):
        assert heads[pick] <= now or second[pick] == now // 1000


@settings(max_examples=200)
@given(heads)
def test_without_a_clock_the_highest_tier_with_anything_is_served(heads):
    present = [i for i, h in enumerate(heads) if h is not None]
    assert tier_to_serve(heads, None) == (present[0] if present else None)

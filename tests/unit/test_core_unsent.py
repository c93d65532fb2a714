"""kit.core.unsent: what a node keeps from a failed publish, and when it tries again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.core.unsent import Unsent


def test_nothing_kept_nothing_due() -> None:
    unsent: Unsent[str] = Unsent()
    assert len(unsent) == 0 and unsent.wait_ms(0) == -1 and unsent.due(10**12) == []


def test_kept_runs_wait_then_come_back_all_at_once() -> None:
    unsent: Unsent[str] = Unsent(first_ms=250, cap_ms=4000)
    assert unsent.failed(["a", "b"], now_ms=1000) == []
    assert unsent.wait_ms(1000) == 250 and unsent.due(1249) == []
    assert unsent.due(1250) == ["a", "b"]
    assert len(unsent) == 0 and unsent.wait_ms(1250) == -1


def test_each_failure_in_a_row_doubles_the_wait_up_to_the_cap() -> None:
    unsent: Unsent[str] = Unsent(first_ms=250, cap_ms=1500)
    waits = []
    for now in range(0, 6000, 1000):
        unsent.failed(["r"], now_ms=now)
        waits.append(unsent.wait_ms(now))
        unsent.due(now + 10_000)  # tried again (and it fails at the next turn)
    assert waits == [250, 500, 1000, 1500, 1500, 1500]


def test_a_publish_that_goes_through_sends_the_kept_runs_at_once() -> None:
    unsent: Unsent[str] = Unsent(first_ms=1000, cap_ms=4000)
    unsent.failed(["a"], now_ms=0)
    unsent.failed(["b"], now_ms=1000)  # waiting 2 s now
    unsent.sent()  # a newer batch got through: the broker answers
    assert unsent.wait_ms(1001) == 0 and unsent.due(1001) == ["a", "b"]
    unsent.failed(["c"], now_ms=2000)  # the doubling starts over
    assert unsent.wait_ms(2000) == 1000


def test_past_the_limit_the_newest_are_left_to_the_reaper() -> None:
    unsent: Unsent[int] = Unsent(limit=5)
    assert unsent.failed([1, 2, 3], now_ms=0) == []
    assert unsent.failed([4, 5, 6, 7], now_ms=0) == [6, 7]
    assert len(unsent) == 5 and unsent.take_all() == [1, 2, 3, 4, 5]
    assert len(unsent) == 0


def test_a_stopping_node_takes_them_all_before_their_time() -> None:
    unsent: Unsent[str] = Unsent(first_ms=4000, cap_ms=4000)
    unsent.failed(["a"], now_ms=0)
    assert unsent.due(1) == [] and unsent.take_all() == ["a"]


@pytest.mark.parametrize(
    ("limit", "first", "cap", "says"),
    [(-1, 1, 1, "limit must not be negative"), (1, 0, 1, "need 0 < first_ms <= cap_ms"),
     (1, 5, 4, "need 0 < first_ms <= cap_ms")],
)  # fmt: skip
def test_bad_settings_are_refused_saying_which(limit: int, first: int, cap: int, says: str) -> None:
    with pytest.raises(ValueError, match=f"^{says}$"):
        Unsent(limit=limit, first_ms=first, cap_ms=cap)


def test_the_smallest_settings_are_accepted() -> None:
    unsent: Unsent[str] = Unsent(limit=0, first_ms=1, cap_ms=1)
    assert unsent.failed(["a"], now_ms=0) == ["a"] and len(unsent) == 0


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["fail", "sent", "due", "all"]),
            st.lists(st.integers(), max_size=6),
            st.integers(0, 5000),
        ),
        max_size=40,
    ),
    st.integers(0, 12),
)
def test_every_run_kept_comes_back_once_or_is_handed_to_the_reaper(steps, limit) -> None:
    """Whatever the order of failures, successes and tries: no run is lost or duplicated
    between the node's hands, the reaper's and the kept set, never more than the limit
    are kept, and nothing comes back before its time."""
    unsent: Unsent[int] = Unsent(limit=limit, first_ms=100, cap_ms=800)
    now, given_in, came_back, to_reaper, serial = 0, [], [], [], 0
    for kind, runs, step in steps:
        now += step
        if kind == "fail":
            runs = list(range(serial, serial + len(runs)))  # each run once
            serial += len(runs)
            given_in += runs
            to_reaper += unsent.failed(runs, now)
        elif kind == "sent":
            unsent.sent()
        elif kind == "due":
            wait = unsent.wait_ms(now)
            got = unsent.due(now)
            assert (got != []) == (wait == 0)
            came_back += got
        else:
            came_back += unsent.take_all()
        assert len(unsent) <= limit
    came_back += unsent.take_all()
    assert sorted(came_back + to_reaper) == sorted(given_in)

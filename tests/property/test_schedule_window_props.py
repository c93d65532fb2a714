"""`fires_in` (a window of fire times in one pass) gives exactly the instants that
iterating `next_fire` gives, DST transition days included; so does `iter_fires` (windows
one after the other), however many of its fires are taken."""

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.schedule import (
    CronSchedule,
    IntervalSchedule,
    Schedule,
    fires_in,
    iter_fires,
    next_fire,
    next_fires,
)

ZONES = [
    "UTC",
    "America/New_York",
    "America/Havana",  # changes at midnight
    "Europe/Paris",
    "Australia/Lord_Howe",  # 30 min shift
    "Asia/Kolkata",
    "America/Santiago",
]
# windows that start just before a transition of one of the zones above
NEAR_TRANSITIONS = [
    datetime(2026, 3, 8, 3, tzinfo=UTC),  # New York, Havana spring forward
    datetime(2026, 11, 1, 4, tzinfo=UTC),  # New York, Havana fall back
    datetime(2026, 3, 29, 0, tzinfo=UTC),  # Paris spring forward
    datetime(2026, 10, 25, 0, tzinfo=UTC),  # Paris fall back
    datetime(2026, 4, 4, 14, tzinfo=UTC),  # Lord Howe fall back (30 min)
    datetime(2026, 9, 6, 2, tzinfo=UTC),  # Santiago spring forward at midnight
]

minutes = st.sampled_from(["0", "*/15", "5,35", "59", "*", "30", "*/5"])
hours = st.sampled_from(["*", "0", "1", "2", "3", "1-3", "0,12", "*/6", "23", "9"])
dows = st.sampled_from(["*", "0", "1-5", "6"])
crons = st.builds(
    lambda m, h, w, z: CronSchedule(f"{m} {h} * * {w}", z),
    minutes,
    hours,
    dows,
    st.sampled_from(ZONES),
)
starts = st.one_of(
    st.sampled_from(NEAR_TRANSITIONS),
    st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2026, 12, 31)).map(
        lambda d: d.replace(tzinfo=UTC)
    ),
)
spans = st.sampled_from([timedelta(seconds=30), timedelta(minutes=7), timedelta(hours=5)])


def _by_next_fire(schedule: Schedule, after: datetime, until: datetime) -> list[datetime]:
    out = []
    t = next_fire(schedule, after)
    while t is not None and t <= until:
        out.append(t)
        t = next_fire(schedule, t)
    return out


@settings(max_examples=80, deadline=None)
@given(crons, starts, spans, st.integers(-120, 120))
def test_fires_in_equals_iterated_next_fire(schedule, start, span, shift_min):
    after = start + timedelta(minutes=shift_min)
    until = after + span
    assert fires_in(schedule, after, until) == _by_next_fire(schedule, after, until)


def test_a_whole_dst_day_in_one_window():
    after = datetime(2026, 3, 8, tzinfo=UTC)
    until = after + timedelta(days=1)
    for expr in ("* * * * *", "0 0 * * *", "0 9 * * *", "0 2 * * *", "30 * * * *"):
        for zone in ("America/New_York", "America/Havana", "Asia/Kolkata"):
            s = CronSchedule(expr, zone)
            assert fires_in(s, after, until) == _by_next_fire(s, after, until), (expr, zone)


def test_interval_and_empty_windows():
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    s = IntervalSchedule(3600, anchor)
    after = anchor + timedelta(minutes=1)
    got = fires_in(s, after, after + timedelta(hours=3))
    assert got == [anchor + timedelta(hours=h) for h in (1, 2, 3)]
    assert fires_in(s, after, after) == []


def test_a_day_that_never_comes_fires_nothing():
    s = CronSchedule("0 0 30 2 *", "UTC")  # 30 February
    after = datetime(2026, 1, 1, tzinfo=UTC)
    until = after + timedelta(days=400)
    assert fires_in(s, after, until) == _by_next_fire(s, after, until) == []


@settings(max_examples=40, deadline=None)
@given(
    crons, starts, st.sampled_from([timedelta(hours=3), timedelta(hours=26)]), st.integers(0, 300)
)
def test_iter_fires_equals_iterated_next_fire(schedule, after, span, taken):
    until = after + span
    expected = _by_next_fire(schedule, after, until)
    assert list(iter_fires(schedule, after, until)) == expected
    assert list(itertools.islice(iter_fires(schedule, after, until), taken)) == expected[:taken]
    assert next_fires(schedule, after, taken, until) == expected[:taken]


def test_iter_fires_crosses_rare_schedules_and_stops_at_until():
    after = datetime(2025, 1, 1, tzinfo=UTC)
    until = datetime(2125, 1, 1, tzinfo=UTC)
    for expr in ("0 0 29 2 *", "0 0 29 2 1", "0 0 * 2 1#5", "59 23 31 12 5#5", "0 0 L 2 *"):
        s = CronSchedule(expr, "Europe/Paris")
        assert list(iter_fires(s, after, until)) == _by_next_fire(s, after, until), expr
    interval = IntervalSchedule(86_400 * 366, after)
    assert list(iter_fires(interval, after, until)) == _by_next_fire(interval, after, until)

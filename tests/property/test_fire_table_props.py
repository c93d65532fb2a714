"""The scan's remembered next fire (`kit.core.fire_table.FireTable.next_ms`) is exactly
`kit.core.schedule.next_fire`, for every shape of schedule the API accepts: cron fields
with steps, ranges, lists, names, `L` (last day; last weekday, `L5`), `W` and `#`, day
and weekday both restricted, fixed-time and `*` hours, days that only leap years have,
in zones with 1 h, 30 min (Lord Howe) and 45 min (Chatham) shifts and without DST, at
instants on and around their transitions; intervals (up to the end of the calendar) and
one-off times. Cron has no seconds field (five fields, kit.core.schedule.parse_cron), so
none is generated. One table answers a whole sequence of instants, as a node's table
does scan after scan, with windows of several lengths."""

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.fire_table import FireTable
from kit.core.schedule import (
    MAX_INSTANT,
    CronSchedule,
    IntervalSchedule,
    OneOffSchedule,
    Schedule,
    next_fire,
    parse_cron,
)
from kit.core.timeutil import from_epoch_ms, to_epoch_ms

ZONES = [
    "UTC",
    "America/New_York",
    "America/Havana",  # changes at midnight
    "Europe/Paris",
    "Australia/Lord_Howe",  # 30 min shift
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kolkata",  # +5:30, no DST
    "Asia/Kathmandu",  # +5:45, no DST
    "America/Santiago",  # changes at midnight, southern hemisphere
]
# Instants just before transitions of the zones above (2026, 2028)
NEAR_TRANSITIONS = [
    datetime(2026, 3, 8, 3, tzinfo=UTC),  # New York, Havana spring forward
    datetime(2026, 11, 1, 4, tzinfo=UTC),  # New York, Havana fall back
    datetime(2026, 3, 29, 0, tzinfo=UTC),  # Paris spring forward
    datetime(2026, 10, 25, 0, tzinfo=UTC),  # Paris fall back
    datetime(2026, 4, 4, 14, tzinfo=UTC),  # Lord Howe fall back (30 min)
    datetime(2026, 10, 3, 15, tzinfo=UTC),  # Lord Howe spring forward (30 min)
    datetime(2026, 4, 4, 13, tzinfo=UTC),  # Chatham fall back
    datetime(2026, 9, 6, 2, tzinfo=UTC),  # Santiago spring forward at midnight
    datetime(2028, 2, 28, 22, tzinfo=UTC),  # a leap day ahead
    datetime(2027, 2, 28, 22, tzinfo=UTC),  # no leap day
]

minutes = st.sampled_from(["0", "*", "*/15", "5,35", "59", "30", "*/7", "10-40/10", "45"])
hours = st.sampled_from(["*", "*/1", "0", "1", "2", "3", "1-3", "0,12", "*/6", "23", "9-17"])
days = st.sampled_from(["*", "1", "15", "28", "29", "31", "L", "1,L", "15W", "?", "1-7"])
months = st.sampled_from(["*", "2", "1-6", "JAN-MAR", "*/3", "12", "2,3"])
weekdays = st.sampled_from(
    ["*", "0", "1-5", "MON-FRI", "6", "7", "5#2", "SUN", "L5", "MON#1,FRI#3", "0-6/2"]
)


def _valid(expr: str) -> bool:
    try:
        parse_cron(expr)
    except Exception:
        return False
    return True


crons = st.builds(
    lambda m, h, d, mo, w, z: CronSchedule(f"{m} {h} {d} {mo} {w}", z),
    minutes,
    hours,
    days,
    months,
    weekdays,
    st.sampled_from(ZONES),
).filter(lambda s: _valid(s.expr))
# the named shapes, always in the mix
SPECIAL = [
    "0 0 29 2 *",  # leap days only
    "0 0 L * *",  # last day of every month
    "0 0 L 2 *",  # 28 or 29 February
    "30 2 * * *",  # in spring-forward gaps
    "30 1 * * *",  # in repeated hours
    "*/30 * * * *",  # `*` hours: both repeated hours fire
    "0 * * * *",
    "* * * * *",
    "15 10 * * 5#2",
    "0 9 * * L5",  # the last Friday of each month
    "0 0 29 2 1",  # a day and a weekday: either fires (leap days and February's Mondays)
    "0 0 1W * *",  # the weekday nearest the 1st
    "0 12 * JAN-MAR MON-FRI",
]
specials = st.builds(CronSchedule, st.sampled_from(SPECIAL), st.sampled_from(ZONES))

instants = st.one_of(
    st.sampled_from(NEAR_TRANSITIONS),
    st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31)).map(
        lambda d: d.replace(tzinfo=UTC)
    ),
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
# steps between the instants asked of one table: the same instant, ms and minutes apart
# (the jobs of a scan), hours and days (the scans after it), and back again
steps_ms = st.lists(
    st.sampled_from([0, 1, 999, 60_000, -60_000, 3_599_999, 3_600_000, 86_400_000, -7_200_000])
    | st.integers(-10 * 86_400_000, 40 * 86_400_000),
    min_size=1,
    max_size=12,
)
windows_ms = st.sampled_from([60_000, 7 * 60_000, 3_600_000, 86_400_000])


_CALENDAR_END_MS = to_epoch_ms(datetime(9999, 12, 30, tzinfo=UTC))


def _reference(schedule: Schedule, after_ms: int) -> int | None:
    nxt = next_fire(schedule, from_epoch_ms(after_ms))
    return None if nxt is None else to_epoch_ms(nxt)


def _walk(table: FireTable, schedule: Schedule, start: datetime, steps: list[int]) -> None:
    t = to_epoch_ms(start)
    for step in steps:
        t += step
        if not 0 <= t <= _CALENDAR_END_MS:
            break  # instants only a datetime-overflowing walk reaches
        assert table.next_ms(schedule, t) == _reference(schedule, t), (schedule, from_epoch_ms(t))
        nxt = table.next_ms(schedule, t)
        if nxt is not None and step % 2:  # follow the schedule, as a trigger does
            t = nxt - step


@settings(max_examples=300, deadline=None)
@given(st.one_of(crons, specials), instants, steps_ms, windows_ms)
def test_cron_next_ms_is_next_fire(schedule, start, steps, window_ms):
    _walk(FireTable(window_ms=window_ms), schedule, start, steps)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(crons, specials), min_size=2, max_size=5), instants, steps_ms)
def test_one_table_serves_many_schedules(schedules, start, steps):
    table = FireTable(window_ms=3_600_000, max_windows=3)  # small: it starts again often
    for schedule in schedules:
        _walk(table, schedule, start, steps)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 366 * 86_400),
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9998, 12, 31)),
    st.integers(0, 999) | st.just(0),
    instants | st.sampled_from([datetime(9999, 12, 31, 23, 59, tzinfo=UTC)]),
    steps_ms,
)
def test_interval_next_ms_is_next_fire(every_s, anchor, anchor_us, start, steps):
    schedule = IntervalSchedule(every_s, anchor.replace(tzinfo=UTC, microsecond=anchor_us))
    _walk(FireTable(), schedule, start, steps)


def test_interval_past_the_end_of_the_calendar_has_no_next():
    schedule = IntervalSchedule(366 * 86_400, MAX_INSTANT)
    after = to_epoch_ms(MAX_INSTANT)
    assert FireTable().next_ms(schedule, after) is None is _reference(schedule, after)


@settings(max_examples=100, deadline=None)
@given(instants, st.integers(-5000, 5000), st.integers(0, 999_999))
def test_one_off_next_ms_is_next_fire(at, offset_ms, at_us):
    schedule = OneOffSchedule(at.replace(microsecond=at_us))
    t = to_epoch_ms(at) + offset_ms
    assert FireTable().next_ms(schedule, t) == _reference(schedule, t)


def test_a_window_is_computed_once_for_every_job_and_instant_in_it():
    table = FireTable()
    hourly = CronSchedule("0 * * * *", "Europe/Paris")
    top = to_epoch_ms(datetime(2030, 1, 7, 0, tzinfo=UTC))
    # 50,000 jobs of one expression, jittered over 10 s after the hour
    got = {table.next_ms(hourly, top + (i % 10_000)) for i in range(50_000)}
    assert got == {top + 3_600_000} and table.built == 1
    assert table.next_many(hourly, [top, top, top + 1]) == {
        top: top + 3_600_000,
        top + 1: top + 3_600_000,
    }


def test_a_day_that_never_comes_within_a_window_is_found_after_it():
    table = FireTable(window_ms=60_000)
    leap = CronSchedule("0 0 29 2 *", "UTC")
    after = to_epoch_ms(datetime(2029, 3, 1, tzinfo=UTC))
    assert table.next_ms(leap, after) == to_epoch_ms(datetime(2032, 2, 29, tzinfo=UTC))
    assert table.built == 1


@pytest.mark.parametrize("kwargs", [{"window_ms": 0}, {"max_windows": 0}])
def test_bad_sizes_are_refused(kwargs):
    with pytest.raises(ValueError):
        FireTable(**kwargs)

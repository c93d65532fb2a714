"""Schedules: next fire strictly increases, and the DST rule of kit.core.schedule holds
on the real transition days of zones with 1 h and 30 min shifts."""

from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.schedule import (
    CronSchedule,
    IntervalSchedule,
    OneOffSchedule,
    next_fire,
    next_fires,
)

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
]
# (zone, spring-forward day, fall-back day) in 2025
DST_DAYS = [
    ("America/New_York", date(2025, 3, 9), date(2025, 11, 2)),
    ("Europe/Berlin", date(2025, 3, 30), date(2025, 10, 26)),
    ("Australia/Lord_Howe", date(2025, 10, 5), date(2025, 4, 6)),
]

instants = st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2026, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC)
)

minutes = st.sampled_from(["0", "*/15", "5,35", "59", "*", "30"])
hours = st.sampled_from(["*", "1", "2", "3", "1-3", "0,12", "*/6", "23"])
doms = st.sampled_from(["*", "1", "15", "28"])
dows = st.sampled_from(["*", "0", "1-5", "6"])
crons = st.builds(
    lambda m, h, d, w, z: CronSchedule(f"{m} {h} {d} * {w}", z),
    minutes,
    hours,
    doms,
    dows,
    st.sampled_from(ZONES),
)


def _strictly_increasing(after, fires):
    return all(a < b for a, b in pairwise([after, *fires]))


@settings(max_examples=60, deadline=None)
@given(crons, instants)
def test_cron_next_fire_strictly_increases(schedule, after):
    fires = next_fires(schedule, after, 6)
    assert len(fires) == 6
    assert _strictly_increasing(after, fires)
    assert all(f.utcoffset() == timedelta(0) for f in fires)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400_000), instants, instants)
def test_interval_keeps_elapsed_time(every_s, anchor, after):
    s = IntervalSchedule(every_s, anchor)
    fires = next_fires(s, after, 5)
    assert _strictly_increasing(after, fires)
    assert all((b - a).total_seconds() == every_s for a, b in pairwise(fires))
    assert all((f - anchor).total_seconds() % every_s == 0 for f in fires)
    assert fires[0] - after <= timedelta(seconds=every_s) or after < anchor


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(DST_DAYS), st.integers(1, 3_600), st.integers(0, 23))
def test_interval_ignores_dst(days, every_s, hour):
    zone, spring, fall = days
    for day in (spring, fall):
        anchor = datetime(day.year, day.month, day.day, hour, tzinfo=ZoneInfo(zone))
        anchor = anchor.astimezone(UTC) - timedelta(days=1)
        fires = next_fires(IntervalSchedule(every_s, anchor), anchor, 30)
        assert fires[-1] - fires[0] == timedelta(seconds=every_s * 29)


@settings(max_examples=30)
@given(instants, instants)
def test_one_off_fires_once(at, after):
    fires = next_fires(OneOffSchedule(at), after, 3)
    assert fires == ([at] if at > after else [])
    assert next_fire(OneOffSchedule(at), at) is None


def _fires_on_local_day(schedule: CronSchedule, day: date, per_day: int) -> list[datetime]:
    zone = schedule.zone
    start = datetime(day.year, day.month, day.day, tzinfo=zone) - timedelta(hours=6)
    # enough to cover the 6 h before the day, the day itself and past its end
    fires = next_fires(schedule, start.astimezone(UTC), 2 * per_day + 2)
    return [f for f in fires if f.astimezone(zone).date() == day]


def test_dst_days_are_transition_days():
    for zone, spring, fall in DST_DAYS:
        tz = ZoneInfo(zone)
        for day in (spring, fall):
            start = datetime(day.year, day.month, day.day, tzinfo=tz)
            end = start + timedelta(hours=23, minutes=59)
            assert start.utcoffset() != end.utcoffset(), (zone, day)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(DST_DAYS), st.integers(0, 23), st.integers(0, 59))
def test_fixed_time_job_fires_exactly_once_on_transition_days(days, hour, minute):
    zone, spring, fall = days
    schedule = CronSchedule(f"{minute} {hour} * * *", zone)
    for day in (spring, fall):
        fires = _fires_on_local_day(schedule, day, 1)
        assert len(fires) == 1, (zone, day, fires)
        local = fires[0].astimezone(schedule.zone)
        # the wall time it names, or (in a spring-forward gap) that time shifted forward
        named = datetime(day.year, day.month, day.day, hour, minute)
        assert timedelta(0) <= local.replace(tzinfo=None) - named <= timedelta(hours=1)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(DST_DAYS),
    st.sets(st.integers(0, 23), min_size=1, max_size=4),
    st.sets(st.integers(0, 59), min_size=1, max_size=4),
)
def test_no_fixed_time_job_fires_twice_on_fall_back_day(days, hour_set, minute_set):
    zone, _spring, fall = days
    expr = f"{','.join(map(str, sorted(minute_set)))} {','.join(map(str, sorted(hour_set)))} * * *"
    schedule = CronSchedule(expr, zone)
    fires = _fires_on_local_day(schedule, fall, len(hour_set) * len(minute_set))
    walls = [f.astimezone(schedule.zone).replace(tzinfo=None) for f in fires]
    assert len(walls) == len(set(walls)) == len(hour_set) * len(minute_set)


@pytest.mark.parametrize(("zone", "spring", "fall"), DST_DAYS)
def test_hourly_job_runs_in_both_repeated_hours(zone, spring, fall):
    # not fixed-time: elapsed-time semantics, one fire per real hour
    fires = _fires_on_local_day(CronSchedule("0 * * * *", zone), fall, 25)
    local_day_hours = (
        datetime(fall.year, fall.month, fall.day, tzinfo=ZoneInfo(zone)) + timedelta(days=1)
    ).astimezone(UTC) - datetime(fall.year, fall.month, fall.day, tzinfo=ZoneInfo(zone))
    # Lord Howe's 25th half-hour has no top of the hour twice, so it stays at 24
    assert len(fires) in (24, 25)
    assert len(fires) == int(local_day_hours.total_seconds() // 3600)

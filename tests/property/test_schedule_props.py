"""Schedules: a cron fire is exactly the next local time that matches the expression's
fields (none matching is skipped in between), and the DST rule of kit.core.schedule
holds on the real transition days of zones with 1 h and 30 min shifts: a fixed-time job
fires at the first occurrence of a repeated wall time (never the second), and a wall time
in a spring-forward gap fires shifted forward by the gap."""

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


def _field(text: str, low: int, high: int) -> set[int]:
    """The values a cron field names (the subset of the syntax the generators use)."""
    out: set[int] = set()
    for part in text.split(","):
        if part == "*":
            out.update(range(low, high + 1))
        elif part.startswith("*/"):
            out.update(range(low, high + 1, int(part[2:])))
        elif "-" in part:
            a, b = map(int, part.split("-"))
            out.update(range(a, b + 1))
        else:
            out.add(int(part))
    return out


def _matching_walls(expr: str, start: date, end: date) -> list[datetime]:
    """Every local wall time from `start` to `end` (days) that the expression names, by
    the cron rule itself: day-of-month OR day-of-week when both are restricted."""
    m, h, dom, _mon, dow = expr.split()
    mins, hrs = sorted(_field(m, 0, 59)), sorted(_field(h, 0, 23))
    doms, dows = _field(dom, 1, 31), {d % 7 for d in _field(dow, 0, 7)}
    out = []
    day = start
    while day <= end:
        cron_dow = (day.weekday() + 1) % 7  # cron: 0 = Sunday
        if dom == "*" and dow == "*":
            hit = True
        elif dom == "*":
            hit = cron_dow in dows
        elif dow == "*":
            hit = day.day in doms
        else:
            hit = day.day in doms or cron_dow in dows
        if hit:
            out += [datetime(day.year, day.month, day.day, hh, mm) for hh in hrs for mm in mins]
        day += timedelta(days=1)
    return out


steady_zones = st.sampled_from(["UTC", "Asia/Kolkata"])  # no DST in 2024-2026


@settings(max_examples=80, deadline=None)
@given(minutes, hours, doms, dows, steady_zones, instants)
def test_cron_fires_exactly_at_the_times_its_fields_name(m, h, dom, dow, zone, after):
    """Away from DST, the next fires are the next matching wall times, in order, none
    skipped: computed here from the fields alone, not from croniter."""
    schedule = CronSchedule(f"{m} {h} {dom} * {dow}", zone)
    fires = next_fires(schedule, after, 6)
    tz = ZoneInfo(zone)
    local_after = after.astimezone(tz).replace(tzinfo=None)
    last = fires[-1].astimezone(tz).replace(tzinfo=None)
    want = [
        w
        for w in _matching_walls(schedule.expr, local_after.date(), last.date())
        if local_after < w <= last
    ]
    assert [f.astimezone(tz).replace(tzinfo=None) for f in fires] == want
    assert all(f.utcoffset() == timedelta(0) for f in fires)


@settings(max_examples=60, deadline=None)
@given(crons, instants)
def test_cron_fires_match_the_fields_in_any_zone(schedule, after):
    """In zones with DST too: every fire is a matching wall time, or one shifted forward
    out of a gap (then the wall time it names does not exist that day)."""
    fires = next_fires(schedule, after, 6)
    assert len(fires) == 6
    assert _strictly_increasing(after, fires)
    tz = schedule.zone
    for f in fires:
        wall = f.astimezone(tz).replace(tzinfo=None)
        named = _matching_walls(schedule.expr, wall.date() - timedelta(days=1), wall.date())
        if wall in named:
            continue
        # shifted out of a gap: a named wall time up to 3 h earlier that does not exist
        gap = [
            w
            for w in named
            if timedelta(0) < wall - w <= timedelta(hours=3)
            and w.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) != w
        ]
        assert gap, (schedule, f, wall)


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
        # The rule, exactly: the first occurrence of the wall time (fold=0), which for a
        # wall time in a spring-forward gap is the offset before the gap, i.e. the time
        # shifted forward by the gap. A second occurrence (fold=1) is never the answer.
        tz = ZoneInfo(zone)
        first = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz, fold=0)
        second = first.replace(fold=1)
        assert fires[0] == first.astimezone(UTC), (zone, day, fires)
        if first.utcoffset() != second.utcoffset():
            repeated = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == (
                first.replace(tzinfo=None)
            )
            if repeated:  # the wall time happens twice: the earlier instant, not the later
                assert fires[0] < second.astimezone(UTC)
                assert second.astimezone(UTC) not in _fires_on_local_day(schedule, day, 2)


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
    tz = ZoneInfo(zone)
    firsts = sorted(
        datetime(fall.year, fall.month, fall.day, h, m, tzinfo=tz, fold=0).astimezone(UTC)
        for h in hour_set
        for m in minute_set
    )
    assert fires == firsts  # each at its first occurrence


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DST_DAYS), st.integers(0, 59))
def test_an_hourly_job_fires_every_real_hour_on_fall_back_day(days, minute):
    """Not fixed-time (hour '*'): one fire per elapsed hour whose local minute is the one
    named, so both occurrences of a repeated hour fire."""
    zone, _spring, fall = days
    tz = ZoneInfo(zone)
    schedule = CronSchedule(f"{minute} * * * *", zone)
    fires = _fires_on_local_day(schedule, fall, 26)
    start = datetime(fall.year, fall.month, fall.day, tzinfo=tz).astimezone(UTC)
    end = (datetime(fall.year, fall.month, fall.day, tzinfo=tz) + timedelta(days=1)).astimezone(UTC)
    want = []
    t = start
    while t < end:
        if t.astimezone(tz).minute == minute:
            want.append(t)
        t += timedelta(minutes=1)
    assert fires == want


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

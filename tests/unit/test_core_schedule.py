from datetime import UTC, datetime, timedelta

import pytest

from kit.core.errors import FieldError
from kit.core.ids import run_id
from kit.core.schedule import (
    MAX_CRON_CHARS,
    MAX_TIMEZONE_CHARS,
    CronSchedule,
    IntervalSchedule,
    OneOffSchedule,
    ScheduleKind,
    next_fire,
    next_fires,
    parse_cron,
    parse_instant,
    parse_schedule,
    parse_timezone,
    schedule_kind,
    schedule_to_dict,
)
from kit.core.timeutil import from_epoch_ms, to_epoch_ms

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def utc(*a):
    return datetime(*a, tzinfo=UTC)


def test_parse_each_kind_and_roundtrip():
    cron = parse_schedule({"cron": "0  9 * * 1-5", "timezone": "Europe/Berlin"}, NOW)
    assert cron == CronSchedule("0 9 * * 1-5", "Europe/Berlin")
    interval = parse_schedule({"every_s": 90}, NOW)
    assert interval == IntervalSchedule(90, NOW)
    one = parse_schedule({"at": "2025-06-02T10:00:00+02:00"}, NOW)
    assert one == OneOffSchedule(utc(2025, 6, 2, 8))
    for s in (cron, interval, one):
        assert parse_schedule(schedule_to_dict(s), NOW) == s


def test_each_parsed_schedule_names_its_own_kind():
    # the calibration measures a scan's fires by this kind, the model charges by it
    kinds = {
        schedule_kind(parse_schedule({"cron": "0 * * * *"}, NOW)),
        schedule_kind(parse_schedule({"every_s": 60}, NOW)),
        schedule_kind(parse_schedule({"at": "2025-06-02T10:00:00Z"}, NOW)),
    }
    assert schedule_kind(CronSchedule("* * * * *")) is ScheduleKind.cron
    assert schedule_kind(IntervalSchedule(1, NOW)) is ScheduleKind.interval
    assert schedule_kind(OneOffSchedule(NOW)) is ScheduleKind.one_off
    assert kinds == set(ScheduleKind) and len(ScheduleKind) == 3


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"cron": "0 9 * *"}, "schedule.cron"),
        ({"cron": "0 25 * * *"}, "schedule.cron"),
        ({"cron": "0 9 * * *", "timezone": "Europe/Atlantis"}, "schedule.timezone"),
        ({"every_s": 0}, "schedule.every_s"),
        ({"every_s": 1.5}, "schedule.every_s"),
        ({"at": "2025-06-02T10:00:00"}, "schedule.at"),
        ({"cron": "* * * * *", "every_s": 5}, "schedule"),
        ({"every_s": 5, "timezone": "UTC"}, "schedule.timezone"),
        ({}, "schedule"),
    ],
)
def test_parse_names_the_bad_field(data, field):
    with pytest.raises(FieldError) as exc:
        parse_schedule(data, NOW)
    assert exc.value.field == field


def test_next_fire_is_strictly_after():
    s = CronSchedule("0 * * * *")
    assert next_fire(s, utc(2025, 1, 1, 10)) == utc(2025, 1, 1, 11)
    i = IntervalSchedule(60, utc(2025, 1, 1))
    assert next_fire(i, utc(2024, 12, 31)) == utc(2025, 1, 1)
    assert next_fire(i, utc(2025, 1, 1)) == utc(2025, 1, 1, 0, 1)
    o = OneOffSchedule(utc(2025, 1, 1))
    assert next_fire(o, utc(2024, 1, 1)) == utc(2025, 1, 1)
    assert next_fire(o, utc(2025, 1, 1)) is None
    assert next_fires(o, utc(2024, 1, 1), 3) == [utc(2025, 1, 1)]
    with pytest.raises(ValueError):
        next_fire(s, datetime(2025, 1, 1))


def test_fall_back_fixed_time_fires_once_hourly_fires_twice():
    # America/New_York falls back 2025-11-02 02:00 EDT -> 01:00 EST
    day = utc(2025, 11, 2, 4)
    fixed = next_fires(CronSchedule("30 1 * * *", "America/New_York"), day, 2)
    assert fixed == [utc(2025, 11, 2, 5, 30), utc(2025, 11, 3, 6, 30)]
    hourly = next_fires(CronSchedule("30 * * * *", "America/New_York"), day, 3)
    assert hourly == [utc(2025, 11, 2, 4, 30), utc(2025, 11, 2, 5, 30), utc(2025, 11, 2, 6, 30)]


def test_spring_forward_gap_fires_shifted():
    # Europe/Berlin springs forward 2025-03-30 02:00 CET -> 03:00 CEST
    s = CronSchedule("30 2 * * *", "Europe/Berlin")
    assert next_fire(s, utc(2025, 3, 29, 12)) == utc(2025, 3, 30, 1, 30)  # 03:30 CEST


def test_time_conversions_and_run_id():
    t = utc(2025, 1, 1, 0, 0, 0, 123_456)
    assert to_epoch_ms(t) == 1_735_689_600_123
    assert from_epoch_ms(1_735_689_600_123) == utc(2025, 1, 1, 0, 0, 0, 123_000)
    assert run_id("j", t) == run_id("j", to_epoch_ms(t)) != run_id("k", t)
    with pytest.raises(ValueError):
        to_epoch_ms(datetime(2025, 1, 1))


# --- limits on what a tenant may hand the parser (issue 7, items 18, 19, 21) -------------


@pytest.mark.parametrize("expr", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"])
def test_a_cron_that_never_fires_is_refused(expr: str) -> None:
    with pytest.raises(FieldError, match="never fires"):
        parse_cron(expr)


def test_a_cron_that_fires_only_on_29_february_is_accepted() -> None:
    schedule = CronSchedule(parse_cron("0 0 29 2 *"))
    fire = next_fire(schedule, datetime(2026, 3, 1, tzinfo=UTC))
    assert fire == datetime(2028, 2, 29, tzinfo=UTC)


def test_next_fire_of_a_stored_never_firing_cron_is_none_not_an_exception() -> None:
    # a row written before the parser refused such expressions must not crash a scan
    assert next_fire(CronSchedule("0 0 31 2 *"), datetime(2026, 1, 1, tzinfo=UTC)) is None


def test_cron_and_time_zone_lengths_are_capped() -> None:
    with pytest.raises(FieldError, match="characters"):
        parse_cron(",".join(["1"] * (MAX_CRON_CHARS // 2 + 1)) + " * * * *")
    with pytest.raises(FieldError, match="characters"):
        parse_timezone("Europe/" + "x" * MAX_TIMEZONE_CHARS)


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00+01:00", "9999-12-31T23:30:00-01:00", "1969-12-31T23:59:59Z"]
)
def test_instants_outside_the_calendar_we_serve_are_refused(text: str) -> None:
    with pytest.raises(FieldError, match="between"):
        parse_instant(text, "at")


# -- edges the full mutation run found unguarded --------------------------------------


def test_a_window_in_a_repeated_hour_finds_fires_whose_wall_time_lies_outside_it():
    from kit.core.schedule import fires_in

    s = CronSchedule("45 * * * *", "America/New_York")  # falls back 2026-11-01 02:00 EDT
    # from 01:50 EDT: the next 01:45 is the second one (EST), earlier on the wall clock
    after, until = datetime(2026, 11, 1, 5, 50, tzinfo=UTC), datetime(2026, 11, 1, 7, tzinfo=UTC)
    assert fires_in(s, after, until) == [datetime(2026, 11, 1, 6, 45, tzinfo=UTC)]
    # until 01:10 EST: 01:45 EDT came before it, later on the wall clock
    after, until = datetime(2026, 11, 1, 5, tzinfo=UTC), datetime(2026, 11, 1, 6, 10, tzinfo=UTC)
    assert fires_in(s, after, until) == [datetime(2026, 11, 1, 5, 45, tzinfo=UTC)]


def test_fires_in_takes_until_itself_and_refuses_a_naive_bound():
    from kit.core.schedule import fires_in

    anchor = datetime(2030, 1, 1, tzinfo=UTC)
    s = IntervalSchedule(60, anchor)
    assert fires_in(s, anchor, anchor + timedelta(minutes=2)) == [
        anchor + timedelta(minutes=1),
        anchor + timedelta(minutes=2),
    ]
    for after, until in ((anchor, datetime(2030, 1, 2)), (datetime(2030, 1, 1), anchor)):
        with pytest.raises(ValueError, match=r"^after and until must be aware datetimes$"):
            fires_in(s, after, until)


def test_fire_times_are_in_utc_whatever_the_local_zone(monkeypatch):
    import time

    from kit.core.schedule import fires_in

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        ny = CronSchedule("30 1 * * *", "America/New_York")
        hourly = CronSchedule("30 * * * *", "America/New_York")
        fall = datetime(2026, 11, 1, tzinfo=UTC)
        spring = CronSchedule("30 2 * * *", "America/New_York")
        got = [
            next_fire(ny, datetime(2026, 6, 1, tzinfo=UTC)),
            next_fire(ny, fall),  # the first 01:30 of a repeated hour (fixed time)
            next_fire(spring, datetime(2026, 3, 8, tzinfo=UTC)),  # in the gap
            *fires_in(hourly, fall + timedelta(hours=5), fall + timedelta(hours=7)),
        ]
        assert all(t is not None and t.tzinfo is UTC for t in got), got
    finally:
        monkeypatch.undo()
        time.tzset()


def test_just_after_a_gap_the_time_it_swallowed_is_still_to_come():
    # London springs forward 2026-03-29 01:00 GMT -> 02:00 BST: 01:30 does not exist and
    # fires at 02:30 BST (01:30 UTC). At 02:10 BST that fire is still ahead, although
    # its wall time (01:30) is behind the clock's.
    s = CronSchedule("30 1 * * *", "Europe/London")
    assert next_fire(s, datetime(2026, 3, 29, 1, 10, tzinfo=UTC)) == datetime(
        2026, 3, 29, 1, 30, tzinfo=UTC
    )


def test_a_wall_time_after_a_half_hour_gap_can_come_before_one_shifted_out_of_it():
    # Lord Howe springs forward 30 min on 2026-10-04 at 02:00: 02:15 does not exist and
    # fires at 02:45, after 02:40, which exists; the next fire from 01:00 is 02:40
    s = CronSchedule("15,40 2 * * *", "Australia/Lord_Howe")
    assert next_fire(s, datetime(2026, 10, 3, 14, 30, tzinfo=UTC)) == datetime(
        2026, 10, 3, 15, 40, tzinfo=UTC
    )


def test_next_fire_refuses_a_naive_instant_by_saying_so():
    with pytest.raises(ValueError, match=r"^after must be an aware datetime$"):
        next_fire(CronSchedule("0 * * * *"), datetime(2030, 1, 1))


def test_in_londons_repeated_hour_the_second_pass_is_still_to_come():
    # London falls back 2026-10-25 at 02:00 BST to 01:00 GMT: from 01:50 BST the next
    # :45 is 01:45 GMT (a UTC offset of 0, like the machine's own zone here)
    from kit.core.schedule import fires_in

    s = CronSchedule("45 * * * *", "Europe/London")
    after = datetime(2026, 10, 25, 0, 50, tzinfo=UTC)
    second = datetime(2026, 10, 25, 1, 45, tzinfo=UTC)
    assert next_fire(s, after) == second
    assert fires_in(s, after, datetime(2026, 10, 25, 2, tzinfo=UTC)) == [second]

"""The fires a schedule owed, what became of each, and the backfill plan (kit.core.owed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kit.core.errors import FieldError
from kit.core.ids import run_id
from kit.core.owed import (
    Outcome,
    RunView,
    ScheduleEra,
    dst_note,
    explain_fires,
    owed_fires,
    plan_backfill,
)
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule

JOB = "0b7a39a4-9a55-4a7e-8f6d-5d1c3c1f0001"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_fires_of_a_cron_era_in_a_range_are_half_open_and_named_by_run_id() -> None:
    era = ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1))
    fires = owed_fires(JOB, [era], utc(2030, 1, 2, 3), utc(2030, 1, 2, 6), 100)
    assert [f.at for f in fires] == [utc(2030, 1, 2, 3), utc(2030, 1, 2, 4), utc(2030, 1, 2, 5)]
    assert fires[0].run_id == run_id(JOB, utc(2030, 1, 2, 3))


def test_nothing_is_owed_before_the_job_existed() -> None:
    era = ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 2, 4, 30))
    fires = owed_fires(JOB, [era], utc(2030, 1, 2, 0), utc(2030, 1, 2, 7), 100)
    assert [f.at for f in fires] == [utc(2030, 1, 2, 5), utc(2030, 1, 2, 6)]


def test_jitter_moves_the_trigger_time_and_the_run_id_follows() -> None:
    era = ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1), jitter_offset_ms=1500)
    fires = owed_fires(JOB, [era], utc(2030, 1, 2, 3), utc(2030, 1, 2, 4), 10)
    assert [f.at for f in fires] == [utc(2030, 1, 2, 3) + timedelta(milliseconds=1500)]
    assert fires[0].nominal == utc(2030, 1, 2, 3)
    assert fires[0].run_id == run_id(JOB, fires[0].at)


def test_an_edit_ends_the_old_schedule_and_the_new_one_starts_after_it() -> None:
    eras = [
        ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1)),
        ScheduleEra(CronSchedule("30 * * * *"), since=utc(2030, 1, 2, 4, 10)),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 2, 3), utc(2030, 1, 2, 6), 100)
    assert [(f.at, f.era) for f in fires] == [
        (utc(2030, 1, 2, 3), 0),
        (utc(2030, 1, 2, 4), 0),
        (utc(2030, 1, 2, 4, 30), 1),
        (utc(2030, 1, 2, 5, 30), 1),
    ]


def test_an_occurrence_held_back_by_jitter_is_carried_over_by_an_edit_that_keeps_it() -> None:
    # 20:20 is due at 20:40 (20 min of jitter); the edit at 20:30 keeps the 20-minute
    # cron and drops the jitter: 20:20 fires at once under the new schedule.
    every20 = CronSchedule("*/20 * * * *")
    eras = [
        ScheduleEra(every20, since=utc(2030, 1, 1, 20), jitter_offset_ms=1_200_000),
        ScheduleEra(every20, since=utc(2030, 1, 1, 20, 30)),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 1, 20), utc(2030, 1, 1, 21, 1), 10)
    assert [(f.at, f.era) for f in fires] == [
        (utc(2030, 1, 1, 20, 20), 1),
        (utc(2030, 1, 1, 20, 40), 1),
        (utc(2030, 1, 1, 21), 1),
    ]


def test_an_occurrence_held_back_by_jitter_that_the_edit_drops_is_owed_as_edited() -> None:
    every20 = CronSchedule("*/20 * * * *")
    eras = [
        ScheduleEra(every20, since=utc(2030, 1, 1, 20), jitter_offset_ms=1_200_000),
        ScheduleEra(CronSchedule("*/30 * * * *"), since=utc(2030, 1, 1, 20, 30, 1)),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 1, 20), utc(2030, 1, 1, 21, 1), 10)
    assert [(f.at, f.era) for f in fires] == [
        (utc(2030, 1, 1, 20, 40), 0),  # 20:20 + jitter: recorded as skipped 'edited'
        (utc(2030, 1, 1, 21), 1),
    ]
    runs = {fires[0].run_id: RunView(fires[0].run_id, "skipped", skip_reason="edited")}
    explained = explain_fires(fires[:1], runs, utc(2030, 1, 2))
    assert explained[0].outcome is Outcome.skipped and "edit" in (explained[0].reason or "")


def test_runs_written_ahead_of_an_edit_belong_to_the_old_schedule() -> None:
    eras = [
        ScheduleEra(CronSchedule("* * * * *"), since=utc(2030, 1, 1)),
        ScheduleEra(CronSchedule("*/5 * * * *"), since=utc(2030, 1, 1, 0, 6, 57)),
    ]
    start, end = utc(2030, 1, 1, 0, 6), utc(2030, 1, 1, 0, 11)
    plain = owed_fires(JOB, eras, start, end, 10)
    ahead = owed_fires(JOB, eras, start, end, 10, written_ahead_ms=5000)
    assert [f.at.minute for f in plain] == [6, 10]
    assert [f.at.minute for f in ahead] == [6, 7, 10]  # 00:07 was written at 00:06:57


def test_limit_bounds_the_answer() -> None:
    era = ScheduleEra(IntervalSchedule(1, utc(2030, 1, 1)), since=utc(2030, 1, 1))
    assert len(owed_fires(JOB, [era], utc(2030, 1, 1), utc(2031, 1, 1), 7)) == 7


def test_a_one_off_owes_its_time_once() -> None:
    era = ScheduleEra(OneOffSchedule(utc(2030, 1, 2, 3)), since=utc(2030, 1, 2))
    assert [f.at for f in owed_fires(JOB, [era], utc(2030, 1, 1), utc(2030, 1, 3), 10)] == [
        utc(2030, 1, 2, 3)
    ]


def test_dst_fall_back_a_fixed_time_job_is_owed_once_and_says_why() -> None:
    # Europe/Paris falls back on 2030-10-27 at 03:00 -> 02:00: 02:30 happens twice.
    schedule = CronSchedule("30 2 * * *", "Europe/Paris")
    era = ScheduleEra(schedule, since=utc(2030, 10, 1))
    fires = owed_fires(JOB, [era], utc(2030, 10, 26, 12), utc(2030, 10, 27, 12), 10)
    assert [f.at for f in fires] == [utc(2030, 10, 27, 0, 30)]  # 02:30 CEST, first only
    assert "first only" in (dst_note(schedule, fires[0].nominal) or "")


def test_dst_spring_forward_the_missing_time_is_owed_shifted_by_the_gap() -> None:
    # Europe/Paris springs forward on 2030-03-31 at 02:00 -> 03:00: 02:30 does not exist.
    schedule = CronSchedule("30 2 * * *", "Europe/Paris")
    era = ScheduleEra(schedule, since=utc(2030, 3, 1))
    fires = owed_fires(JOB, [era], utc(2030, 3, 30, 12), utc(2030, 3, 31, 12), 10)
    assert [f.at for f in fires] == [utc(2030, 3, 31, 1, 30)]  # 03:30 CEST
    assert "sprang forward" in (dst_note(schedule, fires[0].nominal) or "")
    ordinary = owed_fires(JOB, [era], utc(2030, 3, 10), utc(2030, 3, 11), 10)
    assert dst_note(schedule, ordinary[0].nominal) is None


def test_explain_tells_ran_skipped_not_yet_due_and_missing_apart() -> None:
    era = ScheduleEra(CronSchedule("* * * * *"), since=utc(2030, 1, 1))
    fires = owed_fires(JOB, [era], utc(2030, 1, 2, 0, 0), utc(2030, 1, 2, 0, 6), 10)
    runs = {
        fires[0].run_id: RunView(fires[0].run_id, "succeeded"),
        fires[1].run_id: RunView(fires[1].run_id, "skipped", skip_reason="paused"),
        fires[2].run_id: RunView(fires[2].run_id, "dead", error="exit code 1"),
    }
    now = utc(2030, 1, 2, 0, 4, 10)  # fire 3 (00:03) is 70 s old, fire 4 (00:04) 10 s
    got = explain_fires(fires, runs, now, due_grace_ms=30_000)
    assert [e.outcome for e in got] == [
        Outcome.ran,
        Outcome.skipped,
        Outcome.ran,
        Outcome.missing,
        Outcome.not_yet_due,
        Outcome.not_yet_due,
    ]
    assert got[0].run is not None and got[0].run.status == "succeeded"
    assert got[1].reason == "the job was paused"
    assert got[2].reason == "exit code 1"


def test_backfill_refuses_a_future_end_a_reversed_range_and_too_many_fires() -> None:
    era = ScheduleEra(CronSchedule("* * * * *"), since=utc(2030, 1, 1))
    now = utc(2030, 1, 2)
    with pytest.raises(FieldError, match="future"):
        plan_backfill(JOB, [era], utc(2030, 1, 1), utc(2030, 1, 3), now, 100)
    with pytest.raises(FieldError, match="after from"):
        plan_backfill(JOB, [era], utc(2030, 1, 1, 2), utc(2030, 1, 1, 1), now, 100)
    with pytest.raises(FieldError, match="more than 100") as info:
        plan_backfill(JOB, [era], utc(2030, 1, 1), utc(2030, 1, 1, 2), now, 100)
    assert info.value.field == "to"
    assert len(plan_backfill(JOB, [era], utc(2030, 1, 1), utc(2030, 1, 1, 1), now, 100).fires) == 60


def test_backfill_before_the_job_existed_uses_the_schedule_it_was_created_with() -> None:
    era = ScheduleEra(CronSchedule("0 0 * * *"), since=utc(2030, 1, 20))
    plan = plan_backfill(JOB, [era], utc(2030, 1, 1), utc(2030, 1, 8), utc(2030, 1, 25), 100)
    assert [f.at.day for f in plan.fires] == [1, 2, 3, 4, 5, 6, 7]


def test_explain_words_each_outcome_and_keeps_its_fire_and_run() -> None:
    era = ScheduleEra(CronSchedule("* * * * *"), since=utc(2030, 1, 1))
    fires = owed_fires(JOB, [era], utc(2030, 1, 2, 0, 0), utc(2030, 1, 2, 0, 9), 10)
    now = utc(2030, 1, 2, 0, 5)
    runs = {
        fires[0].run_id: RunView(fires[0].run_id, "skipped", skip_reason="overlap"),
        fires[1].run_id: RunView(fires[1].run_id, "skipped", skip_reason="misfire"),
        fires[2].run_id: RunView(fires[2].run_id, "skipped"),  # no reason recorded
        fires[3].run_id: RunView(fires[3].run_id, "skipped", skip_reason="a new reason"),
        fires[8].run_id: RunView(fires[8].run_id, "pending"),
    }
    # fire 4 (00:04) is 60 s old, 5 (00:05) is due now, 6 and 7 are in the future
    got = explain_fires(fires, runs, now, due_grace_ms=60_000)
    assert [(e.outcome, e.reason) for e in got] == [
        (Outcome.skipped, "a run of the job was still active (overlap: forbid)"),
        (
            Outcome.skipped,
            "the fire was late after an outage and the misfire policy skipped it",
        ),
        (Outcome.skipped, "skipped"),
        (Outcome.skipped, "a new reason"),  # a reason explain has no words for, as recorded
        (Outcome.missing, "no run was recorded for this fire"),  # exactly the grace old
        (Outcome.not_yet_due, "due moments ago"),  # its time is now
        (Outcome.not_yet_due, "its time has not come"),
        (Outcome.not_yet_due, "its time has not come"),
        (Outcome.ran, None),
    ]
    assert [e.fire for e in got] == fires
    assert [e.run for e in got] == [runs.get(f.run_id) for f in fires]
    # a millisecond inside the grace, a fire is not yet due
    inside = explain_fires(fires[4:5], {}, now - timedelta(milliseconds=1), due_grace_ms=60_000)
    assert (inside[0].outcome, inside[0].reason) == (Outcome.not_yet_due, "due moments ago")


def test_dst_notes_word_each_case_and_read_the_second_of_a_repeated_hour() -> None:
    # Europe/Paris: 02:00-03:00 is skipped on 2030-03-31 and repeated on 2030-10-27
    fixed = CronSchedule("30 2 * * *", "Europe/Paris")
    hourly = CronSchedule("30 * * * *", "Europe/Paris")
    assert dst_note(fixed, utc(2030, 3, 31, 1, 30)) == (
        "the wall-clock time did not exist (clocks sprang forward): fired once, "
        "moved forward by the gap to 03:30"
    )
    first, second = utc(2030, 10, 27, 0, 30), utc(2030, 10, 27, 1, 30)  # 02:30 CEST, CET
    assert dst_note(fixed, first) == (
        "the wall-clock time happened twice (clocks fell back): fired at the first only"
    )
    both = "the wall-clock time happened twice (clocks fell back): fired at both"
    assert dst_note(hourly, first) == both
    assert dst_note(hourly, second) == both
    assert dst_note(IntervalSchedule(3600, utc(2030, 1, 1)), first) is None


def test_a_backfill_may_ask_for_exactly_its_most_and_spans_every_era() -> None:
    eras = [
        ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1)),
        ScheduleEra(CronSchedule("30 * * * *"), since=utc(2030, 1, 1, 2, 10)),
        ScheduleEra(CronSchedule("15 * * * *"), since=utc(2030, 1, 1, 4, 10)),
    ]
    plan = plan_backfill(JOB, eras, utc(2030, 1, 1), utc(2030, 1, 1, 5), utc(2030, 1, 2), 6)
    assert [(f.at.hour, f.at.minute, f.era) for f in plan.fires] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 0),
        (2, 30, 1),
        (3, 30, 1),
        (4, 15, 2),
    ]
    assert [f.run_id for f in plan.fires] == [run_id(JOB, f.at) for f in plan.fires]
    with pytest.raises(FieldError, match="more than 5 fires"):
        plan_backfill(JOB, eras, utc(2030, 1, 1), utc(2030, 1, 1, 5), utc(2030, 1, 2), 5)


def test_a_backfill_counts_what_was_written_ahead_of_an_edit_only_when_told() -> None:
    # the edit lands a millisecond before 00:07: runs written ahead of it (5 s) include
    # 00:07, and with none written ahead (the default) 00:07 belongs to the new schedule
    eras = [
        ScheduleEra(CronSchedule("* * * * *"), since=utc(2030, 1, 1)),
        ScheduleEra(
            CronSchedule("*/5 * * * *"), since=utc(2030, 1, 1, 0, 7) - timedelta(milliseconds=1)
        ),
    ]
    start, end, now = utc(2030, 1, 1, 0, 6), utc(2030, 1, 1, 0, 11), utc(2030, 1, 2)
    plain = plan_backfill(JOB, eras, start, end, now, 10)
    ahead = plan_backfill(JOB, eras, start, end, now, 10, written_ahead_ms=5000)
    assert [f.at.minute for f in plain.fires] == [6, 10]
    assert [f.at.minute for f in ahead.fires] == [6, 7, 10]


def test_owed_fires_refuses_naive_bounds_and_a_negative_limit_and_takes_zero() -> None:
    era = ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1))
    naive = datetime(2030, 1, 2)
    for start, end in ((utc(2030, 1, 1), naive), (naive, utc(2030, 1, 3))):
        with pytest.raises(ValueError, match=r"^start and end must be aware datetimes$"):
            owed_fires(JOB, [era], start, end, 10)
    with pytest.raises(ValueError, match=r"^limit must not be negative$"):
        owed_fires(JOB, [era], utc(2030, 1, 1), utc(2030, 1, 2), -1)
    assert owed_fires(JOB, [era], utc(2030, 1, 1), utc(2030, 1, 2), 0) == []
    assert owed_fires(JOB, [], utc(2030, 1, 1), utc(2030, 1, 2), 10) == []
    later = ScheduleEra(CronSchedule("0 * * * *"), since=None)
    with pytest.raises(ValueError, match=r"^only the first era may begin in the unbounded past$"):
        owed_fires(JOB, [era, later], utc(2030, 1, 1), utc(2030, 1, 2), 10)


def test_a_range_starting_a_microsecond_after_a_fire_leaves_it_out() -> None:
    era = ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1))
    start = utc(2030, 1, 2, 3) + timedelta(microseconds=1)
    fires = owed_fires(JOB, [era], start, utc(2030, 1, 2, 6), 10)
    assert [f.at.hour for f in fires] == [4, 5]


def test_a_fire_at_the_edit_itself_was_written_by_the_old_schedule() -> None:
    eras = [
        ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1)),
        ScheduleEra(CronSchedule("30 * * * *"), since=utc(2030, 1, 2, 2)),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 2, 1), utc(2030, 1, 2, 4), 10)
    assert [(f.at, f.era) for f in fires] == [
        (utc(2030, 1, 2, 1), 0),
        (utc(2030, 1, 2, 2), 0),
        (utc(2030, 1, 2, 2, 30), 1),
        (utc(2030, 1, 2, 3, 30), 1),
    ]
    # and the default is that nothing is written ahead of its time
    assert owed_fires(JOB, eras, utc(2030, 1, 2, 1), utc(2030, 1, 2, 4), 10, 0) == fires


def test_the_limit_stops_at_an_earlier_era() -> None:
    eras = [
        ScheduleEra(CronSchedule("0 * * * *"), since=utc(2030, 1, 1)),
        ScheduleEra(CronSchedule("30 * * * *"), since=utc(2030, 1, 2, 2, 10)),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 2, 1), utc(2030, 1, 2, 6), 2)
    assert [(f.at, f.era) for f in fires] == [(utc(2030, 1, 2, 1), 0), (utc(2030, 1, 2, 2), 0)]


def test_a_fire_the_edit_recorded_as_skipped_is_named_and_bounded_like_any_other() -> None:
    every20 = CronSchedule("*/20 * * * *")
    eras = [
        ScheduleEra(every20, since=utc(2030, 1, 1, 20), jitter_offset_ms=1_200_000),
        ScheduleEra(CronSchedule("*/30 * * * *"), since=utc(2030, 1, 1, 20, 30, 1)),
    ]
    at = utc(2030, 1, 1, 20, 40)  # 20:20 + 20 min of jitter
    (edited,) = owed_fires(JOB, eras, at, at + timedelta(minutes=1), 10)
    assert (edited.at, edited.nominal, edited.run_id, edited.era) == (
        at,
        utc(2030, 1, 1, 20, 20),
        run_id(JOB, at),
        0,
    )
    assert owed_fires(JOB, eras, at - timedelta(minutes=5), at, 10) == []


def test_an_occurrence_carried_over_fires_at_the_new_jitter() -> None:
    every20 = CronSchedule("*/20 * * * *")
    eras = [
        ScheduleEra(every20, since=utc(2030, 1, 1, 20), jitter_offset_ms=1_200_000),
        ScheduleEra(every20, since=utc(2030, 1, 1, 20, 30), jitter_offset_ms=60_000),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 1, 20), utc(2030, 1, 1, 21, 2), 10)
    assert [(f.at, f.nominal, f.era) for f in fires] == [
        (utc(2030, 1, 1, 20, 21), utc(2030, 1, 1, 20, 20), 1),
        (utc(2030, 1, 1, 20, 41), utc(2030, 1, 1, 20, 40), 1),
        (utc(2030, 1, 1, 21, 1), utc(2030, 1, 1, 21), 1),
    ]


def test_an_edit_is_decided_against_the_schedule_that_follows_it() -> None:
    # three eras: the held-back 20:20 goes to the third era's schedule, which has it
    every20 = CronSchedule("*/20 * * * *")
    eras = [
        ScheduleEra(CronSchedule("0 0 1 1 *"), since=utc(2030, 1, 1, 19)),
        ScheduleEra(every20, since=utc(2030, 1, 1, 20), jitter_offset_ms=1_200_000),
        ScheduleEra(every20, since=utc(2030, 1, 1, 20, 30)),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 1, 19), utc(2030, 1, 1, 21, 1), 10)
    assert [(f.at, f.era) for f in fires] == [
        (utc(2030, 1, 1, 20, 20), 2),
        (utc(2030, 1, 1, 20, 40), 2),
        (utc(2030, 1, 1, 21), 2),
    ]


def test_by_default_nothing_is_written_ahead_of_an_edit() -> None:
    eras = [
        ScheduleEra(CronSchedule("* * * * *"), since=utc(2030, 1, 1)),
        ScheduleEra(
            CronSchedule("*/5 * * * *"), since=utc(2030, 1, 1, 0, 7) - timedelta(milliseconds=1)
        ),
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 1, 0, 6), utc(2030, 1, 1, 0, 11), 10)
    assert [f.at.minute for f in fires] == [6, 10]  # 00:07 came a millisecond after the edit


def test_a_limit_keeps_the_oldest_fires_across_an_edit() -> None:
    # 20:20 is held back by 20 min of jitter when an edit to */7 lands at 20:30:01: it is
    # owed as edited at 20:40, while the new schedule already fires at 20:35
    eras = [
        ScheduleEra(
            CronSchedule("*/20 * * * *"), since=utc(2030, 1, 1, 20), jitter_offset_ms=1_200_000
        ),
        ScheduleEra(CronSchedule("*/7 * * * *"), since=utc(2030, 1, 1, 20, 30, 1)),
    ]
    start, end = utc(2030, 1, 1, 20), utc(2030, 1, 1, 21)
    every_fire = owed_fires(JOB, eras, start, end, 10)
    assert [(f.at.minute, f.era) for f in every_fire] == [
        (35, 1),
        (40, 0),
        (42, 1),
        (49, 1),
        (56, 1),
    ]
    for limit in range(6):
        assert owed_fires(JOB, eras, start, end, limit) == every_fire[:limit]


def test_the_walk_over_many_eras_takes_about_limit_fires_not_limit_per_era(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thirty edits of a minutely job, each two hours apart, and a limit of 50: the
    oldest 50 fires are all of the first era, and the later eras' walks stop at once
    instead of taking 50 fires each (1,500)."""
    import kit.core.owed as owed

    taken = 0
    real = owed.iter_fires

    def counted(*args: object) -> object:
        nonlocal taken
        for fire in real(*args):  # type: ignore[arg-type]
            taken += 1
            yield fire

    monkeypatch.setattr(owed, "iter_fires", counted)
    eras = [
        ScheduleEra(CronSchedule("* * * * *"), since=utc(2030, 1, 1) + timedelta(hours=2 * i))
        for i in range(30)
    ]
    fires = owed_fires(JOB, eras, utc(2030, 1, 1), utc(2030, 1, 4), 50)
    assert len(fires) == 50 and {f.era for f in fires} == {0}
    assert taken <= 2 * 50, taken


def test_a_dst_note_far_from_a_change_costs_no_cron_match() -> None:
    """Away from an offset change the note is None without asking croniter; at a
    change it still says what happened."""
    paris = CronSchedule("30 2 * * *", "Europe/Paris")
    assert dst_note(paris, utc(2030, 6, 1, 0, 30)) is None
    note = dst_note(paris, utc(2030, 3, 31, 1, 30))  # 02:30 did not exist: 03:30 CEST
    assert note is not None and "did not exist" in note

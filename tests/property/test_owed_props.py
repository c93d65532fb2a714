"""The fires explain and backfill say a schedule owed are exactly the runs the kit
writes when its scheduler's own decision (kit.core.trigger.decide_trigger) walks the
job's triggers through the same history: created, edited (the pending trigger moved as
job_update moves it, with or without runs already written ahead), DST days included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.owed import ScheduleEra, owed_fires
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule, Schedule, next_fire
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import DueTrigger, JobView, decide_trigger, trigger_after_edit

JOB = "3f1c2b7e-5d4a-4c3b-9a8e-7f6d5c4b3a21"
# Around the 2030 European fall-back (27 Oct) and spring-forward (31 Mar) days.
BASES = [datetime(2030, 10, 26, 20, tzinfo=UTC), datetime(2030, 3, 30, 20, tzinfo=UTC)]

schedules = st.one_of(
    st.builds(
        CronSchedule,
        st.sampled_from(["*/20 * * * *", "30 2 * * *", "0 * * * *", "15 1-3 * * *"]),
        st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"]),
    ),
    st.builds(
        IntervalSchedule,
        st.sampled_from([60, 600, 3600, 5400]),
        st.integers(0, 3600).map(lambda s: BASES[0] - timedelta(seconds=s)),
    ),
    st.integers(0, 30 * 3600).map(lambda s: OneOffSchedule(BASES[0] + timedelta(seconds=s))),
)


def walk(schedule: Schedule, jitter_ms: int, first_ms: int | None, stop_ms: int) -> list[int]:
    """The trigger times decide_trigger fires from a trigger at `first_ms` up to `stop_ms`,
    and the trigger left pending after them (or None)."""
    job = JobView(JOB, 1, schedule, jitter_offset_ms=jitter_ms)
    fired: list[int] = []
    fire_ms = first_ms
    while fire_ms is not None and fire_ms <= stop_ms:
        decision = decide_trigger(
            DueTrigger(0, fire_ms, JOB, 1), job, now_ms=fire_ms, horizon_ms=stop_ms
        )
        fired += [r.scheduled_at_ms for r in decision.runs]
        fire_ms = decision.next_fire_at_ms
    return [*fired, -1 if fire_ms is None else fire_ms]


def scheduler_history(
    first: Schedule,
    j0: int,
    second: Schedule,
    j1: int,
    created: datetime,
    edited: datetime,
    written_ahead_ms: int,
    end: datetime,
) -> list[int]:
    """What the kit does: the job is created (its first trigger as job_create makes it),
    the scheduler fires and writes runs up to `written_ahead_ms` past the edit, the edit
    moves the pending trigger as job_update does (trigger_after_edit), the scheduler goes
    on with the new schedule. Returns every run's scheduled time (fired or skipped)."""
    first_nominal = next_fire(first, created)
    first_ms = None if first_nominal is None else to_epoch_ms(first_nominal) + j0
    *old, pending = walk(first, j0, first_ms, to_epoch_ms(edited) + written_ahead_ms)
    runs = list(old)
    moved = trigger_after_edit(
        None if pending < 0 else pending, j0, second, j1, to_epoch_ms(edited)
    )
    if moved.skipped_ms is not None:
        runs.append(moved.skipped_ms)  # recorded as skipped ('edited')
    if moved.fire_at_ms is not None:
        new_first: int | None = moved.fire_at_ms
    else:
        nominal = next_fire(second, edited)
        new_first = None if nominal is None else to_epoch_ms(nominal) + j1
    *new, _ = walk(second, j1, new_first, to_epoch_ms(end) - 1)
    return sorted(runs + new)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(BASES),
    schedules,
    schedules,
    st.sampled_from([0, 1500, 59_999, 20 * 60_000, 20 * 60_000]),
    st.sampled_from([0, 700, 20 * 60_000]),
    st.one_of(  # edit, seconds after creation: anywhere, or just after a round time
        st.integers(0, 20 * 3600), st.integers(1, 120).map(lambda k: k * 600 + 1)
    ),
    st.integers(0, 30 * 3600),  # range start, seconds after base
    st.integers(1, 12 * 3600),  # range length
    st.sampled_from([0, 5000]),  # how far ahead the scheduler had written runs at the edit
)
def test_owed_fires_are_the_scheduler_s_fires(
    base: datetime,
    first: Schedule,
    second: Schedule,
    jitter0: int,
    jitter1: int,
    edit_s: int,
    start_s: int,
    length_s: int,
    written_ahead_ms: int,
) -> None:
    created = base
    edited = created + timedelta(seconds=edit_s)
    start = base + timedelta(seconds=start_s)
    end = start + timedelta(seconds=length_s)
    eras = [ScheduleEra(first, created, jitter0), ScheduleEra(second, edited, jitter1)]
    history = scheduler_history(
        first, jitter0, second, jitter1, created, edited, written_ahead_ms, end
    )
    expected = [ms for ms in history if to_epoch_ms(start) <= ms < to_epoch_ms(end)]
    got = owed_fires(JOB, eras, start, end, 10_000, written_ahead_ms=written_ahead_ms)
    assert [to_epoch_ms(f.at) for f in got] == expected
    assert all(f.at.tzinfo is not None for f in got)
    assert [f.at for f in got] == sorted(from_epoch_ms(ms) for ms in expected)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(BASES),
    st.lists(schedules, min_size=1, max_size=4),
    st.lists(st.sampled_from([0, 700, 59_999, 20 * 60_000]), min_size=4, max_size=4),
    st.lists(st.integers(60, 6 * 3600), min_size=3, max_size=3),  # gaps between edits
    st.integers(0, 20 * 3600),
    st.integers(1, 30 * 3600),
    st.integers(1, 60),
    st.sampled_from([0, 5000]),
)
def test_a_limit_takes_the_oldest_fires_of_all_eras(
    base: datetime,
    eras_schedules: list[Schedule],
    jitters: list[int],
    gaps: list[int],
    start_s: int,
    length_s: int,
    limit: int,
    written_ahead_ms: int,
) -> None:
    """The walk that stops each era at the oldest `limit` fires known so far answers what
    walking every era whole and keeping the oldest `limit` answers."""
    since = [base]
    for gap in gaps[: len(eras_schedules) - 1]:
        since.append(since[-1] + timedelta(seconds=gap))
    eras = [
        ScheduleEra(s, at, jitters[i])
        for i, (s, at) in enumerate(zip(eras_schedules, since, strict=True))
    ]
    start = base + timedelta(seconds=start_s)
    end = start + timedelta(seconds=length_s)
    everything = owed_fires(JOB, eras, start, end, 100_000, written_ahead_ms=written_ahead_ms)
    limited = owed_fires(JOB, eras, start, end, limit, written_ahead_ms=written_ahead_ms)
    assert limited == everything[:limit]

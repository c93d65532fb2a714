"""The fires explain and backfill say a schedule owed are exactly the runs the
scheduler's own decision (kit.core.trigger.decide_trigger) plans when it walks the
job's triggers through the same history, edits and DST days included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.owed import ScheduleEra, owed_fires
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule, Schedule, next_fire
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import DueTrigger, JobView, decide_trigger

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


def scheduler_walk(
    schedule: Schedule, jitter_ms: int, since: datetime, until: datetime | None, end: datetime
) -> list[int]:
    """The trigger times the scheduler fires: the first as job create/edit computes it,
    then decide_trigger's own walk, up to the edit (`until`) or `end`."""
    first = next_fire(schedule, since)
    if first is None:
        return []
    job = JobView(JOB, 1, schedule, jitter_offset_ms=jitter_ms)
    stop_ms = to_epoch_ms(end) - 1
    if until is not None:
        stop_ms = min(stop_ms, to_epoch_ms(until))
    fired: list[int] = []
    fire_ms: int | None = to_epoch_ms(first) + jitter_ms
    while fire_ms is not None and fire_ms <= stop_ms:
        decision = decide_trigger(
            DueTrigger(0, fire_ms, JOB, 1), job, now_ms=fire_ms, horizon_ms=stop_ms
        )
        fired += [r.scheduled_at_ms for r in decision.runs]
        fire_ms = decision.next_fire_at_ms
    return fired


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(BASES),
    schedules,
    schedules,
    st.sampled_from([0, 0, 1500, 59_999]),
    st.sampled_from([0, 700]),
    st.one_of(  # edit, seconds after creation: anywhere, or just after a round time
        st.integers(0, 20 * 3600), st.integers(1, 120).map(lambda k: k * 600 + 1)
    ),
    st.integers(0, 30 * 3600),  # range start, seconds after base
    st.integers(1, 12 * 3600),  # range length
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
) -> None:
    created = base
    edited = created + timedelta(seconds=edit_s)
    start = base + timedelta(seconds=start_s)
    end = start + timedelta(seconds=length_s)
    eras = [ScheduleEra(first, created, jitter0), ScheduleEra(second, edited, jitter1)]
    expected = [
        ms
        for ms in scheduler_walk(first, jitter0, created, edited, end)
        + scheduler_walk(second, jitter1, edited, None, end)
        if to_epoch_ms(start) <= ms
    ]
    got = owed_fires(JOB, eras, start, end, 10_000)
    assert [to_epoch_ms(f.at) for f in got] == expected
    assert all(f.at.tzinfo is not None for f in got)
    assert [f.at for f in got] == sorted(from_epoch_ms(ms) for ms in expected)

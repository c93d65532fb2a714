"""decide_trigger's common-case shortcut decides exactly what the general rules do, and
decide_scan's decisions do not depend on whether the shortcut was taken."""

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.dispatch import PRIORITY_TIERS
from kit.core.policies import MISFIRE_KINDS, MisfirePolicy, OverlapPolicy
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import DueTrigger, JobView, decide_trigger, decide_trigger_full

T0 = to_epoch_ms(datetime(2030, 3, 31, tzinfo=UTC))
JOBS = ["7b9d3c1e-0000-4000-8000-00000000000" + str(i) for i in range(3)]

schedules = st.one_of(
    st.builds(
        OneOffSchedule, st.integers(T0 - 20_000, T0 + 20_000).map(lambda ms: from_epoch_ms(ms))
    ),
    st.builds(
        IntervalSchedule,
        st.integers(1, 30),
        st.integers(T0 - 100_000, T0).map(lambda ms: from_epoch_ms(ms)),
    ),
    st.builds(
        CronSchedule,
        st.sampled_from(["* * * * *", "*/2 * * * *", "0 * * * *"]),
        st.sampled_from(["UTC", "Europe/Berlin"]),
    ),
)
jobs = st.builds(
    JobView,
    st.sampled_from(JOBS),
    st.integers(1, 2),
    schedules,
    priority=st.sampled_from(PRIORITY_TIERS),
    jitter_offset_ms=st.sampled_from([0, 0, 250, 1999]),
    paused=st.booleans(),
    overlap=st.sampled_from(list(OverlapPolicy)),
    misfire=st.builds(MisfirePolicy, st.sampled_from(MISFIRE_KINDS), st.integers(0, 60)),
)
triggers = st.builds(
    DueTrigger,
    st.integers(0, 1023),
    st.integers(T0 - 30_000, T0 + 30_000),
    st.sampled_from(JOBS),
    st.integers(1, 2),
    kind=st.sampled_from(["schedule", "schedule", "schedule", "manual", "retry"]),
    attempt=st.integers(1, 5),
    run_scheduled_at_ms=st.one_of(st.none(), st.integers(T0 - 60_000, T0)),
)


@settings(max_examples=400)
@given(
    triggers,
    st.one_of(st.none(), jobs),
    st.integers(T0 - 10_000, T0 + 10_000),
    st.integers(0, 10_000),
    st.integers(0, 3),
    st.integers(1, 20),
)
def test_the_shortcut_equals_the_general_rules(trig, job, now_ms, ahead_ms, active, max_fires):
    horizon_ms = now_ms + ahead_ms
    fast = decide_trigger(trig, job, now_ms, horizon_ms, active, max_fires=max_fires)
    full = decide_trigger_full(trig, job, now_ms, horizon_ms, active, max_fires=max_fires)
    assert fast == full


@settings(max_examples=100)
@given(st.integers(T0 - 1999, T0 + 10_000), st.integers(1, 10), st.integers(0, 5))
def test_the_shortcut_is_taken_for_an_on_time_allowed_job(fire_at_ms, every_s, active):
    job = JobView(JOBS[0], 1, IntervalSchedule(every_s, from_epoch_ms(T0 - 3_600_000)))
    trig = DueTrigger(3, fire_at_ms, JOBS[0], 1)
    d = decide_trigger(trig, job, T0, T0 + 5000, active)
    assert d == decide_trigger_full(trig, job, T0, T0 + 5000, active)
    assert all(r.fired for r in d.runs)
    assert d.delete == (fire_at_ms <= T0 + 5000)

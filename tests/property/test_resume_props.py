"""A resumed job's trigger (`kit.core.trigger.trigger_after_resume`) goes to the first
fire its misfire policy still runs of those it owed while paused: every owed fire from
the one its trigger waited at to now, the late ones (before now - grace) split by
`kit.core.policies.plan_misfire`, the others on time. Over schedules with jitter,
pauses of minutes to days, and every policy."""

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.policies import MisfirePolicy, plan_misfire
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import JobView, next_fire_ms, trigger_after_resume

T0 = to_epoch_ms(datetime(2030, 3, 28, 22, 0, tzinfo=UTC))  # Paris springs forward after
SCHEDULES = [
    CronSchedule("* * * * *", "UTC"),
    CronSchedule("0 * * * *", "Europe/Paris"),
    CronSchedule("30 2 * * *", "Europe/Paris"),
    CronSchedule("*/7 9-17 * * 1-5", "America/New_York"),
    IntervalSchedule(45, from_epoch_ms(T0 - 13_000)),
    OneOffSchedule(from_epoch_ms(T0 + 600_000)),
]


def _owed(job: JobView, start_ms: int, until_ms: int) -> list[int]:
    """The waiting fire, every fire after it up to `until_ms`, and the one after that."""
    out = [start_ms]
    while out[-1] <= until_ms:
        nxt = next_fire_ms(job, out[-1])
        if nxt is None:
            break
        out.append(nxt)
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(SCHEDULES),
    st.sampled_from([0, 0, 7_000, 45_000]),
    st.sampled_from(["run_once", "run_all", "skip_late"]),
    st.sampled_from([0, 5, 60, 3_600]),
    # how long paused: any time, or just after a whole number of minutes or hours (a fire
    # a moment before the resume: on time, whatever the deadline)
    st.integers(0, 3 * 86_400_000)
    | st.builds(
        lambda n, unit, d: n * unit + d,
        st.integers(0, 30),
        st.sampled_from([60_000, 3_600_000]),
        st.integers(0, 16_000),
    ),
    st.sampled_from([0, 5_000, 15_000]),
)
def test_resume_goes_to_the_first_fire_the_policy_runs(
    schedule, jitter_ms, kind, deadline_s, paused_ms, grace_ms
):
    job = JobView("00000000-0000-4000-8000-000000000001", 2, schedule, jitter_offset_ms=jitter_ms,
                  misfire=MisfirePolicy(kind, deadline_s))  # fmt: skip
    waiting = next_fire_ms(job, T0)
    if waiting is None:
        return
    now = waiting + paused_ms
    owed = _owed(job, waiting, now)
    late = [f for f in owed if f < now - grace_ms]
    on_time = [f for f in owed if f >= now - grace_ms]
    run = plan_misfire(late, now, job.misfire).fire_ms + on_time[:1]
    assert trigger_after_resume(waiting, job, now, grace_ms) == (min(run) if run else None)


def test_a_finished_one_off_stays_finished():
    job = JobView("j", 1, OneOffSchedule(from_epoch_ms(T0)))
    assert trigger_after_resume(None, job, T0) is None

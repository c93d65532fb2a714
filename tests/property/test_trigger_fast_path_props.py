"""decide_trigger's common-case shortcut decides exactly what the general rules do, and
the generators reach the shortcut: cron and interval schedules whose fires land in the
window, jitter, every priority and `max_fires` limits, in a share the test asserts
(a shortcut that dropped the priority or ignored `max_fires` must be caught every run,
not by chance)."""

from collections import Counter
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

import kit.core.trigger as trigger_mod
from kit.core.defaults import MISFIRE_GRACE_MS
from kit.core.dispatch import PRIORITY_TIERS
from kit.core.policies import MISFIRE_KINDS, MisfirePolicy, OverlapPolicy
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import (
    DueTrigger,
    JobView,
    decide_scan,
    decide_trigger,
    decide_trigger_full,
    held_back,
    next_fire_ms,
)

# 2 s before a top of the hour (every cron here fires then), which is Berlin springing
# forward (02:00 -> 03:00 local, so "30 2 * * *" there fires shifted, at 01:30Z)
T0 = to_epoch_ms(datetime(2030, 3, 31, 0, 59, 58, tzinfo=UTC))
JOBS = ["7b9d3c1e-0000-4000-8000-00000000000" + str(i) for i in range(3)]
EXAMPLES = 600
# The share of examples that must take the shortcut, and how often each feature must show
# on it (measured: 284/600, each feature 24-155 times; docs/mutation.md): well under what
# the generators give, so another hypothesis version's draws do not flake, and well over
# "a handful".
MIN_SHORTCUT_SHARE = 0.4
MIN_PER_FEATURE = 5

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
        st.sampled_from(["* * * * *", "*/2 * * * *", "0 * * * *", "0,1,2 1 * * *", "30 2 * * *"]),
        st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]),
    ),
)


@st.composite
def cases(draw):
    """A job and one of its triggers, mostly the common case: same job and version, a
    schedule trigger at one of the schedule's own (jittered) fire times, on time."""
    schedule = draw(schedules)
    job = JobView(
        draw(st.sampled_from(JOBS)),
        draw(st.integers(1, 2)),
        schedule,
        priority=draw(st.sampled_from(PRIORITY_TIERS)),
        jitter_offset_ms=draw(st.sampled_from([0, 250, 1999, 59_999])),
        paused=draw(st.sampled_from([False] * 9 + [True])),
        overlap=draw(st.sampled_from([OverlapPolicy.allow] * 9 + list(OverlapPolicy))),
        misfire=draw(st.builds(MisfirePolicy, st.sampled_from(MISFIRE_KINDS), st.integers(0, 60))),
    )
    now_ms = draw(st.integers(T0 - 10_000, T0 + 10_000))
    # one of the schedule's fire times from somewhat before now, else an arbitrary time
    start = now_ms - draw(st.sampled_from([0, 5_000, MISFIRE_GRACE_MS, 120_000]))
    own = next_fire_ms(job, start)
    fire_at = own if own is not None and draw(st.integers(0, 9)) else None
    if fire_at is None:
        fire_at = draw(st.integers(T0 - 30_000, T0 + 30_000))
    same = draw(st.integers(0, 19)) > 0
    trig = DueTrigger(
        draw(st.integers(0, 1023)),
        fire_at,
        job.job_id if same else draw(st.sampled_from(JOBS)),
        job.version if same else draw(st.integers(1, 2)),
        kind=draw(st.sampled_from(["schedule"] * 18 + ["manual", "retry"])),
        attempt=draw(st.integers(1, 5)),
        run_scheduled_at_ms=draw(st.one_of(st.none(), st.integers(T0 - 60_000, T0))),
    )
    horizon_ms = now_ms + draw(st.sampled_from([0, 1_000, 10_000, 65_000, 200_000]))
    gone = draw(st.integers(0, 39)) == 0
    return trig, (None if gone else job), now_ms, horizon_ms


def test_the_shortcut_equals_the_general_rules_and_is_reached(monkeypatch) -> None:
    taken: list[trigger_mod.TriggerDecision] = []
    on_time = trigger_mod._decide_on_time

    def counting(trig, job, horizon_ms, max_fires):
        d = on_time(trig, job, horizon_ms, max_fires)
        taken.append((d, job, max_fires))
        return d

    monkeypatch.setattr(trigger_mod, "_decide_on_time", counting)
    seen = Counter()

    @settings(max_examples=EXAMPLES)
    @given(cases(), st.integers(0, 3), st.sampled_from([1, 2, 3, 5, 20, 500]))
    def check(case, active, max_fires):
        trig, job, now_ms, horizon_ms = case
        before = len(taken)
        fast = decide_trigger(trig, job, now_ms, horizon_ms, active, max_fires=max_fires)
        full = decide_trigger_full(trig, job, now_ms, horizon_ms, active, max_fires=max_fires)
        assert fast == full
        seen["examples"] += 1
        if len(taken) == before:
            return
        seen["shortcut"] += 1
        d, job, _ = taken[-1]
        if not d.runs:
            return
        seen["fired"] += 1
        seen[f"priority {job.priority}"] += 1
        if isinstance(job.schedule, CronSchedule):
            seen["cron fired"] += 1
        if job.jitter_offset_ms:
            seen["jitter fired"] += 1
        if len(d.runs) > 1:
            seen["several fires"] += 1
        nxt = d.next_fire_at_ms
        if len(d.runs) == max_fires and nxt is not None and nxt <= horizon_ms:
            seen["max_fires cut"] += 1

    check()
    share = seen["shortcut"] / seen["examples"]
    print(f"shortcut taken in {seen['shortcut']}/{seen['examples']} = {share:.0%}: {dict(seen)}")
    assert share >= MIN_SHORTCUT_SHARE, seen
    features = ["cron fired", "jitter fired", "several fires", "max_fires cut"]
    features += [f"priority {p}" for p in PRIORITY_TIERS]
    if seen["examples"] < EXAMPLES:
        return  # a mutation run's capped examples (tests/conftest.py): the share only
    for feature in features:
        assert seen[feature] >= MIN_PER_FEATURE, (feature, seen)


@settings(max_examples=100)
@given(st.integers(T0 - 1999, T0 + 10_000), st.integers(1, 10), st.integers(0, 5))
def test_the_shortcut_is_taken_for_an_on_time_allowed_job(fire_at_ms, every_s, active):
    job = JobView(JOBS[0], 1, IntervalSchedule(every_s, from_epoch_ms(T0 - 3_600_000)))
    trig = DueTrigger(3, fire_at_ms, JOBS[0], 1)
    d = decide_trigger(trig, job, T0, T0 + 5000, active)
    assert d == decide_trigger_full(trig, job, T0, T0 + 5000, active)
    assert all(r.fired for r in d.runs)
    assert d.delete == (fire_at_ms <= T0 + 5000)


@settings(max_examples=200)
@given(
    st.lists(cases(), min_size=1, max_size=6),
    st.dictionaries(st.sampled_from(JOBS), st.integers(0, 2)),
)
def test_a_scan_decides_as_the_general_rules_in_fire_order(many, active):
    """decide_scan = the general rules applied in fire order, counting the runs each
    decision made pending as active for the job's later triggers."""
    trigs = [c[0] for c in many]
    jobs = {c[1].job_id: c[1] for c in many if c[1] is not None}
    now_ms, horizon_ms = many[0][2], many[0][3]
    got = decide_scan(trigs, jobs, active, now_ms, horizon_ms)
    count = dict(active)
    want = []
    for trig in sorted(trigs, key=lambda t: (t.fire_at_ms, t.job_id, t.kind)):
        d = decide_trigger_full(
            trig, jobs.get(trig.job_id), now_ms, horizon_ms, count.get(trig.job_id, 0)
        )
        want.append(d)
        if d.cancel_active:
            count[trig.job_id] = 0
        pending = sum(1 for r in d.runs if r.status == "pending") + (d.rearm is not None)
        count[trig.job_id] = count.get(trig.job_id, 0) + pending
    assert got == want


@settings(max_examples=400)
@given(cases(), st.integers(0, 3))
def test_held_back_is_exactly_what_a_scan_leaves(case, active):
    """The store's due query leaves out what `held_back` says (its SQL mirrors it): that
    must be exactly the read triggers (fire_at <= horizon) a scan would not delete, so a
    row left out is one the scan would not have taken, and a row read is taken."""
    trig, job, now_ms, horizon_ms = case
    if trig.fire_at_ms > horizon_ms:
        return  # never read
    d = decide_trigger(trig, job, now_ms, horizon_ms, active)
    assert held_back(trig, job, now_ms, horizon_ms) == (not d.delete)

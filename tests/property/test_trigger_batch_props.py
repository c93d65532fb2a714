"""The scan's batch decision (`kit.core.trigger_batch.decide_batch`: the common case
column by column, next fires from a FireTable) gives every trigger exactly the decision
`kit.core.trigger.decide_scan` gives it: over batches mixing jobs that allow or limit
overlap (with and without runs active), paused, edited (stale versions) and deleted
jobs, retry and manual triggers, on-time, late and not-yet-due fires, jitter, schedules
that fire several times in a window, and any per-trigger cap of fires."""

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.fire_table import FireTable
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import decide_scan
from kit.core.trigger_batch import DueBatch, JobShape, decide_batch

NOW = to_epoch_ms(datetime(2030, 1, 7, 0, 0, tzinfo=UTC))
HORIZON = NOW + 10_000
ANCHOR = datetime(2030, 1, 1, tzinfo=UTC)

schedules = st.sampled_from(
    [
        CronSchedule("0 * * * *", "UTC"),
        CronSchedule("* * * * *", "Europe/Paris"),
        CronSchedule("*/5 * * * *", "Australia/Lord_Howe"),
        IntervalSchedule(1, ANCHOR),  # ten fires in a window
        IntervalSchedule(3, ANCHOR),
        IntervalSchedule(60, ANCHOR),
        OneOffSchedule(from_epoch_ms(NOW + 2_000)),
        OneOffSchedule(from_epoch_ms(NOW - 30_000)),
    ]
)
shapes = st.builds(
    JobShape,
    schedule=schedules,
    priority=st.sampled_from(["critical", "high", "normal", "low"]),
    jitter_s=st.sampled_from([0, 0, 0, 10, 60]),
    paused=st.sampled_from([False] * 6 + [True]),
    overlap=st.sampled_from(list(OverlapPolicy) + [OverlapPolicy.allow] * 3),
    misfire=st.builds(
        MisfirePolicy,
        kind=st.sampled_from(["run_once", "run_all", "skip_late"]),
        deadline_s=st.sampled_from([0, 5, 60]),
    ),
)
# a job: its shape and version (None: deleted), and its runs active
jobs = st.tuples(st.one_of(st.none(), shapes), st.integers(1, 3), st.integers(0, 2))
triggers = st.tuples(
    st.integers(0, 3),  # which job
    # fire time after NOW: about the edges of lateness, the overlap window and the horizon
    st.sampled_from([-60_000, -20_000, -5_001, -5_000, -1, 0, 1, 999, 1_000, 1_001, 10_000])
    | st.integers(-60_000, 15_000),
    st.sampled_from(["schedule"] * 6 + ["retry", "manual"]),
    st.integers(0, 1),  # how far behind the job's version
    st.integers(1, 3),  # attempt
)


def _batch(job_list, trigger_list):
    batch = DueBatch()
    seen = set()
    for k, (j, offset_ms, kind, behind, attempt) in enumerate(trigger_list):
        shape, version, active = job_list[j % len(job_list)]
        job_id = f"00000000-0000-4000-8000-{j % len(job_list):012d}"
        key = (NOW + offset_ms, job_id, kind)
        if key in seen:
            continue
        seen.add(key)
        job_version = max(1, version - behind)
        # the store counts active runs where the decision needs them (kit.store.scheduling)
        counted = (
            kind == "schedule"
            and shape is not None
            and shape.overlap is not OverlapPolicy.allow
            and not shape.paused
            and job_version == version
        )
        batch.partition_id.append(k % 4)
        batch.fire_at_ms.append(NOW + offset_ms)
        batch.job_id.append(job_id)
        batch.job_version.append(job_version)
        batch.kind.append(kind)
        batch.attempt.append(attempt)
        batch.run_scheduled_at_ms.append(NOW + offset_ms - 5_000 if kind == "retry" else None)
        batch.version.append(None if shape is None else version)
        batch.shape.append(shape)
        batch.active.append(active if counted else 0)
    return batch


def _reference(batch, active_of, limits):
    due = [batch.trigger(i) for i in range(len(batch))]
    views = {
        batch.job_id[i]: batch.shape[i].view(batch.job_id[i], batch.version[i])
        for i in range(len(batch))
        if batch.shape[i] is not None
    }
    active = {
        job: active_of[job]
        for job, view in views.items()
        if view.overlap is not OverlapPolicy.allow
    }
    decided = decide_scan(due, views, active, NOW, HORIZON, **limits)
    by_trigger = {id(d.trigger): d for d in decided}
    return {i: by_trigger[id(t)] for i, t in enumerate(due)}


@settings(max_examples=400, deadline=None)
@given(
    st.lists(jobs, min_size=1, max_size=6),
    st.lists(triggers, max_size=14),
    st.sampled_from([1, 2, 3, 500]),
    st.sampled_from([0, 5_000, 15_000]),
)
def test_decide_batch_is_decide_scan(job_list, trigger_list, max_fires, grace_ms):
    batch = _batch(job_list, trigger_list)
    active_of = {
        f"00000000-0000-4000-8000-{j:012d}": active for j, (_s, _v, active) in enumerate(job_list)
    }
    limits = {"max_fires": max_fires, "misfire_grace_ms": grace_ms}
    plan = decide_batch(batch, NOW, HORIZON, FireTable(), **limits)
    got = plan.decisions(batch)
    want = _reference(batch, active_of, limits)
    assert got == want
    assert len(plan.on_time) == len(set(plan.on_time))
    assert set(plan.on_time).isdisjoint(i for i, _ in plan.general)


def test_a_burst_of_one_expression_is_decided_on_time_with_one_lookup():
    table = FireTable()
    shape = JobShape(CronSchedule("0 * * * *", "UTC"), overlap=OverlapPolicy.forbid)
    batch = DueBatch()
    for k in range(1000):
        batch.partition_id.append(k % 1024)
        batch.fire_at_ms.append(NOW)
        batch.job_id.append(f"00000000-0000-4000-8000-{k:012d}")
        batch.job_version.append(1)
        batch.kind.append("schedule")
        batch.attempt.append(1)
        batch.run_scheduled_at_ms.append(None)
        batch.version.append(1)
        batch.shape.append(shape)
        batch.active.append(0)
    plan = decide_batch(batch, NOW - 900, NOW - 900 + 10_000, table)
    assert plan.general == [] and len(plan.run_ids) == 1000 and table.built == 1
    assert set(plan.next_fire_at_ms) == {NOW + 3_600_000}


def _same(job_list, trigger_list, **limits):
    batch = _batch(job_list, trigger_list)
    active_of = {
        f"00000000-0000-4000-8000-{j:012d}": active for j, (_s, _v, active) in enumerate(job_list)
    }
    plan = decide_batch(batch, NOW, HORIZON, FireTable(), **limits)
    got = plan.decisions(batch)
    assert got == _reference(batch, active_of, limits)
    return got


def test_a_job_that_limits_overlap_and_fires_twice_in_its_window_skips_the_second():
    every_second = JobShape(IntervalSchedule(1, ANCHOR), overlap=OverlapPolicy.forbid)
    (d,) = _same([(every_second, 1, 0)], [(0, -1, "schedule", 0, 1)]).values()
    assert [(r.status, r.skip_reason) for r in d.runs] == [("pending", None)] + [
        ("skipped", "overlap")
    ] * 2  # NOW - 1 ms, NOW, NOW + 1 s


def test_one_millisecond_late_goes_through_the_misfire_policy():
    skip = JobShape(CronSchedule("30 * * * *", "UTC"), misfire=MisfirePolicy("skip_late", 0))
    (d,) = _same([(skip, 1, 0)], [(0, -5_001, "schedule", 0, 1)], misfire_grace_ms=5_000).values()
    assert [(r.status, r.skip_reason) for r in d.runs] == [("skipped", "misfire")]


def test_a_job_that_limits_overlap_counts_its_runs_across_its_triggers():
    forbid = JobShape(CronSchedule("* * * * *", "UTC"), overlap=OverlapPolicy.forbid)
    got = _same([(forbid, 1, 0)], [(0, 0, "manual", 0, 1), (0, 0, "schedule", 0, 1)])
    # the manual run fired first (kind order) is active when the schedule's fire is judged
    assert sorted((r.trigger_kind, r.status) for d in got.values() for r in d.runs) == [
        ("manual", "pending"),
        ("schedule", "skipped"),
    ]

"""kit.core.trigger: what a scan does with each due trigger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.defaults import MISFIRE_GRACE_MS
from kit.core.ids import run_id
from kit.core.policies import MISFIRE_KINDS, MisfirePolicy, OverlapPolicy
from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import (
    DROP_JOB_GONE,
    DROP_STALE_VERSION,
    OVERLAP_HORIZON_MS,
    QUEUED,
    DueTrigger,
    JobView,
    decide_scan,
    decide_trigger,
    fired_runs,
    held_back,
    next_fire_ms,
    overlap_limit_ms,
)

T0 = to_epoch_ms(datetime(2030, 1, 1, tzinfo=UTC))
JOB = "7b9d3c1e-0000-4000-8000-000000000001"


def every(seconds: int, **kw) -> JobView:
    return JobView(JOB, 1, IntervalSchedule(seconds, from_epoch_ms(T0 - seconds * 1_000_000)), **kw)


def trig(at_ms: int, version: int = 1, **kw) -> DueTrigger:
    return DueTrigger(7, at_ms, JOB, version, **kw)


def test_fires_every_time_in_the_window_and_advances_past_it():
    d = decide_trigger(trig(T0 + 1000), every(1), now_ms=T0, horizon_ms=T0 + 5000)
    assert [r.scheduled_at_ms for r in d.runs] == [T0 + s * 1000 for s in range(1, 6)]
    assert all(r.fired and r.run_id == run_id(JOB, r.scheduled_at_ms) for r in d.runs)
    assert d.delete and d.next_fire_at_ms == T0 + 6000


def test_a_trigger_beyond_the_window_is_left_alone():
    d = decide_trigger(trig(T0 + 9000), every(1), now_ms=T0, horizon_ms=T0 + 5000)
    assert not d.delete and d.runs == ()


def test_one_off_fires_once_and_is_deleted():
    job = JobView(JOB, 1, OneOffSchedule(from_epoch_ms(T0 + 2000)))
    d = decide_trigger(trig(T0 + 2000), job, now_ms=T0, horizon_ms=T0 + 5000)
    assert [r.scheduled_at_ms for r in d.runs] == [T0 + 2000]
    assert d.delete and d.next_fire_at_ms is None


def test_jitter_is_kept_on_the_next_fire():
    job = JobView(JOB, 1, CronSchedule("* * * * *"), jitter_offset_ms=1234)
    d = decide_trigger(trig(T0 + 1234), job, now_ms=T0, horizon_ms=T0 + 5000)
    assert d.next_fire_at_ms == T0 + 60_000 + 1234
    assert next_fire_ms(job, T0 + 60_000 + 1234) == T0 + 120_000 + 1234


def test_old_version_and_deleted_job_never_fire():
    stale = decide_trigger(
        trig(T0, version=1),
        every(1).__class__(JOB, 2, every(1).schedule),
        now_ms=T0,
        horizon_ms=T0 + 5000,
    )
    gone = decide_trigger(trig(T0), None, now_ms=T0, horizon_ms=T0 + 5000)
    for d, why in ((stale, DROP_STALE_VERSION), (gone, DROP_JOB_GONE)):
        assert d.delete and d.runs == () and d.next_fire_at_ms is None and d.dropped == why


def test_a_paused_job_parks_its_trigger_and_writes_no_run():
    d = decide_trigger(trig(T0), every(2, paused=True), now_ms=T0, horizon_ms=T0 + 5000)
    assert d.delete and d.runs == () and d.parked_fire_at_ms == T0
    assert fired_runs([d]) == [] and d.next_fire_at_ms is None
    late = decide_trigger(trig(T0 - 600_000), every(2, paused=True), T0, T0 + 5000)
    assert late.parked_fire_at_ms == T0 - 600_000 and late.runs == ()
    # not due yet: left where it is, as for any job
    ahead = decide_trigger(trig(T0 + 6000), every(2, paused=True), T0, T0 + 5000)
    assert not ahead.delete and ahead.parked_fire_at_ms is None


def test_a_resumed_trigger_goes_where_the_misfire_policy_takes_up_the_owed_fires():
    from kit.core.policies import MisfirePolicy
    from kit.core.trigger import trigger_after_resume

    def job(kind: str, deadline_s: int = 60) -> JobView:
        return JobView(JOB, 3, IntervalSchedule(60, from_epoch_ms(T0)),
                       misfire=MisfirePolicy(kind, deadline_s))  # fmt: skip

    parked, now = T0, T0 + 3_600_000 + 20_000  # 61 fires owed, the latest 20 s ago
    assert trigger_after_resume(parked, job("run_all"), now, 5000) == parked
    assert trigger_after_resume(parked, job("run_once"), now, 5000) == T0 + 3_600_000
    assert trigger_after_resume(parked, job("skip_late", 600), now, 5000) == T0 + 3_060_000
    # nothing within the deadline: the next fire, whatever the policy skipped
    assert trigger_after_resume(parked, job("skip_late", 0), now, 5000) == T0 + 3_660_000
    # a fire of a moment ago is on time, not late: it stays owed
    assert trigger_after_resume(parked, job("run_once"), T0 + 3_000, 5000) == parked
    assert trigger_after_resume(None, job("run_all"), now, 5000) is None


def test_overlap_forbid_skips_while_a_run_is_active_and_looks_only_a_second_ahead():
    job = every(1, overlap=OverlapPolicy.forbid)
    d = decide_trigger(trig(T0 + 1000), job, now_ms=T0, horizon_ms=T0 + 5000, active_runs=1)
    assert [(r.scheduled_at_ms, r.skip_reason) for r in d.runs] == [(T0 + 1000, "overlap")]
    assert d.next_fire_at_ms == T0 + 2000
    free = decide_trigger(trig(T0 + 1000), job, now_ms=T0, horizon_ms=T0 + 5000)
    assert [r.fired for r in free.runs] == [True]


def test_overlap_limit_is_a_second_ahead_within_the_window():
    assert overlap_limit_ms(T0, T0 + 5000) == T0 + OVERLAP_HORIZON_MS
    assert overlap_limit_ms(T0, T0 + 300) == T0 + 300
    assert overlap_limit_ms(T0, T0 + 5000, overlap_horizon_ms=2500) == T0 + 2500


def test_held_back_is_what_the_scan_leaves_for_later():
    """Only an on-version schedule trigger of a live, unpaused job that limits overlap,
    due after the overlap limit, is left; the store does not read those."""
    now, hi = T0, T0 + 10_000
    later = trig(T0 + 5000)
    for policy in (OverlapPolicy.forbid, OverlapPolicy.queue, OverlapPolicy.replace):
        job = every(60, overlap=policy)
        assert held_back(later, job, now, hi)
        assert not decide_trigger(later, job, now_ms=now, horizon_ms=hi).delete
        assert not held_back(trig(T0 + OVERLAP_HORIZON_MS), job, now, hi)  # its second
    forbid = every(60, overlap=OverlapPolicy.forbid)
    taken = [
        (later, every(60)),  # overlap allowed
        (later, every(60, overlap=OverlapPolicy.forbid, paused=True)),  # parked
        (later, None),  # job gone: dropped
        (trig(T0 + 5000, version=2), forbid),  # stale version: dropped
        (trig(T0 + 5000, kind="manual"), forbid),
        (trig(T0 + 5000, kind="retry", run_scheduled_at_ms=T0 - 60_000), forbid),
    ]
    for t, job in taken:
        assert not held_back(t, job, now, hi), (t, job)
        assert decide_trigger(t, job, now_ms=now, horizon_ms=hi).delete, (t, job)


def test_overlap_queue_and_replace():
    q = decide_trigger(
        trig(T0 + 1000),
        every(60, overlap=OverlapPolicy.queue),
        now_ms=T0,
        horizon_ms=T0 + 5000,
        active_runs=1,
    )
    assert [(r.status, r.skip_reason) for r in q.runs] == [("pending", QUEUED)]
    assert fired_runs([q]) == []
    r = decide_trigger(
        trig(T0 + 1000),
        every(60, overlap=OverlapPolicy.replace),
        now_ms=T0,
        horizon_ms=T0 + 5000,
        active_runs=1,
    )
    assert r.cancel_active and [x.fired for x in r.runs] == [True]


def test_misfire_policies_after_an_outage():
    start = T0 - 60_000  # a minute of missed 10 s fires: -60..-10 s, then on time
    now, hi = T0, T0 + 5000
    kinds = {}
    for kind in MISFIRE_KINDS:
        job = every(10, misfire=MisfirePolicy(kind, deadline_s=25))
        d = decide_trigger(trig(start), job, now_ms=now, horizon_ms=hi, misfire_grace_ms=2000)
        kinds[kind] = [(r.scheduled_at_ms - T0) // 1000 for r in d.runs if r.fired]
        assert [(r.scheduled_at_ms - T0) // 1000 for r in d.runs] == [
            -60,
            -50,
            -40,
            -30,
            -20,
            -10,
            0,
        ]
    assert kinds["run_all"] == [-60, -50, -40, -30, -20, -10, 0]
    assert kinds["run_once"] == [-10, 0]
    assert kinds["skip_late"] == [-20, -10, 0]


def test_retry_trigger_rearms_its_run():
    t = trig(T0 + 3000, kind="retry", attempt=2, run_scheduled_at_ms=T0 - 5000)
    d = decide_trigger(t, every(60), now_ms=T0, horizon_ms=T0 + 5000)
    assert d.rearm is not None and d.rearm.run_id == run_id(JOB, T0 - 5000)
    assert d.rearm.attempt == 2 and d.rearm.due_ms == T0 + 3000 and d.delete and d.runs == ()
    paused = decide_trigger(t, every(60, paused=True), now_ms=T0, horizon_ms=T0 + 5000)
    assert paused.rearm is None and paused.cancel_run_id == run_id(JOB, T0 - 5000)
    gone = decide_trigger(t, None, now_ms=T0, horizon_ms=T0 + 5000)
    assert gone.rearm is None and gone.cancel_run_id == run_id(JOB, T0 - 5000)
    assert gone.dropped == DROP_JOB_GONE


def test_retry_survives_an_edit_of_its_job():
    t = trig(T0 + 3000, kind="retry", attempt=2, run_scheduled_at_ms=T0 - 5000, version=1)
    edited = every(60).__class__(JOB, 2, every(60).schedule)
    d = decide_trigger(t, edited, now_ms=T0, horizon_ms=T0 + 5000)
    assert d.rearm is not None and d.rearm.run_id == run_id(JOB, T0 - 5000)
    assert d.cancel_run_id is None and d.dropped is None


def test_scan_counts_runs_fired_earlier_in_the_scan_as_active():
    other = DueTrigger(7, T0 + 500, JOB, 1, kind="manual")
    ds = decide_scan(
        [trig(T0 + 1000), other],
        {JOB: every(60, overlap=OverlapPolicy.forbid)},
        {},
        now_ms=T0,
        horizon_ms=T0 + 5000,
    )
    assert [r.skip_reason for d in ds for r in d.runs] == [None, "overlap"]


# -- properties ---------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    every_s=st.integers(1, 120),
    behind_s=st.integers(0, 4000),
    kind=st.sampled_from(MISFIRE_KINDS),
    deadline_s=st.integers(0, 600),
    max_fires=st.integers(1, 50),
)
def test_successive_scans_account_for_every_fire_time_once(
    every_s, behind_s, kind, deadline_s, max_fires
):
    """Chunked catch-up: every fire time up to the horizon becomes exactly one run
    (fired or skipped), run_once fires at most one late time, run_all skips none."""
    job = every(every_s, misfire=MisfirePolicy(kind, deadline_s))
    now = T0 + behind_s * 1000
    at: int | None = T0
    seen: list[int] = []
    fired_late = 0
    for _ in range(10_000):
        if at is None:
            break
        d = decide_trigger(trig(at), job, now_ms=now, horizon_ms=now + 5000, max_fires=max_fires)
        if not d.delete:
            break
        seen += [r.scheduled_at_ms for r in d.runs]
        fired_late += sum(
            1 for r in d.runs if r.fired and r.scheduled_at_ms < now - MISFIRE_GRACE_MS
        )
        if kind == "run_all":
            assert all(r.fired for r in d.runs)
        at = d.next_fire_at_ms
    expected = list(range(T0, now + 5000 + 1, every_s * 1000))
    assert seen == expected
    if kind == "run_once":
        assert fired_late == (1 if any(t < now - MISFIRE_GRACE_MS for t in expected) else 0)


def test_a_fire_is_missed_only_when_later_than_a_failover():
    """The default grace covers a dead node's partition moving and being scanned: a fire
    that late is still on time; one a millisecond later goes through the policy."""
    from kit.core import defaults

    grace = defaults.misfire_grace_ms()
    assert grace == MISFIRE_GRACE_MS > defaults.PARTITION_LEASE_TTL_MS + defaults.NODE_HEARTBEAT_MS
    job = every(10, misfire=MisfirePolicy("skip_late", deadline_s=0))
    for late_ms, fired in ((grace, True), (grace + 1, False)):
        d = decide_trigger(trig(T0 - late_ms), job, now_ms=T0, horizon_ms=T0 - late_ms)
        assert [r.fired for r in d.runs] == [fired]


def test_an_edit_keeps_or_records_the_fire_it_owed():
    from kit.core.schedule import parse_schedule
    from kit.core.trigger import EditedTrigger, trigger_after_edit

    t0 = datetime(2030, 1, 7, 11, tzinfo=UTC)
    hourly = parse_schedule({"cron": "0 * * * *"}, now=t0)
    half = parse_schedule({"cron": "30 * * * *"}, now=t0)
    noon = to_epoch_ms(datetime(2030, 1, 7, 12, tzinfo=UTC))
    old_fire = noon + 600_000  # jitter 10 min
    # the occurrence came, its fire did not: the same schedule keeps it at the new jitter
    assert trigger_after_edit(old_fire, 600_000, hourly, 5_000, noon + 1) == EditedTrigger(
        noon + 5_000
    )
    # a schedule without that occurrence: from now, and the old fire is recorded
    assert trigger_after_edit(old_fire, 600_000, half, 0, noon + 1) == EditedTrigger(
        None, skipped_ms=old_fire
    )
    # nothing owed yet (before the occurrence), or no trigger at all: from now
    assert trigger_after_edit(old_fire, 600_000, half, 0, noon - 1) == EditedTrigger(None)
    assert trigger_after_edit(None, 0, hourly, 0, noon) == EditedTrigger(None)


# -- edges the full mutation run found unguarded --------------------------------------


def test_a_retry_decision_is_whole():
    from kit.core.trigger import DROP_MALFORMED, Rearm, TriggerDecision

    t = trig(T0 + 3000, kind="retry", attempt=2, run_scheduled_at_ms=T0 - 5000)
    rid = run_id(JOB, T0 - 5000)
    job = every(60, priority="high")
    assert decide_trigger(t, job, now_ms=T0, horizon_ms=T0 + 5000) == TriggerDecision(
        t, delete=True, rearm=Rearm(rid, JOB, 2, T0 - 5000, T0 + 3000, "high")
    )
    paused = every(60, paused=True)
    assert decide_trigger(t, paused, now_ms=T0, horizon_ms=T0 + 5000) == TriggerDecision(
        t, delete=True, cancel_run_id=rid, dropped="paused"
    )
    assert decide_trigger(t, None, now_ms=T0, horizon_ms=T0 + 5000) == TriggerDecision(
        t, delete=True, cancel_run_id=rid, dropped=DROP_JOB_GONE
    )
    nameless = trig(T0 + 3000, kind="retry", attempt=2)
    assert decide_trigger(nameless, job, now_ms=T0, horizon_ms=T0 + 5000) == TriggerDecision(
        nameless, delete=True, dropped=DROP_MALFORMED
    )
    assert DROP_MALFORMED == "retry trigger names no run"


def test_a_scan_passes_its_limits_to_every_trigger():
    ds = decide_scan([trig(T0)], {JOB: every(1)}, {}, now_ms=T0, horizon_ms=T0 + 5000, max_fires=2)
    assert [r.scheduled_at_ms for r in ds[0].runs] == [T0, T0 + 1000]
    assert ds[0].next_fire_at_ms == T0 + 2000


def test_a_scan_keeps_the_active_count_a_skipped_fire_leaves():
    # one run active: the first trigger's fire is skipped, and so is the second's
    job = every(600, overlap=OverlapPolicy.forbid)
    ds = decide_scan(
        [trig(T0), trig(T0 + 500)], {JOB: job}, {JOB: 1}, now_ms=T0, horizon_ms=T0 + 5000
    )
    assert [r.skip_reason for d in ds for r in d.runs] == ["overlap", "overlap"]


def test_a_scan_counts_nothing_for_a_fire_the_misfire_policy_skipped():
    # the first fire is late beyond its deadline (skipped), so nothing is active when the
    # second is due on time: it fires
    late = T0 - MISFIRE_GRACE_MS - 1
    job = JobView(
        JOB,
        1,
        OneOffSchedule(from_epoch_ms(late)),
        overlap=OverlapPolicy.forbid,
        misfire=MisfirePolicy("skip_late", 0),
    )
    ds = decide_scan([trig(late), trig(T0)], {JOB: job}, {}, now_ms=T0, horizon_ms=T0 + 5000)
    assert [(r.status, r.skip_reason) for d in ds for r in d.runs] == [
        ("skipped", "misfire"),
        ("pending", None),
    ]


def test_a_retry_rearmed_earlier_in_the_scan_is_active_for_the_jobs_next_fire():
    job = every(600, overlap=OverlapPolicy.forbid)
    retry = trig(T0 - 10, kind="retry", attempt=2, run_scheduled_at_ms=T0 - 600_000)
    ds = decide_scan([trig(T0), retry], {JOB: job}, {}, now_ms=T0, horizon_ms=T0 + 5000)
    assert ds[0].rearm is not None
    assert [r.skip_reason for r in ds[1].runs] == ["overlap"]


def test_after_a_replace_the_scan_counts_only_the_new_runs():
    job = every(600, overlap=OverlapPolicy.replace)
    ds = decide_scan(
        [trig(T0), trig(T0 + 500)], {JOB: job}, {JOB: 3}, now_ms=T0, horizon_ms=T0 + 5000
    )
    assert [d.cancel_active for d in ds] == [True, True]
    assert [r.status for d in ds for r in d.runs] == ["pending", "pending"]


def test_held_back_uses_the_overlap_horizon_it_is_given():
    job = every(600, overlap=OverlapPolicy.forbid)
    t = trig(T0 + 1500)
    assert held_back(t, job, T0, T0 + 5000) is True
    assert held_back(t, job, T0, T0 + 5000, overlap_horizon_ms=2000) is False


def test_a_one_off_within_a_millisecond_fires_once():
    # the schedule's instant is 0.5 ms after the trigger's millisecond: its next fire
    # after the trigger time is the same millisecond, which must not fire again
    at = from_epoch_ms(T0) + timedelta(microseconds=500)
    job = JobView(JOB, 1, OneOffSchedule(at), paused=False, overlap=OverlapPolicy.forbid)
    d = decide_trigger(trig(T0), job, now_ms=T0, horizon_ms=T0 + 5000)
    assert [r.scheduled_at_ms for r in d.runs] == [T0] and d.next_fire_at_ms is None
    paused = JobView(JOB, 1, OneOffSchedule(at), paused=True)
    d = decide_trigger(trig(T0), paused, now_ms=T0, horizon_ms=T0 + 5000)
    assert d.runs == () and d.parked_fire_at_ms == T0


def test_the_general_rules_decide_whole_decisions():
    from kit.core.trigger import PlannedRun, TriggerDecision, decide_trigger_full

    job = every(60, priority="low")
    gone = trig(T0)
    assert decide_trigger_full(gone, None, T0, T0 + 5000) == TriggerDecision(
        gone, delete=True, dropped=DROP_JOB_GONE
    )
    stale = trig(T0, version=0)
    assert decide_trigger_full(stale, job, T0, T0 + 5000) == TriggerDecision(
        stale, delete=True, dropped=DROP_STALE_VERSION
    )
    manual = trig(T0 + 100, kind="manual")
    assert decide_trigger_full(manual, job, T0, T0 + 5000) == TriggerDecision(
        manual,
        delete=True,
        runs=(PlannedRun(run_id(JOB, T0 + 100), JOB, T0 + 100, "pending", "low", "manual"),),
    )
    on_time = trig(T0)
    paused = every(60, paused=True)
    d = decide_trigger_full(on_time, paused, T0, T0 + 5000)
    assert d == TriggerDecision(on_time, delete=True, parked_fire_at_ms=T0)
    # no active runs unless told; the overlap horizon is the one given
    forbid = every(60, overlap=OverlapPolicy.forbid)
    assert decide_trigger_full(on_time, forbid, T0, T0 + 5000).runs[0].fired
    later = trig(T0 + 1500)
    assert not decide_trigger_full(later, forbid, T0, T0 + 5000).delete
    assert decide_trigger_full(later, forbid, T0, T0 + 5000, overlap_horizon_ms=2000).delete
    with pytest.raises(ValueError, match=r"^max_fires must be at least 1$"):
        decide_trigger_full(on_time, job, T0, T0 + 5000, max_fires=0)


def test_an_occurrence_due_at_the_edit_itself_is_owed():
    from kit.core.trigger import EditedTrigger, trigger_after_edit

    hourly = CronSchedule("0 * * * *")
    # nominal T0 (a top of the hour), jitter 30 s: due at T0 + 30 s, edited at T0
    assert trigger_after_edit(T0 + 30_000, 30_000, hourly, 5_000, T0) == EditedTrigger(T0 + 5_000)
    assert trigger_after_edit(T0 + 30_000, 30_000, hourly, 5_000, T0 - 1) == EditedTrigger(None)


def test_the_shortcut_hands_every_limit_to_the_general_rules():
    # a paused job goes by the general rules: parked whatever the cap
    paused = every(1, paused=True)
    d = decide_trigger(trig(T0), paused, now_ms=T0, horizon_ms=T0 + 5000, max_fires=2)
    assert d.runs == () and d.parked_fire_at_ms == T0
    forbid = every(600, overlap=OverlapPolicy.forbid)
    later = trig(T0 + 1500)
    assert not decide_trigger(later, forbid, now_ms=T0, horizon_ms=T0 + 5000).delete
    wide = decide_trigger(later, forbid, now_ms=T0, horizon_ms=T0 + 5000, overlap_horizon_ms=2000)
    assert [r.scheduled_at_ms for r in wide.runs] == [T0 + 1500]


def test_a_one_off_within_a_millisecond_fires_once_on_the_shortcut_too():
    at = from_epoch_ms(T0) + timedelta(microseconds=500)
    job = JobView(JOB, 1, OneOffSchedule(at))
    d = decide_trigger(trig(T0), job, now_ms=T0, horizon_ms=T0 + 5000)
    assert [r.scheduled_at_ms for r in d.runs] == [T0] and d.next_fire_at_ms is None


def test_skipped_fires_are_whole_runs_of_the_schedule():
    from kit.core.trigger import PlannedRun

    def skipped(at: int, reason: str) -> PlannedRun:
        return PlannedRun(run_id(JOB, at), JOB, at, "skipped", "normal", "schedule", reason)

    # run_once after an outage: the older late fires are skipped, the latest fires
    late = T0 - 180_000
    job = every(60, misfire=MisfirePolicy("run_once"))
    d = decide_trigger(trig(late), job, now_ms=T0, horizon_ms=T0)
    assert d.runs[:2] == (skipped(late, "misfire"), skipped(late + 60_000, "misfire"))
    assert [(r.scheduled_at_ms, r.fired) for r in d.runs[2:]] == [(T0 - 60_000, True), (T0, True)]
    # forbid: the trigger's own first fire makes its job busy for its next fires
    forbid = every(1, overlap=OverlapPolicy.forbid)
    d = decide_trigger(trig(T0), forbid, now_ms=T0, horizon_ms=T0 + 5000)
    assert (
        d.runs
        == (
            d.runs[0],
            skipped(T0 + 1000, "overlap"),
        )
        and d.runs[0].fired
    )
    queue = every(1, overlap=OverlapPolicy.queue)
    d = decide_trigger(trig(T0), queue, now_ms=T0, horizon_ms=T0 + 5000)
    assert [(r.status, r.skip_reason) for r in d.runs] == [("pending", None), ("pending", QUEUED)]
    replace = every(1, overlap=OverlapPolicy.replace)
    d = decide_trigger(trig(T0), replace, now_ms=T0, horizon_ms=T0 + 5000, active_runs=2)
    assert d.cancel_active and [r.fired for r in d.runs] == [True, True]


def test_the_latest_instant_a_run_id_holds_is_allowed():
    from kit.core.ids import MAX_RUN_MS, scheduled_ms_of

    assert scheduled_ms_of(run_id(JOB, MAX_RUN_MS)) == MAX_RUN_MS
    with pytest.raises(ValueError, match=r"within 0\.\.281474976710655 epoch ms"):
        run_id(JOB, MAX_RUN_MS + 1)


def test_every_fire_after_an_overlap_skip_is_judged_too():
    forbid = every(1, overlap=OverlapPolicy.forbid)
    d = decide_trigger(trig(T0), forbid, now_ms=T0, horizon_ms=T0 + 5000, overlap_horizon_ms=2000)
    assert [(r.scheduled_at_ms, r.skip_reason) for r in d.runs] == [
        (T0, None),
        (T0 + 1000, "overlap"),
        (T0 + 2000, "overlap"),
    ]
    assert d.next_fire_at_ms == T0 + 3000

"""What a scan does with one due trigger: which runs to insert (fired or skipped, and
why), whether to re-arm a retry, and where the trigger goes next.

Pure: the scheduler node reads the trigger rows and their jobs, calls `decide_scan`
with the scan's `now_ms`, and writes what it returns in one fenced transaction. The
model can call the same function.

Rules:
- A trigger whose job is gone, or whose `job_version` is not the job's current
  version, is deleted and never fires (an edit replaced it). A retry trigger is the
  exception to the version rule: it is owed to a run that already fired, so it re-arms
  under the new version; a deleted or paused job cancels it with the reason.
- A fire time earlier than `now_ms - misfire_grace_ms` is *late*: it goes through the
  job's misfire policy. The grace is the kit's own failover time
  (kit.core.defaults.misfire_grace_ms: a dead node's partition moves and is scanned),
  so losing a node never turns an on-time fire into a missed one; a fire later than
  that was missed by an outage.
- A paused job's schedule trigger waits for its resume: when it comes due the scan
  parks it (out of every scan's reach, holding the fire it owed) and writes no run, so
  a paused job costs nothing per fire. On resume, `trigger_after_resume` puts it back
  where the misfire policy wants the owed fires taken up; the owed fires it passes over
  are written nowhere (explain derives them, skipped 'paused', from the audit log's
  pause and resume: kit.core.owed).
- Overlap (forbid/queue/replace) is judged against the job's runs that are pending,
  dispatched or running when the scan looks. Because the scan looks ahead, a job with
  such a policy is only fired within `OVERLAP_HORIZON_MS` of its fire time, so the
  judgement is at most about a second early, not a whole scan-ahead window. The store
  leaves such triggers out of the scan's read until then (`held_back`, mirrored in
  SQL), so they cannot fill the scan's batch limit with rows it would not take.
- Expansion is bounded: at most `max_fires` fire times per trigger per scan. After a
  long outage the rest is worked on the next scans; `run_once` only fires when the
  last missed time is in the chunk, so chunking never fires more than once.

`decide_trigger` takes a shortcut for the common case (a schedule trigger of the
current version, on time, job not paused, overlap allowed: every fire time in the
window fires); `decide_trigger_full` applies the general rules, and a property test
holds the two equal. A top-of-hour burst is almost all the common case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from operator import attrgetter

from kit.core.defaults import MISFIRE_GRACE_MS
from kit.core.fire_table import FireTable
from kit.core.ids import run_id as make_run_id
from kit.core.policies import (
    MisfireKind,
    MisfirePolicy,
    OverlapAction,
    OverlapPolicy,
    decide_overlap,
    plan_misfire,
)
from kit.core.schedule import Schedule, next_fire
from kit.core.timeutil import from_epoch_ms, to_epoch_ms


class TriggerKind(StrEnum):
    """What made a run (`runs.trigger_kind`). A trigger row (`triggers.kind`) is one of
    TRIGGER_ROW_KINDS: a backfill inserts its runs directly, no trigger is due for it."""

    schedule = "schedule"  # its job's schedule came due
    retry = "retry"  # a failed attempt's retry came due
    manual = "manual"  # a user's run-now
    backfill = "backfill"  # a user's backfill of past fire times


TRIGGER_ROW_KINDS = (TriggerKind.schedule, TriggerKind.retry, TriggerKind.manual)

OVERLAP_HORIZON_MS = 1000
MAX_FIRES_PER_TRIGGER = 500
# How many triggers decide_scan decides between two calls of its `progress` callback:
# ~10 ms of work (croniter costs ~100-250 us a fire), small next to any idle budget,
# while the caller's check of its clock costs nothing next to it.
PROGRESS_EVERY = 32


class SkipReason(StrEnum):
    """`runs.skip_reason`: why a run was recorded as skipped, or (`queued`) why a pending
    run is held back. Every statement that tests the marker is built from these."""

    paused = "paused"  # the job was paused
    overlap = "overlap"  # overlap 'forbid': a run of the job was active
    misfire = "misfire"  # the misfire policy skipped a late fire
    edited = "edited"  # an edit removed an occurrence that was due but not yet fired
    # A queued run (overlap policy 'queue'): status 'pending', dispatched_at NULL and this
    # marker, so the reaper leaves it alone; when a run of the job ends, the oldest queued
    # run loses the marker and is published (kit.core.policies.queued_to_release).
    queued = "queued"


SKIP_PAUSED = SkipReason.paused
SKIP_OVERLAP = SkipReason.overlap
SKIP_MISFIRE = SkipReason.misfire
SKIP_EDITED = SkipReason.edited
QUEUED = SkipReason.queued

DROP_JOB_GONE = "job deleted"
DROP_STALE_VERSION = "stale job version"
DROP_MALFORMED = "retry trigger names no run"


@dataclass(frozen=True)
class DueTrigger:
    partition_id: int
    fire_at_ms: int
    job_id: str
    job_version: int
    kind: str = TriggerKind.schedule  # one of TRIGGER_ROW_KINDS
    attempt: int = 1
    run_scheduled_at_ms: int | None = None  # retry: the scheduled time of its run


@dataclass(frozen=True)
class JobView:
    """What the decision needs to know about a job (parsed from its row)."""

    job_id: str
    version: int
    schedule: Schedule
    priority: str = "normal"
    jitter_offset_ms: int = 0  # kit.core.jitter.jitter_offset_ms(job_id, jitter_s * 1000)
    paused: bool = False
    overlap: OverlapPolicy = OverlapPolicy.allow
    misfire: MisfirePolicy = field(default_factory=MisfirePolicy)


@dataclass(frozen=True)
class PlannedRun:
    """A run row to insert. status 'pending' (fired, or queued) or 'skipped'."""

    run_id: str
    job_id: str
    scheduled_at_ms: int
    status: str
    priority: str
    trigger_kind: str
    skip_reason: str | None = None

    @property
    def fired(self) -> bool:
        return self.status == "pending" and self.skip_reason is None


@dataclass(frozen=True)
class Rearm:
    """A retry trigger came due: run `run_id` goes retry_scheduled -> pending at `attempt`."""

    run_id: str
    job_id: str
    attempt: int
    scheduled_at_ms: int  # the run's own scheduled time
    due_ms: int  # when to publish it (the retry time)
    priority: str


@dataclass(frozen=True)
class TriggerDecision:
    trigger: DueTrigger
    delete: bool  # False: not due for this job yet, leave the trigger as it is
    runs: tuple[PlannedRun, ...] = ()
    next_fire_at_ms: int | None = None  # the schedule trigger to insert in its place
    rearm: Rearm | None = None
    cancel_run_id: str | None = None  # a retry that will not happen (job paused/edited/gone)
    cancel_active: bool = False  # overlap 'replace': cancel the job's active runs first
    dropped: str | None = None  # why the trigger was deleted without any run
    # a paused job's trigger: parked, holding this fire (the one it owes) until a resume
    parked_fire_at_ms: int | None = None


def overlap_limit_ms(
    now_ms: int, horizon_ms: int, overlap_horizon_ms: int = OVERLAP_HORIZON_MS
) -> int:
    """The latest fire time a scan at `now_ms` takes for a job that limits overlap
    (forbid, queue, replace) and is not paused: overlap is judged on the runs active
    now, so it is judged at most `overlap_horizon_ms` early."""
    return min(horizon_ms, now_ms + overlap_horizon_ms)


def held_back(
    trigger: DueTrigger,
    job: JobView | None,
    now_ms: int,
    horizon_ms: int,
    overlap_horizon_ms: int = OVERLAP_HORIZON_MS,
) -> bool:
    """Whether a scan at `now_ms` leaves this trigger (fire_at <= horizon_ms) as it is,
    to be judged by a later scan: a schedule trigger of the job's current version, the
    job limiting overlap and not paused, due after `overlap_limit_ms`. Every other due
    trigger is taken (fired, skipped or dropped). The store's due query leaves these out
    (kit.store.scheduling._DUE mirrors this), so the scan's batch limit counts only
    what the scan can take; a property test holds this equal to `decide_trigger`."""
    return (
        job is not None
        and trigger.kind == TriggerKind.schedule
        and trigger.job_version == job.version
        and job.overlap is not OverlapPolicy.allow
        and not job.paused
        and trigger.fire_at_ms > overlap_limit_ms(now_ms, horizon_ms, overlap_horizon_ms)
    )


def next_fire_ms(job: JobView, fire_at_ms: int, fires: FireTable | None = None) -> int | None:
    """The trigger time after `fire_at_ms`, both including the job's jitter offset.
    `fires`: a table that remembers next fires (the same answer, computed once per
    schedule and window)."""
    if fires is not None:
        nxt_ms = fires.next_ms(job.schedule, fire_at_ms - job.jitter_offset_ms)
        return None if nxt_ms is None else nxt_ms + job.jitter_offset_ms
    nominal = from_epoch_ms(fire_at_ms - job.jitter_offset_ms)
    nxt: datetime | None = next_fire(job.schedule, nominal)
    return None if nxt is None else to_epoch_ms(nxt) + job.jitter_offset_ms


@dataclass(frozen=True)
class EditedTrigger:
    """Where a job's schedule trigger goes when an edit changes its schedule or jitter."""

    fire_at_ms: int | None  # the new trigger; None: keep computing from now (the caller)
    skipped_ms: int | None = None  # the old fire, owed but not owed any more: record it


def trigger_after_edit(
    old_fire_at_ms: int | None,
    old_jitter_offset_ms: int,
    new_schedule: Schedule,
    new_jitter_offset_ms: int,
    now_ms: int,
) -> EditedTrigger:
    """An occurrence whose nominal time has come but whose jittered fire has not is owed:
    an edit must neither drop it silently nor fire it twice. If the new schedule has the
    same occurrence, it fires at its new jitter (late, through the misfire policy, when
    that instant has passed); if not, the old fire is recorded as skipped ('edited') and
    the trigger starts again from now. Nothing owed: from now, as for a new job."""
    if old_fire_at_ms is None:
        return EditedTrigger(None)
    nominal = old_fire_at_ms - old_jitter_offset_ms
    if nominal > now_ms:
        return EditedTrigger(None)
    again = next_fire(new_schedule, from_epoch_ms(nominal - 1))
    if again is not None and to_epoch_ms(again) == nominal:
        return EditedTrigger(nominal + new_jitter_offset_ms)
    return EditedTrigger(None, skipped_ms=old_fire_at_ms)


def trigger_after_resume(
    fire_at_ms: int | None,
    job: JobView,
    now_ms: int,
    misfire_grace_ms: int = MISFIRE_GRACE_MS,
) -> int | None:
    """Where a resumed job's schedule trigger goes. It waited at `fire_at_ms`, the first
    fire the job owed (parked by a scan, or not reached by one yet); the fires owed since
    are missed fires, and the job's misfire policy says which of the late ones (before
    `now_ms - misfire_grace_ms`) still run: all of them (`run_all`: it stays), the
    latest one (`run_once`: it goes to that fire), those within the deadline
    (`skip_late`: it goes to the first of them, or to the first fire after when none
    is). Nothing late: it stays. The scan then fires from there as for any late trigger.
    None: no fire is left (a one-off past its chance). tests/property/
    test_resume_props.py holds this equal to plan_misfire over every owed fire."""
    if fire_at_ms is None:
        return None
    late_before = now_ms - misfire_grace_ms
    policy = job.misfire
    if fire_at_ms >= late_before or policy.kind == MisfireKind.run_all:
        return fire_at_ms
    if policy.kind == MisfireKind.skip_late:
        # within the deadline, or not late at all (a deadline shorter than the grace)
        first_kept = min(now_ms - policy.deadline_s * 1000, late_before)
        if fire_at_ms >= first_kept:
            return fire_at_ms
        return next_fire_ms(job, first_kept - 1)
    return _last_fire_before(job, fire_at_ms, late_before)


def _last_fire_before(job: JobView, start_ms: int, before_ms: int) -> int:
    """The latest of `start_ms` (< before_ms) and the job's fire times after it that is
    before `before_ms`; found by walking back a window at a time (an hour, then four
    times as far), not from `start_ms`, which may be a year of fires ago."""
    span = 3_600_000
    while True:
        lo = max(start_ms, before_ms - span)
        t: int | None = start_ms if lo == start_ms else next_fire_ms(job, lo - 1)
        last: int | None = None
        while t is not None and t < before_ms:
            last = t
            nxt = next_fire_ms(job, t)
            t = nxt if nxt is None or nxt > t else None
        if last is not None:
            return last
        span *= 4


def decide_trigger(
    trigger: DueTrigger,
    job: JobView | None,
    now_ms: int,
    horizon_ms: int,
    active_runs: int = 0,
    *,
    misfire_grace_ms: int = MISFIRE_GRACE_MS,
    overlap_horizon_ms: int = OVERLAP_HORIZON_MS,
    max_fires: int = MAX_FIRES_PER_TRIGGER,
    fires: FireTable | None = None,
) -> TriggerDecision:
    """Decide one trigger at `now_ms`; fire times up to `horizon_ms` are taken now.

    `active_runs`: the job's runs pending, dispatched or running (for overlap).
    `fires`: where next fire times are looked up (None: computed, kit.core.schedule).
    """
    if (
        job is not None
        and trigger.kind == "schedule"
        and trigger.job_version == job.version
        and job.overlap is OverlapPolicy.allow
        and not job.paused
        and trigger.fire_at_ms >= now_ms - misfire_grace_ms
        and active_runs >= 0
        and max_fires >= 1
    ):
        if fires is None:  # the form the fast-path property test counts calls of
            return _decide_on_time(trigger, job, horizon_ms, max_fires)
        return _decide_on_time(trigger, job, horizon_ms, max_fires, fires)
    return decide_trigger_full(
        trigger,
        job,
        now_ms,
        horizon_ms,
        active_runs,
        misfire_grace_ms=misfire_grace_ms,
        overlap_horizon_ms=overlap_horizon_ms,
        max_fires=max_fires,
        fires=fires,
    )


def _decide_on_time(
    trigger: DueTrigger,
    job: JobView,
    horizon_ms: int,
    max_fires: int,
    fires: FireTable | None = None,
) -> TriggerDecision:
    """On time, overlap allowed, not paused: no fire time is late (they only grow from
    an on-time first one) and overlap never skips, so every fire in the window fires."""
    if trigger.fire_at_ms > horizon_ms:
        return TriggerDecision(trigger, delete=False)
    t: int | None = trigger.fire_at_ms
    job_id, priority = job.job_id, job.priority
    runs: list[PlannedRun] = []
    while t is not None and t <= horizon_ms and len(runs) < max_fires:
        runs.append(PlannedRun(make_run_id(job_id, t), job_id, t, "pending", priority, "schedule"))
        nxt = next_fire_ms(job, t, fires)
        t = nxt if nxt is None or nxt > t else None  # a schedule must move forward
    return TriggerDecision(trigger, delete=True, runs=tuple(runs), next_fire_at_ms=t)


def decide_trigger_full(
    trigger: DueTrigger,
    job: JobView | None,
    now_ms: int,
    horizon_ms: int,
    active_runs: int = 0,
    *,
    misfire_grace_ms: int = MISFIRE_GRACE_MS,
    overlap_horizon_ms: int = OVERLAP_HORIZON_MS,
    max_fires: int = MAX_FIRES_PER_TRIGGER,
    fires: FireTable | None = None,
) -> TriggerDecision:
    """`decide_trigger` by the general rules, without the common-case shortcut."""
    if max_fires < 1:
        raise ValueError("max_fires must be at least 1")
    if trigger.kind == "retry":
        return _decide_retry(trigger, job)
    if job is None:
        return TriggerDecision(trigger, delete=True, dropped=DROP_JOB_GONE)
    if trigger.job_version != job.version:
        return TriggerDecision(trigger, delete=True, dropped=DROP_STALE_VERSION)
    if trigger.kind == "manual":
        run = _run(job, trigger.fire_at_ms, "pending", "manual")
        return TriggerDecision(trigger, delete=True, runs=(run,))

    limit_ms = horizon_ms
    if job.overlap is not OverlapPolicy.allow and not job.paused:
        limit_ms = overlap_limit_ms(now_ms, horizon_ms, overlap_horizon_ms)
    if trigger.fire_at_ms > limit_ms:
        return TriggerDecision(trigger, delete=False)
    if job.paused:
        return TriggerDecision(trigger, delete=True, parked_fire_at_ms=trigger.fire_at_ms)

    times: list[int] = []
    t: int | None = trigger.fire_at_ms
    while t is not None and t <= limit_ms and len(times) < max_fires:
        times.append(t)
        nxt = next_fire_ms(job, t, fires)
        t = nxt if nxt is None or nxt > t else None  # a schedule must move forward
    next_at = t

    late_before = now_ms - misfire_grace_ms
    late = [f for f in times if f < late_before]
    misfire_skipped: set[int] = set()
    if late:
        more_late = next_at is not None and next_at < late_before
        candidates = late + ([next_at] if more_late and next_at is not None else [])
        plan = plan_misfire(candidates, now_ms, job.misfire)
        misfire_skipped = set(plan.skipped_ms)

    runs_out: list[PlannedRun] = []
    cancel_active = False
    active = active_runs
    for f in times:
        if f in misfire_skipped:
            runs_out.append(_run(job, f, "skipped", "schedule", SKIP_MISFIRE))
            continue
        action = decide_overlap(job.overlap, active)
        if action is OverlapAction.skip:
            runs_out.append(_run(job, f, "skipped", "schedule", SKIP_OVERLAP))
            continue
        if action is OverlapAction.fire_and_cancel_running:
            cancel_active = True
            active = 0
        reason = QUEUED if action is OverlapAction.queue else None
        runs_out.append(_run(job, f, "pending", "schedule", reason))
        active += 1
    return TriggerDecision(
        trigger,
        delete=True,
        runs=tuple(runs_out),
        next_fire_at_ms=next_at,
        cancel_active=cancel_active,
    )


def _run(job: JobView, at_ms: int, status: str, kind: str, reason: str | None = None) -> PlannedRun:
    return PlannedRun(
        run_id=make_run_id(job.job_id, at_ms),
        job_id=job.job_id,
        scheduled_at_ms=at_ms,
        status=status,
        priority=job.priority,
        trigger_kind=kind,
        skip_reason=reason,
    )


def _decide_retry(trigger: DueTrigger, job: JobView | None) -> TriggerDecision:
    if trigger.run_scheduled_at_ms is None:
        return TriggerDecision(trigger, delete=True, dropped=DROP_MALFORMED)
    rid = make_run_id(trigger.job_id, trigger.run_scheduled_at_ms)
    # A retry is owed to a run that already fired: an edit does not void it (the worker
    # runs the job's current task), only a deleted or paused job does, and says why.
    why = None
    if job is None:
        why = DROP_JOB_GONE
    elif job.paused:
        why = SKIP_PAUSED
    if why is not None or job is None:
        return TriggerDecision(trigger, delete=True, cancel_run_id=rid, dropped=why)
    rearm = Rearm(
        run_id=rid,
        job_id=trigger.job_id,
        attempt=trigger.attempt,
        scheduled_at_ms=trigger.run_scheduled_at_ms,
        due_ms=trigger.fire_at_ms,
        priority=job.priority,
    )
    return TriggerDecision(trigger, delete=True, rearm=rearm)


def decide_scan(
    due: Iterable[DueTrigger],
    jobs: Mapping[str, JobView],
    active_runs: Mapping[str, int],
    now_ms: int,
    horizon_ms: int,
    progress: Callable[[], None] | None = None,
    fires: FireTable | None = None,
    **limits: int,
) -> list[TriggerDecision]:
    """Decide a scan's triggers in fire order; a job's runs fired earlier in the scan
    count as active for its later triggers. `progress` is called every
    PROGRESS_EVERY triggers: the scan's driver keeps its transaction from looking idle
    to the server while this runs (kit.scheduler.scan.IdleGuard)."""
    active = dict(active_runs)
    out: list[TriggerDecision] = []
    for i, trig in enumerate(sorted(due, key=_FIRE_ORDER)):
        if progress is not None and i % PROGRESS_EVERY == 0:
            progress()
        job = jobs.get(trig.job_id)
        d = decide_trigger(
            trig, job, now_ms, horizon_ms, active.get(trig.job_id, 0), fires=fires, **limits
        )
        out.append(d)
        if job is not None and job.overlap is OverlapPolicy.allow:
            continue  # its later triggers ignore the count: no need to keep it
        if d.cancel_active:
            active[trig.job_id] = 0
        active[trig.job_id] = active.get(trig.job_id, 0) + sum(
            1 for r in d.runs if r.status == "pending"
        )
        if d.rearm is not None:
            active[trig.job_id] = active.get(trig.job_id, 0) + 1
    return out


_FIRE_ORDER = attrgetter("fire_at_ms", "job_id", "kind")


def fired_runs(decisions: Sequence[TriggerDecision]) -> list[PlannedRun]:
    """The runs to hold for dispatch (pending and not queued)."""
    return [r for d in decisions for r in d.runs if r.fired]

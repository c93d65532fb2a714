"""A scan's due triggers decided as one batch, with `kit.core.trigger.decide_scan`'s
answer for every one of them, at a cost per trigger of a few dictionary lookups.

Almost every trigger of a scan is the common case: a schedule trigger of its job's
current version, on time, the job not paused, and either allowing overlap or limiting
it with no run active (a top-of-hour burst is nothing else). Such a trigger fires at
each of its fire times within the window (`_decide_on_time`), which needs only the next
fire time of its schedule; `decide_batch` decides those column by column, and looks
each next fire up once per distinct schedule and instant (`FireTable`; the thousands of
jobs of one expression due at one second share one answer). Every other trigger (late,
paused, retry, manual, stale, a job gone, a job that limits overlap with a run active or
with two triggers in the batch, two fires in its overlap window) goes one by one through
`decide_scan`. A job that limits overlap counts its runs across its triggers of a scan,
so all of such a job's triggers take the same way.

tests/property/test_trigger_batch_props.py holds `decide_batch` equal to `decide_scan`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kit.core.defaults import MISFIRE_GRACE_MS
from kit.core.fire_table import FireTable
from kit.core.ids import run_id as make_run_id
from kit.core.jitter import jitter_offset_ms
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.schedule import Schedule
from kit.core.trigger import (
    MAX_FIRES_PER_TRIGGER,
    OVERLAP_HORIZON_MS,
    DueTrigger,
    JobView,
    PlannedRun,
    TriggerDecision,
    TriggerKind,
    decide_scan,
    overlap_limit_ms,
)

_SCHEDULE = TriggerKind.schedule.value
_ALLOW = OverlapPolicy.allow
_MISSING = object()


@dataclass(frozen=True)
class JobShape:
    """A job's settings that a scan decides with, apart from its id and version. Many
    jobs share one (the store parses each distinct one once, kit.scheduler.scan)."""

    schedule: Schedule
    priority: str = "normal"
    jitter_s: int = 0
    paused: bool = False
    overlap: OverlapPolicy = OverlapPolicy.allow
    misfire: MisfirePolicy = field(default_factory=MisfirePolicy)

    def jitter_offset_ms(self, job_id: str) -> int:
        return jitter_offset_ms(job_id, self.jitter_s * 1000) if self.jitter_s else 0

    def view(self, job_id: str, version: int) -> JobView:
        return JobView(
            job_id=job_id,
            version=version,
            schedule=self.schedule,
            priority=self.priority,
            jitter_offset_ms=self.jitter_offset_ms(job_id),
            paused=self.paused,
            overlap=self.overlap,
            misfire=self.misfire,
        )


@dataclass
class DueBatch:
    """A scan's due triggers, column by column (the store appends a row's values; no
    object per trigger). `version` and `shape` are its job's (None: the job is gone);
    `active` its job's runs busy when the scan read it (kit.core.leases.BUSY), counted
    for a schedule trigger of a job that limits overlap, not paused, of its version; 0
    otherwise."""

    partition_id: list[int] = field(default_factory=list)
    fire_at_ms: list[int] = field(default_factory=list)
    job_id: list[str] = field(default_factory=list)
    job_version: list[int] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    attempt: list[int] = field(default_factory=list)
    run_scheduled_at_ms: list[int | None] = field(default_factory=list)
    version: list[int | None] = field(default_factory=list)
    shape: list[JobShape | None] = field(default_factory=list)
    active: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.fire_at_ms)

    def trigger(self, i: int) -> DueTrigger:
        return DueTrigger(
            self.partition_id[i],
            self.fire_at_ms[i],
            self.job_id[i],
            self.job_version[i],
            self.kind[i],
            self.attempt[i],
            self.run_scheduled_at_ms[i],
        )


@dataclass
class BatchPlan:
    """`decide_batch`'s answer. The triggers decided as the common case (`on_time`, by
    index into the batch) are each taken: their runs fired ('pending', 'schedule', the
    job's tier), their next fire time (None: the trigger goes), column by column; the
    rest are decide_scan's decisions, in its order."""

    on_time: list[int] = field(default_factory=list)
    next_fire_at_ms: list[int | None] = field(default_factory=list)  # one per on_time
    run_trigger: list[int] = field(default_factory=list)  # per fired run: its trigger
    run_ids: list[str] = field(default_factory=list)
    run_at_ms: list[int] = field(default_factory=list)
    general: list[tuple[int, TriggerDecision]] = field(default_factory=list)

    def decisions(self, batch: DueBatch) -> dict[int, TriggerDecision]:
        """Every trigger's decision by index, as decide_scan states it (tests; the
        store's way back when a batch write meets a conflict)."""
        out = dict(self.general)
        runs: dict[int, list[PlannedRun]] = {i: [] for i in self.on_time}
        for i, rid, at in zip(self.run_trigger, self.run_ids, self.run_at_ms, strict=True):
            shape = batch.shape[i]
            assert shape is not None
            runs[i].append(
                PlannedRun(rid, batch.job_id[i], at, "pending", shape.priority, _SCHEDULE)
            )
        for i, nxt in zip(self.on_time, self.next_fire_at_ms, strict=True):
            out[i] = TriggerDecision(
                batch.trigger(i), delete=True, runs=tuple(runs[i]), next_fire_at_ms=nxt
            )
        return out


def decide_batch(
    batch: DueBatch,
    now_ms: int,
    horizon_ms: int,
    fires: FireTable,
    progress: Callable[[], None] | None = None,
    *,
    misfire_grace_ms: int = MISFIRE_GRACE_MS,
    overlap_horizon_ms: int = OVERLAP_HORIZON_MS,
    max_fires: int = MAX_FIRES_PER_TRIGGER,
) -> BatchPlan:
    """Decide every trigger of `batch` at `now_ms` (fire times up to `horizon_ms`), as
    `decide_scan` would; `progress` is called every PROGRESS_EVERY triggers decided one
    by one and every 1,024 decided as the common case."""
    n = len(batch)
    shapes, job_ids, fire_at = batch.shape, batch.job_id, batch.fire_at_ms
    kinds, trigger_versions, versions = batch.kind, batch.job_version, batch.version
    late_before = now_ms - misfire_grace_ms
    overlap_limit = overlap_limit_ms(now_ms, horizon_ms, overlap_horizon_ms)
    # A job that limits overlap counts its runs across its triggers of the scan: one with
    # two triggers in the batch is decided whole by decide_scan.
    limited: dict[str, int] = {}
    for i in range(n):
        shape = shapes[i]
        if shape is not None and shape.overlap is not _ALLOW:
            limited[job_ids[i]] = limited.get(job_ids[i], 0) + 1
    plan = BatchPlan()
    on_time, next_at = plan.on_time, plan.next_fire_at_ms
    run_trigger, run_ids, run_at = plan.run_trigger, plan.run_ids, plan.run_at_ms
    general: list[int] = []
    # next nominal fire by schedule, then nominal instant; keyed by the schedule object's
    # id: the shapes (and so their schedules) outlive this call, and hashing a schedule
    # per trigger would cost more than the lookup
    memo: dict[int, dict[int, int | None]] = {}
    for i in range(n):
        if progress is not None and not i & 1023:
            progress()
        shape = shapes[i]
        t = fire_at[i]
        if (
            shape is None
            or shape.paused
            or kinds[i] != _SCHEDULE
            or trigger_versions[i] != versions[i]
            or t < late_before
            or max_fires < 1
        ):
            general.append(i)
            continue
        job = job_ids[i]
        one_only = shape.overlap is not _ALLOW
        if one_only and (batch.active[i] != 0 or limited[job] > 1):
            general.append(i)
            continue
        window = overlap_limit if one_only else horizon_ms
        if t > window:
            general.append(i)  # not taken yet: decide_scan leaves it
            continue
        schedule = shape.schedule
        nexts = memo.get(id(schedule))
        if nexts is None:
            nexts = memo[id(schedule)] = {}
        jitter = shape.jitter_offset_ms(job) if shape.jitter_s else 0
        times = [t]
        while True:
            nominal = t - jitter
            nxt_nominal = nexts.get(nominal, _MISSING)
            if nxt_nominal is _MISSING:
                nxt_nominal = nexts[nominal] = fires.next_ms(schedule, nominal)
            if nxt_nominal is None:
                nxt = None
            else:
                nxt = nxt_nominal + jitter  # type: ignore[operator]
                if nxt <= t:
                    nxt = None  # a schedule must move forward
            if nxt is None or nxt > window or len(times) >= max_fires:
                break
            times.append(nxt)
            t = nxt
        if one_only and len(times) > 1:
            general.append(i)  # its second fire is judged on the first: decide_scan
            continue
        on_time.append(i)
        next_at.append(nxt)
        for at in times:
            run_trigger.append(i)
            run_ids.append(make_run_id(job, at))
            run_at.append(at)
    if general:
        plan.general = _decide_rest(
            batch,
            general,
            now_ms,
            horizon_ms,
            fires,
            progress,
            misfire_grace_ms=misfire_grace_ms,
            overlap_horizon_ms=overlap_horizon_ms,
            max_fires=max_fires,
        )
    return plan


def _decide_rest(
    batch: DueBatch,
    rest: list[int],
    now_ms: int,
    horizon_ms: int,
    fires: FireTable,
    progress: Callable[[], None] | None,
    **limits: int,
) -> list[tuple[int, TriggerDecision]]:
    """decide_scan of the triggers `rest`, each decision with its trigger's index."""
    due: list[DueTrigger] = []
    index_of: dict[int, int] = {}  # id(trigger) -> its index in the batch
    views: dict[str, JobView] = {}
    active: dict[str, int] = {}
    for i in rest:
        trig = batch.trigger(i)
        due.append(trig)
        index_of[id(trig)] = i
        shape, version, job = batch.shape[i], batch.version[i], batch.job_id[i]
        if shape is None or version is None:
            continue
        if job not in views:
            views[job] = shape.view(job, version)
        if shape.overlap is not _ALLOW:
            active[job] = max(active.get(job, 0), batch.active[i])
    decisions = decide_scan(due, views, active, now_ms, horizon_ms, progress, fires, **limits)
    return [(index_of[id(d.trigger)], d) for d in decisions]

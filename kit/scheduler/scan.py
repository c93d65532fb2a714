"""One fenced scan of a node's partitions: lock own leases, read due triggers, decide
them with kit.core (kit.core.trigger_batch), write runs and advance triggers, all in one
transaction.

Only partitions whose lease row this transaction locked (owner, believed epoch,
unexpired) are processed; a takeover waits for the commit, so a node that lost a
partition commits nothing for it.

The rows move as columns: the due rows are transposed once (zip), each distinct job
shape (schedule, overlap, misfire, tier, jitter, paused: many jobs share one) is parsed
once per node, the next fire times are looked up once per schedule and instant
(kit.core.fire_table, kept by the node across scans), and each write is one statement
for the whole batch (the fired runs and the next triggers by COPY). Per fired run the
Python work left is its id, its queue message and its line of the COPY data.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from kit.core.defaults import MISFIRE_GRACE_MS, SCAN_BATCH_ROWS
from kit.core.dispatch import rescan_at_once, scan_window
from kit.core.fire_table import FireTable
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.schedule import Schedule, parse_schedule
from kit.core.timeutil import EPOCH, to_epoch_ms
from kit.core.trigger import PROGRESS_EVERY, TriggerDecision, overlap_limit_ms
from kit.core.trigger_batch import BatchPlan, DueBatch, JobShape, decide_batch
from kit.crash import crash_point
from kit.store import scheduling as sql
from kit.store.db import db_now
from kit.transport.publisher import EncodedRun, message_value

DEFAULT_BATCH = SCAN_BATCH_ROWS
# What IdleGuard sends: the cheapest statement, its only use to end an idle stretch.
_SELECT_1 = text("SELECT 1")


class IdleGuard:
    """Keeps a scan's transaction from looking idle to the server while Python works.

    The scheduler's sessions end a transaction idle for half a lease
    (kit.scheduler.node.scheduler_engine): that is how a node whose link died mid-scan
    lets go of the lease rows it holds FOR SHARE. But a scan's own Python work between
    two statements grows with its batch: reading 20,000 cron triggers of varied
    expressions and zones, then parsing their schedules and computing each next fire,
    left the transaction idle 5.1-8.6 s on 2 cores (benchmarks/scan_gap.py), past the
    5 s of the default lease, so the server killed every such scan, the node read the
    same rows the next second and failed again: nothing fired. So the work touches the
    server (`SELECT 1`, ~0.1 ms) once `budget_s` has passed since its last statement.

    Why not the alternatives: a longer timeout would hold other nodes' lease passes
    behind a dead node's locks for longer; deciding outside the transaction, or
    committing per chunk, would split the fenced read from the fenced write (or commit
    runs without the triggers they came from). A dead client sends nothing, so the
    server still ends its transaction after the timeout, as before."""

    def __init__(self, conn: Any, budget_s: float | None) -> None:
        self._conn = conn
        self._budget_s = budget_s
        self._last = time.monotonic()
        self.touches = 0

    def sent(self) -> None:
        """A statement just went to the server."""
        self._last = time.monotonic()

    def __call__(self) -> None:
        if self._budget_s is None:
            return
        if time.monotonic() - self._last >= self._budget_s:
            self._conn.execute(_SELECT_1)
            self.touches += 1
            self.sent()


class HeldRun:
    """A committed run to publish, its queue message encoded when it is made (while
    scanning, ahead of its second, so the publish only produces). It is its own
    message (kit.transport.publisher.Encoded: run id, tier, key, value): a burst holds
    tens of thousands, so one small object each, not three."""

    __slots__ = (
        "attempt",
        "due_ms",
        "epoch",
        "job_id",
        "key",
        "partition_id",
        "run_id",
        "scheduled_at_ms",
        "tier",
        "value",
    )

    def __init__(
        self,
        run_id: str,
        job_id: str,
        attempt: int,
        scheduled_at_ms: int,
        due_ms: int,
        tier: str,
        partition_id: int,
        epoch: int,
    ) -> None:
        self.run_id = run_id
        self.job_id = job_id
        self.attempt = attempt
        self.scheduled_at_ms = scheduled_at_ms
        self.due_ms = due_ms
        self.tier = tier
        self.partition_id = partition_id
        self.epoch = epoch
        self.key = job_id.encode()
        self.value = message_value(run_id, job_id, attempt, scheduled_at_ms, tier)

    @property
    def message(self) -> EncodedRun:
        return EncodedRun(self.run_id, self.tier, self.key, self.value)

    def __repr__(self) -> str:
        return f"HeldRun({self.run_id}, {self.job_id}, attempt {self.attempt}, due {self.due_ms})"


@dataclass
class ScanResult:
    now: datetime
    locked: set[int] = field(default_factory=set)
    refused: set[int] = field(default_factory=set)  # believed owned, not lockable
    held: list[HeldRun] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> runs
    dropped: int = 0
    parked: int = 0  # paused jobs' triggers set aside until their resume
    triggers: int = 0  # rows read
    taken: int = 0  # of those, triggers the scan deleted (fired, skipped or dropped)
    full: bool = False  # the batch limit was reached: more may be due

    @property
    def rescan(self) -> bool:
        """Scan again at once (kit.core.dispatch.rescan_at_once): full and took some."""
        return rescan_at_once(self.full, self.taken)


ShapeKey = tuple[str, str, str, str, int, bool]


class JobViews:
    """What a node remembers from scan to scan: each distinct job shape
    (kit.core.trigger_batch.JobShape), by the texts it is read from, parsed once
    (distinct schedule and misfire texts once each, the JSON decoded only when a text is
    new), and the next fire times of the schedules (`fires`). A schedule of an interval
    without an anchor counts from its job's creation, so its shapes are kept per
    creation instant. Bounded: each cache starts again empty when full."""

    def __init__(self, limit: int = 200_000) -> None:
        self._shapes: dict[ShapeKey, JobShape] = {}
        self._anchored: dict[tuple[ShapeKey, int], JobShape] = {}
        self._unanchored: set[str] = set()  # interval texts without an anchor
        self._schedules: dict[str, Schedule] = {}
        self._misfires: dict[str, MisfirePolicy] = {}
        self._overlaps: dict[str, OverlapPolicy] = {}
        self._limit = limit
        self.fires = FireTable()

    def shape(self, key: ShapeKey, created_at_us: int) -> JobShape:
        """The shape of a job row's texts (schedule, overlap, misfire, priority,
        jitter_s, paused), parsed if new."""
        schedule_text = key[0]
        if schedule_text in self._unanchored:
            hit = self._anchored.get((key, created_at_us))
            if hit is None:
                hit = self._parse(key, created_at_us)
                if len(self._anchored) >= self._limit:
                    self._anchored.clear()
                self._anchored[(key, created_at_us)] = hit
            return hit
        hit = self._shapes.get(key)
        if hit is None:
            hit = self._parse(key, created_at_us)
            if schedule_text in self._unanchored:
                return self.shape(key, created_at_us)
            if len(self._shapes) >= self._limit:
                self._shapes.clear()
            self._shapes[key] = hit
        return hit

    def _parse(self, key: ShapeKey, created_at_us: int) -> JobShape:
        schedule_text, overlap, misfire_text, priority, jitter_s, paused = key
        schedule = self._schedules.get(schedule_text)
        if schedule is None:
            data = json.loads(schedule_text)
            schedule = parse_schedule(data, now=EPOCH + timedelta(microseconds=created_at_us))
            if "every_s" in data and "anchor" not in data:
                self._unanchored.add(schedule_text)
            else:
                if len(self._schedules) >= self._limit:
                    self._schedules.clear()
                self._schedules[schedule_text] = schedule
        misfire = self._misfires.get(misfire_text)
        if misfire is None:
            misfire = self._misfires[misfire_text] = MisfirePolicy.parse(json.loads(misfire_text))
        policy = self._overlaps.get(overlap)
        if policy is None:
            policy = self._overlaps[overlap] = OverlapPolicy.parse(overlap)
        return JobShape(schedule, priority, jitter_s, paused, policy, misfire)

    def shapes(
        self, columns: Sequence[Sequence[Any]], guard: Callable[[], None]
    ) -> list[JobShape | None]:
        """Each due row's job shape (None: the job is gone), from the due columns
        (kit.store.scheduling.DUE_COLUMNS): a lookup per row, a parse per new shape."""
        versions, created = columns[8], columns[16]
        keys = list(zip(columns[10], columns[11], columns[12], columns[13], columns[14],
                        columns[15], strict=True))  # fmt: skip
        get = self._shapes.get
        out: list[JobShape | None] = [get(k) for k in keys]
        for i, hit in enumerate(out):
            if hit is None and versions[i] is not None:
                guard()  # a new shape parses its texts (a cron validates with croniter)
                out[i] = self.shape(keys[i], created[i])
        return out


def scan_partitions(
    engine: Engine,
    node_id: str,
    epochs: Mapping[int, int],
    *,
    scan_ahead_ms: int,
    now: datetime | None = None,
    batch: int = DEFAULT_BATCH,
    jobs: JobViews | None = None,
    misfire_grace_ms: int = MISFIRE_GRACE_MS,
    idle_budget_ms: int | None = None,
) -> ScanResult:
    """Scan `epochs` (partition -> the epoch this node believes it holds) at `now`
    (None: the database's clock); fires older than `misfire_grace_ms` were missed.
    `idle_budget_ms`: the longest the transaction may go without a statement while
    the scan computes (IdleGuard); None: as long as it takes."""
    jobs = jobs or JobViews()
    with engine.begin() as conn:
        guard = IdleGuard(conn, None if idle_budget_ms is None else idle_budget_ms / 1000)
        at = db_now(conn, now)
        result = ScanResult(now=at)
        locked = sql.partitions_lock_own(conn, node_id, epochs)
        result.locked = locked
        result.refused = set(epochs) - locked
        if not locked:
            return result
        now_ms = to_epoch_ms(at)
        _lo, hi_ms = scan_window(now_ms, scan_ahead_ms)
        overlap_hi_ms = overlap_limit_ms(now_ms, hi_ms)
        rows = sql.triggers_due(conn, locked, hi_ms, batch, overlap_hi_ms=overlap_hi_ms)
        guard.sent()
        result.triggers = len(rows)
        result.full = len(rows) >= batch
        if not rows:
            return result
        columns = list(zip(*rows, strict=True))
        del rows
        due = DueBatch(
            partition_id=list(columns[1]),
            fire_at_ms=list(columns[2]),
            job_id=list(columns[3]),
            job_version=list(columns[4]),
            kind=list(columns[5]),
            attempt=list(columns[6]),
            run_scheduled_at_ms=list(columns[7]),
            version=list(columns[8]),
            shape=jobs.shapes(columns, guard),
            active=list(columns[17]),
        )
        guard()
        plan = decide_batch(
            due, now_ms, hi_ms, jobs.fires, guard, misfire_grace_ms=misfire_grace_ms
        )
        guard()
        _write(conn, due, columns[0], columns[9], plan, epochs, result, guard)
    return result


def _write(
    conn: Any,
    due: DueBatch,
    ctids: Sequence[str],
    tenants: Sequence[str],
    plan: BatchPlan,
    epochs: Mapping[int, int],
    result: ScanResult,
    guard: IdleGuard,
) -> None:
    """Carry out a batch's plan: the common case's runs and trigger moves as one
    statement each, under a savepoint (a run or a trigger slot that exists already
    raises; then the whole plan goes by the general statements), then the rest."""
    general = plan.general
    sql.runs_cancel_active(conn, {d.trigger.job_id for _, d in general if d.cancel_active})
    if plan.on_time:
        try:
            with conn.begin_nested():
                _write_on_time(conn, due, ctids, tenants, plan, epochs, result, guard)
        except (IntegrityError, psycopg.errors.IntegrityError):
            result.held.clear()
            result.taken = 0
            general = sorted(plan.decisions(due).items())
    _write_general(conn, due, ctids, tenants, general, epochs, result, guard)


def _write_on_time(
    conn: Any,
    due: DueBatch,
    ctids: Sequence[str],
    tenants: Sequence[str],
    plan: BatchPlan,
    epochs: Mapping[int, int],
    result: ScanResult,
    guard: IdleGuard,
) -> None:
    job_ids, versions, shapes, parts = due.job_id, due.version, due.shape, due.partition_id
    which = plan.run_trigger
    fired = sql.FiredRows(
        run_ids=plan.run_ids,
        job_ids=[job_ids[i] for i in which],
        tenants=[tenants[i] for i in which],
        versions=[versions[i] for i in which],  # type: ignore[misc]
        priorities=[shapes[i].priority for i in which],  # type: ignore[union-attr]
        scheduled_at_ms=plan.run_at_ms,
    )
    allow = OverlapPolicy.allow
    nexts = plan.next_fire_at_ms
    moved = [
        (parts[i], n, job_ids[i], versions[i], shapes[i].overlap is not allow)  # type: ignore[union-attr]
        for i, n in zip(plan.on_time, nexts, strict=True)
        if n is not None
    ]
    sql.triggers_advance(conn, [ctids[i] for i in plan.on_time], moved)  # type: ignore[arg-type]
    crash_point("scan.on_time_triggers_advanced", plan.on_time)
    held = result.held

    def hold() -> None:  # each run's queue message, made while the database inserts the runs
        for k, (rid, job, tier, at) in enumerate(
            zip(fired.run_ids, fired.job_ids, fired.priorities, fired.scheduled_at_ms, strict=True)
        ):
            p = parts[which[k]]
            held.append(HeldRun(rid, job, 1, at, at, tier, p, epochs[p]))

    sql.runs_insert_fired(conn, fired, meanwhile=hold)
    crash_point("scan.on_time_runs_written", fired.run_ids)
    guard.sent()
    result.taken += len(plan.on_time)


def _write_general(
    conn: Any,
    due: DueBatch,
    ctids: Sequence[str],
    tenants: Sequence[str],
    decisions: Sequence[tuple[int, TriggerDecision]],
    epochs: Mapping[int, int],
    result: ScanResult,
    guard: IdleGuard,
) -> None:
    """Write decisions of kit.core.trigger one by one, as decide_scan made them."""
    if not decisions:
        return
    rows = sql.RunRows()
    partition_of_run: dict[str, int] = {}
    rearms: dict[str, int] = {}
    rearm_of: dict[str, Any] = {}
    cancels: dict[str, str] = {}
    deletes: list[str] = []
    parks: dict[str, str] = {}  # job -> its trigger to park (one each)
    nexts: list[tuple[int, int, str, int, bool]] = []
    for n, (i, d) in enumerate(decisions):
        if n % PROGRESS_EVERY == 0:
            guard()
        trig = d.trigger
        if not d.delete:
            continue
        result.taken += 1
        if d.parked_fire_at_ms is not None and trig.job_id not in parks:
            parks[trig.job_id] = ctids[i]
            continue
        deletes.append(ctids[i])
        if d.dropped is not None and d.cancel_run_id is None:
            result.dropped += 1
        if d.cancel_run_id is not None:
            cancels[d.cancel_run_id] = d.dropped or "cancelled"
        if d.rearm is not None:
            rearms[d.rearm.run_id] = d.rearm.attempt
            rearm_of[d.rearm.run_id] = (d.rearm, trig.partition_id)
        version = due.version[i]
        if d.runs:
            assert version is not None  # runs are only planned for a live job
            for r in d.runs:
                rows.run_ids.append(r.run_id)
                rows.job_ids.append(r.job_id)
                rows.tenants.append(tenants[i])
                rows.versions.append(version)
                rows.priorities.append(r.priority)
                rows.scheduled_at_ms.append(r.scheduled_at_ms)
                rows.statuses.append(r.status)
                rows.kinds.append(r.trigger_kind)
                rows.skip_reasons.append(r.skip_reason)
                partition_of_run[r.run_id] = trig.partition_id
        if d.next_fire_at_ms is not None and version is not None:
            shape = due.shape[i]
            limits = shape is not None and shape.overlap is not OverlapPolicy.allow
            nexts.append((trig.partition_id, d.next_fire_at_ms, trig.job_id, version, limits))
    inserted = sql.runs_insert(conn, rows)
    crash_point("scan.runs_written", inserted)
    rearmed = sql.runs_rearm(conn, rearms)
    crash_point("scan.rearmed", rearmed)
    sql.runs_cancel_retries(conn, cancels)
    sql.triggers_delete(conn, deletes)
    sql.triggers_park(conn, list(parks.values()))
    sql.triggers_insert(conn, nexts)
    crash_point("scan.triggers_advanced", deletes)
    result.parked += len(parks)
    held = result.held
    skipped = result.skipped
    guard.sent()
    for k, rid in enumerate(rows.run_ids):
        if k % PROGRESS_EVERY == 0:
            guard()  # encoding each held run's message, before the commit
        if rid not in inserted:
            continue
        reason = rows.skip_reasons[k]
        if rows.statuses[k] == "pending" and reason is None:
            p = partition_of_run[rid]
            ms = rows.scheduled_at_ms[k]
            held.append(HeldRun(rid, rows.job_ids[k], 1, ms, ms, rows.priorities[k], p, epochs[p]))
        else:
            reason = reason or "skipped"
            skipped[reason] = skipped.get(reason, 0) + 1
    for k, rid in enumerate(rearmed):
        if k % PROGRESS_EVERY == 0:
            guard()
        rearm, p = rearm_of[rid]
        held.append(
            HeldRun(
                rid,
                rearm.job_id,
                rearm.attempt,
                rearm.scheduled_at_ms,
                rearm.due_ms,
                rearm.priority,
                p,
                epochs[p],
            )
        )

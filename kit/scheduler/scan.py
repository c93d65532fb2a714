"""One fenced scan of a node's partitions: lock own leases, read due triggers, decide
with kit.core.trigger, write runs and advance triggers, all in one transaction.

Only partitions whose lease row this transaction locked (owner, believed epoch,
unexpired) are processed; a takeover waits for the commit, so a node that lost a
partition commits nothing for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from kit.core.defaults import MISFIRE_GRACE_MS, SCAN_BATCH_ROWS
from kit.core.dispatch import rescan_at_once, scan_window
from kit.core.jitter import jitter_offset_ms
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.schedule import Schedule, parse_schedule
from kit.core.timeutil import EPOCH, to_epoch_ms
from kit.core.trigger import (
    PROGRESS_EVERY,
    DueTrigger,
    JobView,
    TriggerDecision,
    decide_scan,
    overlap_limit_ms,
)
from kit.crash import crash_point
from kit.store import scheduling as sql
from kit.store.db import db_now
from kit.transport.message import RunMessage
from kit.transport.publisher import EncodedRun, encode

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


@dataclass(frozen=True)
class HeldRun:
    """A committed run to publish, its queue message encoded when it is made (while
    scanning, ahead of its second, so the publish at the second only produces)."""

    run_id: str
    job_id: str
    attempt: int
    scheduled_at_ms: int
    due_ms: int
    tier: str
    partition_id: int
    epoch: int
    message: EncodedRun = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", encode(RunMessage.of(self)))


@dataclass
class ScanResult:
    now: datetime
    locked: set[int] = field(default_factory=set)
    refused: set[int] = field(default_factory=set)  # believed owned, not lockable
    held: list[HeldRun] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> runs
    dropped: int = 0
    triggers: int = 0  # rows read
    taken: int = 0  # of those, triggers the scan deleted (fired, skipped or dropped)
    full: bool = False  # the batch limit was reached: more may be due

    @property
    def rescan(self) -> bool:
        """Scan again at once (kit.core.dispatch.rescan_at_once): full and took some."""
        return rescan_at_once(self.full, self.taken)


class JobViews:
    """Parsed jobs by (job_id, version): a schedule is parsed once per version, not
    once per scan; distinct schedule and misfire texts (many jobs share one) once, and
    the JSON is decoded only when a text is new."""

    def __init__(self, limit: int = 200_000) -> None:
        self._cache: dict[tuple[str, int], JobView] = {}
        self._schedules: dict[str, Schedule] = {}  # texts that do not depend on created_at
        self._anchored: dict[tuple[str, int], Schedule] = {}  # every_s without an anchor
        self._misfires: dict[str, MisfirePolicy] = {}
        self._overlaps: dict[str, OverlapPolicy] = {}
        self._limit = limit

    def _schedule(self, text: str, created_at_us: int) -> Schedule:
        hit = self._schedules.get(text)
        if hit is not None:
            return hit
        hit = self._anchored.get((text, created_at_us))
        if hit is not None:
            return hit
        data = json.loads(text)
        hit = parse_schedule(data, now=EPOCH + timedelta(microseconds=created_at_us))
        if "every_s" in data and "anchor" not in data:
            if len(self._anchored) >= self._limit:
                self._anchored.clear()
            self._anchored[(text, created_at_us)] = hit
        else:
            if len(self._schedules) >= self._limit:
                self._schedules.clear()
            self._schedules[text] = hit
        return hit

    def _misfire(self, text: str) -> MisfirePolicy:
        hit = self._misfires.get(text)
        if hit is None:
            hit = self._misfires[text] = MisfirePolicy.parse(json.loads(text))
        return hit

    def _overlap(self, text: str) -> OverlapPolicy:
        hit = self._overlaps.get(text)
        if hit is None:
            hit = self._overlaps[text] = OverlapPolicy.parse(text)
        return hit

    def view(self, row: tuple[Any, ...]) -> JobView | None:
        """The job of a due-trigger row (kit.store.scheduling.DUE_COLUMNS), or None
        when the job is gone."""
        (_c, _p, _f, job_id, _jv, _k, _a, _r, version, _t, schedule, overlap, misfire,
         priority, jitter_s, paused, created_at_us) = row  # fmt: skip
        if version is None:
            return None
        key = (job_id, version)
        hit = self._cache.get(key)
        if hit is not None and hit.paused == paused:
            return hit
        view = JobView(
            job_id=job_id,
            version=version,
            schedule=self._schedule(schedule, created_at_us),
            priority=priority,
            jitter_offset_ms=jitter_offset_ms(job_id, jitter_s * 1000) if jitter_s else 0,
            paused=paused,
            overlap=self._overlap(overlap),
            misfire=self._misfire(misfire),
        )
        if len(self._cache) >= self._limit:
            self._cache.clear()
        self._cache[key] = view
        return view


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
        views: dict[str, JobView] = {}
        tenants: dict[str, str] = {}
        due: list[DueTrigger] = []
        ctid_of: dict[int, str] = {}  # id(trigger) -> its row address
        view_of = jobs.view
        for row in rows:
            guard()  # every row: a job's first view parses its schedule (croniter), ~10 ms
            (ctid, part, fire_us, job_id, job_version, kind, attempt, rsa_us, version,
             tenant) = row[:10]  # fmt: skip
            trig = DueTrigger(
                part,
                fire_us // 1000,
                job_id,
                job_version,
                kind,
                attempt,
                None if rsa_us is None else rsa_us // 1000,
            )
            due.append(trig)
            ctid_of[id(trig)] = ctid
            if version is not None:
                view = view_of(row)
                if view is not None:
                    views[job_id] = view
                    tenants[job_id] = tenant
        overlap_jobs = {j for j, v in views.items() if v.overlap is not OverlapPolicy.allow}
        guard()
        active = sql.runs_active_counts(conn, overlap_jobs)
        guard.sent()
        decisions = decide_scan(
            due, views, active, now_ms, hi_ms, guard, misfire_grace_ms=misfire_grace_ms
        )
        guard()
        _write(conn, decisions, ctid_of, views, tenants, epochs, result, guard)
    return result


def _write(
    conn: Any,
    decisions: list[TriggerDecision],
    ctid_of: Mapping[int, str],
    views: Mapping[str, JobView],
    tenants: Mapping[str, str],
    epochs: Mapping[int, int],
    result: ScanResult,
    guard: IdleGuard,
) -> None:
    sql.runs_cancel_active(conn, {d.trigger.job_id for d in decisions if d.cancel_active})
    rows = sql.RunRows()
    partition_of_run: dict[str, int] = {}
    rearms: dict[str, int] = {}
    rearm_of: dict[str, Any] = {}
    cancels: dict[str, str] = {}
    deletes: list[str] = []
    nexts: list[tuple[int, int, str, int]] = []
    for n, d in enumerate(decisions):
        if n % PROGRESS_EVERY == 0:
            guard()
        trig = d.trigger
        if not d.delete:
            continue
        deletes.append(ctid_of[id(trig)])
        result.taken += 1
        if d.dropped is not None and d.cancel_run_id is None:
            result.dropped += 1
        if d.cancel_run_id is not None:
            cancels[d.cancel_run_id] = d.dropped or "cancelled"
        if d.rearm is not None:
            rearms[d.rearm.run_id] = d.rearm.attempt
            rearm_of[d.rearm.run_id] = (d.rearm, trig.partition_id)
        job = views.get(trig.job_id)
        if d.runs:
            assert job is not None  # runs are only planned for a live job
            tenant = tenants[trig.job_id]
            for r in d.runs:
                rows.run_ids.append(r.run_id)
                rows.job_ids.append(r.job_id)
                rows.tenants.append(tenant)
                rows.versions.append(job.version)
                rows.priorities.append(r.priority)
                rows.scheduled_at_ms.append(r.scheduled_at_ms)
                rows.statuses.append(r.status)
                rows.kinds.append(r.trigger_kind)
                rows.skip_reasons.append(r.skip_reason)
                partition_of_run[r.run_id] = trig.partition_id
        if d.next_fire_at_ms is not None and job is not None:
            nexts.append((trig.partition_id, d.next_fire_at_ms, trig.job_id, job.version))
    inserted = sql.runs_insert(conn, rows)
    crash_point("scan.runs_written", inserted)
    rearmed = sql.runs_rearm(conn, rearms)
    crash_point("scan.rearmed", rearmed)
    sql.runs_cancel_retries(conn, cancels)
    sql.triggers_delete(conn, deletes)
    sql.triggers_insert(conn, nexts)
    crash_point("scan.triggers_advanced", deletes)
    held = result.held
    skipped = result.skipped
    guard.sent()
    for i, rid in enumerate(rows.run_ids):
        if i % PROGRESS_EVERY == 0:
            guard()  # encoding each held run's message, before the commit
        if rid not in inserted:
            continue
        reason = rows.skip_reasons[i]
        if rows.statuses[i] == "pending" and reason is None:
            p = partition_of_run[rid]
            ms = rows.scheduled_at_ms[i]
            held.append(HeldRun(rid, rows.job_ids[i], 1, ms, ms, rows.priorities[i], p, epochs[p]))
        else:
            reason = reason or "skipped"
            skipped[reason] = skipped.get(reason, 0) + 1
    for n, rid in enumerate(rearmed):
        if n % PROGRESS_EVERY == 0:
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

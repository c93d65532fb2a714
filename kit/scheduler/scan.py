"""One fenced scan of a node's partitions: lock own leases, read due triggers, decide
with kit.core.trigger, write runs and advance triggers, all in one transaction.

Only partitions whose lease row this transaction locked (owner, believed epoch,
unexpired) are processed; a takeover waits for the commit, so a node that lost a
partition commits nothing for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from kit.core.dispatch import scan_window
from kit.core.jitter import jitter_offset_ms
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.schedule import Schedule, parse_schedule
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import DueTrigger, JobView, TriggerDecision, decide_scan
from kit.store import scheduling as sql
from kit.store.db import db_now

DEFAULT_BATCH = 20_000


@dataclass(frozen=True)
class HeldRun:
    """A committed run waiting in the timer wheel for its second."""

    run_id: str
    job_id: str
    attempt: int
    scheduled_at_ms: int
    due_ms: int
    tier: str
    partition_id: int
    epoch: int


@dataclass
class ScanResult:
    now: datetime
    locked: set[int] = field(default_factory=set)
    refused: set[int] = field(default_factory=set)  # believed owned, not lockable
    held: list[HeldRun] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> runs
    dropped: int = 0
    triggers: int = 0
    full: bool = False  # the batch limit was reached: more may be due


class JobViews:
    """Parsed jobs by (job_id, version): a schedule is parsed once per version, not
    once per scan; distinct schedule and misfire texts (many jobs share one) once."""

    def __init__(self, limit: int = 200_000) -> None:
        self._cache: dict[tuple[str, int], JobView] = {}
        self._schedules: dict[tuple[str, Any], Schedule] = {}
        self._misfires: dict[str, MisfirePolicy] = {}
        self._limit = limit

    def _schedule(self, text: str, created_at: Any) -> Schedule:
        data = json.loads(text)
        key = (text, created_at if "every_s" in data and "anchor" not in data else None)
        hit = self._schedules.get(key)
        if hit is None:
            hit = parse_schedule(data, now=created_at)
            if len(self._schedules) >= self._limit:
                self._schedules.clear()
            self._schedules[key] = hit
        return hit

    def _misfire(self, text: str) -> MisfirePolicy:
        hit = self._misfires.get(text)
        if hit is None:
            hit = self._misfires[text] = MisfirePolicy.parse(json.loads(text))
        return hit

    def view(self, row: Any) -> JobView | None:
        if row.version is None:
            return None
        key = (row.job_id, row.version)
        hit = self._cache.get(key)
        if hit is not None and hit.paused == row.paused:
            return hit
        view = JobView(
            job_id=row.job_id,
            version=row.version,
            schedule=self._schedule(row.schedule, row.created_at),
            priority=row.priority,
            jitter_offset_ms=jitter_offset_ms(row.job_id, row.jitter_s * 1000),
            paused=row.paused,
            overlap=OverlapPolicy.parse(row.overlap),
            misfire=self._misfire(row.misfire),
        )
        if len(self._cache) >= self._limit:
            self._cache.clear()
        self._cache[key] = view
        return view


def _due_trigger(row: Any) -> DueTrigger:
    return DueTrigger(
        partition_id=row.partition_id,
        fire_at_ms=to_epoch_ms(row.fire_at),
        job_id=row.job_id,
        job_version=row.job_version,
        kind=row.kind,
        attempt=row.attempt,
        run_scheduled_at_ms=(
            to_epoch_ms(row.run_scheduled_at) if row.run_scheduled_at is not None else None
        ),
    )


def scan_partitions(
    engine: Engine,
    node_id: str,
    epochs: Mapping[int, int],
    *,
    scan_ahead_ms: int,
    now: datetime | None = None,
    batch: int = DEFAULT_BATCH,
    jobs: JobViews | None = None,
) -> ScanResult:
    """Scan `epochs` (partition -> the epoch this node believes it holds) at `now`
    (None: the database's clock)."""
    jobs = jobs or JobViews()
    with engine.begin() as conn:
        at = db_now(conn, now)
        result = ScanResult(now=at)
        locked = sql.partitions_lock_own(conn, node_id, epochs)
        result.locked = locked
        result.refused = set(epochs) - locked
        if not locked:
            return result
        now_ms = to_epoch_ms(at)
        _lo, hi_ms = scan_window(now_ms, scan_ahead_ms)
        rows = sql.triggers_due(conn, locked, from_epoch_ms(hi_ms), batch)
        result.triggers = len(rows)
        result.full = len(rows) >= batch
        if not rows:
            return result
        views: dict[str, JobView] = {}
        tenants: dict[str, str] = {}
        keys: dict[DueTrigger, tuple[int, datetime, str]] = {}
        for row in rows:
            trig = _due_trigger(row)
            keys[trig] = (row.partition_id, row.fire_at, row.job_id)
            view = jobs.view(row)
            if view is not None:
                views[row.job_id] = view
                tenants[row.job_id] = row.tenant
        overlap_jobs = {j for j, v in views.items() if v.overlap is not OverlapPolicy.allow}
        active = sql.runs_active_counts(conn, overlap_jobs)
        decisions = decide_scan(keys, views, active, now_ms, hi_ms)
        _write(conn, decisions, keys, views, tenants, epochs, result)
    return result


def _write(
    conn: Any,
    decisions: list[TriggerDecision],
    keys: Mapping[DueTrigger, tuple[int, datetime, str]],
    views: Mapping[str, JobView],
    tenants: Mapping[str, str],
    epochs: Mapping[int, int],
    result: ScanResult,
) -> None:
    sql.runs_cancel_active(conn, {d.trigger.job_id for d in decisions if d.cancel_active})
    run_rows: list[sql.RunRow] = []
    partition_of_run: dict[str, int] = {}
    rearms: dict[str, int] = {}
    rearm_of: dict[str, Any] = {}
    cancels: dict[str, str] = {}
    deletes: list[tuple[int, datetime, str]] = []
    nexts: list[tuple[int, datetime, str, int]] = []
    for d in decisions:
        trig = d.trigger
        if not d.delete:
            continue
        deletes.append(keys[trig])
        if d.dropped is not None and d.cancel_run_id is None:
            result.dropped += 1
        if d.cancel_run_id is not None:
            cancels[d.cancel_run_id] = d.dropped or "cancelled"
        if d.rearm is not None:
            rearms[d.rearm.run_id] = d.rearm.attempt
            rearm_of[d.rearm.run_id] = (d.rearm, trig.partition_id)
        job = views.get(trig.job_id)
        for r in d.runs:
            assert job is not None  # runs are only planned for a live job
            run_rows.append(
                sql.RunRow(
                    run_id=r.run_id,
                    job_id=r.job_id,
                    tenant=tenants[r.job_id],
                    job_version=job.version,
                    priority=r.priority,
                    scheduled_at=from_epoch_ms(r.scheduled_at_ms),
                    status=r.status,
                    trigger_kind=r.trigger_kind,
                    skip_reason=r.skip_reason,
                )
            )
            partition_of_run[r.run_id] = trig.partition_id
        if d.next_fire_at_ms is not None and job is not None:
            nexts.append(
                (trig.partition_id, from_epoch_ms(d.next_fire_at_ms), trig.job_id, job.version)
            )
    inserted = sql.runs_insert(conn, run_rows)
    rearmed = sql.runs_rearm(conn, rearms)
    sql.runs_cancel_retries(conn, cancels)
    sql.triggers_delete(conn, deletes)
    sql.triggers_insert(conn, nexts)
    for row in run_rows:
        if row.run_id not in inserted:
            continue
        if row.status == "pending" and row.skip_reason is None:
            p = partition_of_run[row.run_id]
            ms = to_epoch_ms(row.scheduled_at)
            result.held.append(
                HeldRun(row.run_id, row.job_id, 1, ms, ms, row.priority, p, epochs[p])
            )
        else:
            reason = row.skip_reason or "skipped"
            result.skipped[reason] = result.skipped.get(reason, 0) + 1
    for rid in rearmed:
        rearm, p = rearm_of[rid]
        result.held.append(
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

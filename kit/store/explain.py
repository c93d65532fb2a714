""" "Why didn't my job run?" (GET /v1/jobs/{id}/explain): every fire the job's schedule
owed in a range, matched with its run by id, judged by kit.core.owed. A paused job
writes nothing for its fires: the audit log's pauses and resumes say which fires
without a run were skipped because of one.

The schedule in force at each time comes from the job's audit log (its create and the
edits that changed the schedule or jitter); runs in the range that no owed fire names
(run now, a backfill of another range, a fire of an edited-away schedule already
written when the edit landed) are listed apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine, text

from kit.core.errors import FieldError
from kit.core.owed import (
    DUE_GRACE_MS,
    MAX_EXPLAIN_FIRES,
    Explained,
    RunView,
    ScheduleEra,
    check_explain_range,
    explain_fires,
    owed_fires,
)
from kit.core.waiting import TenantLoad
from kit.store.audit import paused_stretches, schedule_eras
from kit.store.db import db_now, is_uuid
from kit.store.errors import JobNotFound
from kit.store.jobs import job_read_in
from kit.store.runs import run_state_sql
from kit.store.switches import held_by
from kit.store.waiting import awaiting_sql, tenant_load

MAX_OTHER_RUNS = 500

_RUNS = f"""
SELECT run_id::text, status, skip_reason, trigger_kind, attempt, error, scheduled_at,
    {run_state_sql()} AS state, {awaiting_sql()} AS awaiting
FROM runs
WHERE job_id = :job_id AND tenant = :tenant AND scheduled_at >= :start AND scheduled_at < :end
ORDER BY scheduled_at, run_id
LIMIT :limit
"""


@dataclass(frozen=True)
class OtherRun:
    run: RunView
    scheduled_at: datetime


@dataclass(frozen=True)
class Explanation:
    job_id: str
    now: datetime
    start: datetime
    end: datetime
    eras: list[ScheduleEra]
    fires: list[Explained]
    other_runs: list[OtherRun]
    next_from: datetime | None  # more fires are owed after the last listed: ask again from here
    history_complete: bool
    # run id -> the state it is shown in (kit.core.run_state: `claimed` while held)
    states: dict[str, str] = field(default_factory=dict)
    # what a kill switch says of the job's runs, while one holds them (kit.store.switches)
    held: str | None = None
    # runs due and not started (none while a switch holds the job's runs), the job's
    # task type, and the tenant's load when some wait and it was asked for
    awaiting: frozenset[str] = frozenset()
    task_type: str | None = None
    load: TenantLoad | None = None

    def shown(self, run: RunView) -> str:
        return self.states.get(run.run_id, run.status)


def job_explain(
    engine: Engine,
    tenant: str,
    job_id: str,
    start: datetime,
    end: datetime,
    *,
    limit: int = 500,
    due_grace_ms: int = DUE_GRACE_MS,
    written_ahead_ms: int = 0,
    now: datetime | None = None,
    load_window_ms: int | None = None,
) -> Explanation:
    """`written_ahead_ms`: the scheduler's scan-ahead (how far past an edit the old
    schedule's runs were already written). `load_window_ms`: read the tenant's load
    (kit.store.waiting.tenant_load) if some of the runs wait to start."""
    check_explain_range(start, end)
    if not 1 <= limit <= MAX_EXPLAIN_FIRES:
        raise FieldError("limit", f"must be between 1 and {MAX_EXPLAIN_FIRES}")
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    with engine.begin() as conn:
        job = job_read_in(conn, tenant, job_id)
        if job is None:
            raise JobNotFound(job_id)
        at = db_now(conn, now)
        task_type = job.spec.task.get("type")
        held = held_by(conn, tenant, job.spec.priority, task_type)
        eras, complete = schedule_eras(conn, job_id, job.spec, job.created_at)
        paused = paused_stretches(conn, job_id, job.spec.paused, job.created_at, job.next_fire_at)
        owed = owed_fires(job_id, eras, start, end, limit + 1, written_ahead_ms)
        next_from = owed[limit].at if len(owed) > limit else None
        owed = owed[:limit]
        runs_end = next_from or end
        rows = conn.execute(
            text(_RUNS),
            {
                "job_id": job_id,
                "tenant": tenant,
                "start": start,
                "end": runs_end,
                "limit": len(owed) + MAX_OTHER_RUNS,
            },
        ).all()
        awaiting = frozenset(r.run_id for r in rows if r.awaiting) if held is None else frozenset()
        load = (
            tenant_load(conn, tenant, load_window_ms)
            if awaiting and load_window_ms is not None
            else None
        )
    views = {
        row.run_id: RunView(
            run_id=row.run_id,
            status=row.status,
            skip_reason=row.skip_reason,
            trigger_kind=row.trigger_kind,
            attempt=row.attempt,
            error=row.error,
        )
        for row in rows
    }
    owed_ids = {f.run_id for f in owed}
    other = [
        OtherRun(views[row.run_id], row.scheduled_at) for row in rows if row.run_id not in owed_ids
    ]
    return Explanation(
        job_id=job_id,
        now=at,
        start=start,
        end=end,
        eras=eras,
        fires=explain_fires(owed, views, at, due_grace_ms, paused),
        other_runs=other,
        next_from=next_from,
        history_complete=complete,
        states={row.run_id: row.state for row in rows},
        held=held,
        awaiting=awaiting,
        task_type=task_type,
        load=load,
    )

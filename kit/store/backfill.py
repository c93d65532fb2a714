"""Backfill (POST /v1/jobs/{id}:backfill): the runs a job's schedule owed in a past
range, made in one transaction.

Which fires are owed is kit.core.owed's answer (the schedule in force at each time, DST
rule applied, jitter included), and each fire's run id is the one the scheduler gives
it, so:
- a fire that already has a run (it ran, or a backfill made it) gets nothing new: a
  repeated backfill creates nothing;
- a fire the scheduler recorded as skipped (paused, overlap, misfire) is revived: the
  same run row goes back to pending, as a backfill run;
- a fire with no run gets a new row (kind 'backfill').

New and revived runs are pending (kind 'backfill') and the reaper's next pass publishes
them, as it does manual runs. A job whose overlap policy is not
'allow' gets them held back as queued (the overlap 'queue' marker), so they run one at
a time, oldest first, released as each run of the job ends.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from kit.core.owed import plan_backfill
from kit.core.trigger import QUEUED
from kit.store.audit import audit_in, schedule_eras
from kit.store.db import db_now, is_uuid
from kit.store.errors import JobNotFound, JobPaused, TierNotAllowed
from kit.store.jobs import job_read_in
from kit.store.scheduling import pg_array
from kit.store.vocab import KIND_BACKFILL, RUN_PENDING, RUN_SKIPPED

_INSERT = f"""
INSERT INTO runs (run_id, job_id, tenant, job_version, priority, scheduled_at, attempt,
                  status, trigger_kind, skip_reason)
SELECT r.id, :job_id, :tenant, :version, :priority, r.at, 1, {RUN_PENDING}, {KIND_BACKFILL}, :marker
FROM unnest(CAST(:ids AS uuid[]), CAST(:ats AS timestamptz[])) AS r(id, at)
ON CONFLICT (run_id) DO NOTHING
RETURNING run_id::text
"""
_REVIVE = f"""
UPDATE runs SET status = {RUN_PENDING}, trigger_kind = {KIND_BACKFILL}, skip_reason = :marker,
    finished_at = NULL, error = NULL, dispatched_at = NULL, job_version = :version,
    priority = :priority
WHERE run_id = ANY(CAST(:ids AS uuid[])) AND tenant = :tenant AND status = {RUN_SKIPPED}
RETURNING run_id::text
"""


@dataclass(frozen=True)
class Backfilled:
    job_id: str
    owed: list[tuple[str, datetime]]  # (run id, scheduled time) of every fire owed
    created: set[str]
    revived: set[str]
    history_complete: bool  # False: the schedule before the last known one is a guess

    @property
    def existing(self) -> int:
        return len(self.owed) - len(self.created) - len(self.revived)


def job_backfill(
    engine: Engine,
    tenant: str,
    job_id: str,
    start: datetime,
    end: datetime,
    *,
    max_runs: int,
    actor: str,
    written_ahead_ms: int = 0,
    run_retention_s: int | None = None,
    now: datetime | None = None,
    tiers: Collection[str] | None = None,
) -> Backfilled:
    """FieldError (422) for a range in the future, reversed, older than the run
    retention, or owing more than max_runs; JobPaused for a paused job (nothing is
    written: its runs would run while it is paused, which is what pausing says not to
    do; resume it, then backfill); TierNotAllowed when the job's priority is not in
    `tiers` (the operator's tiers for the tenant)."""
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    with engine.begin() as conn:
        job = job_read_in(conn, tenant, job_id, lock=True)  # an edit waits, and vice versa
        if job is None:
            raise JobNotFound(job_id)
        if job.spec.paused:
            raise JobPaused(job_id)
        if tiers is not None and job.spec.priority not in tiers:
            raise TierNotAllowed(job.spec.priority)  # the operator took the tier back
        at = db_now(conn, now)
        eras, complete = schedule_eras(conn, job_id, job.spec, job.created_at)
        plan = plan_backfill(
            job_id, eras, start, end, at, max_runs, written_ahead_ms, run_retention_s
        )
        ids = [f.run_id for f in plan.fires]
        marker = None if job.spec.overlap == "allow" else QUEUED
        common = {
            "job_id": job_id,
            "tenant": tenant,
            "version": job.version,
            "priority": job.spec.priority,
            "marker": marker,
        }
        created: set[str] = set()
        revived: set[str] = set()
        if ids:
            revived = set(conn.execute(text(_REVIVE), {**common, "ids": pg_array(ids)}).scalars())
            created = set(
                conn.execute(
                    text(_INSERT),
                    {**common, "ids": pg_array(ids), "ats": [f.at for f in plan.fires]},
                ).scalars()
            )
        audit_in(
            conn,
            tenant=tenant,
            job_id=job_id,
            actor=actor,
            action="backfill",
            at=at,
            version=job.version,
            changes={
                "from": start.isoformat(),
                "to": end.isoformat(),
                "owed": len(ids),
                "created": len(created),
                "revived": len(revived),
            },
        )
    return Backfilled(
        job_id=job_id,
        owed=[(f.run_id, f.at) for f in plan.fires],
        created=created,
        revived=revived,
        history_complete=complete,
    )

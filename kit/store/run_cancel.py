"""Cancelling a run (POST /v1/runs/{id}:cancel), in one transaction:

- a run not started (pending, or waiting for a retry) becomes `cancelled` at once: no
  worker can claim it (a claim needs pending), the reaper
  and the scheduler leave cancelled runs alone, and a waiting retry's trigger goes;
- a running run becomes `cancelled` with its lease token cleared, so its worker can
  neither extend nor finish it, and a notification on CANCEL_CHANNEL tells the workers
  at commit: the one running it stops the task at once (kit.store.worker_link). Should
  that notification be missed, the worker's next heartbeat finds the lease gone and
  stops it anyway (within the run lease TTL / 3: 10 s by default);
- a finished run (succeeded, dead, skipped, cancelled) is refused: RunFinished (409).

The run records who cancelled it (`cancelled_by`: the token id) and the job's audit log
gets an entry. A job with overlap 'queue' releases its next queued run, which the
reaper then publishes like any run nobody claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from kit.core.leases import TERMINAL, RunStatus
from kit.core.trigger import QUEUED
from kit.store.audit import audit_in
from kit.store.claims import release_queued_in
from kit.store.db import NOW_SQL, db_now, is_uuid
from kit.store.errors import RunNotFound, StoreError
from kit.store.runs import RunRecord, run_record, run_state_sql
from kit.store.vocab import KIND_RETRY, RUN_CANCELLED

CANCEL_CHANNEL = "cronfleet_run_cancel"
FINISHED = tuple(sorted(s.value for s in TERMINAL))


class RunFinished(StoreError):
    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} is already {status}: a finished run cannot be cancelled")
        self.run_id = run_id
        self.status = status


@dataclass(frozen=True)
class Cancelled:
    run: RunRecord
    was: str  # the state it had (kit.core.run_state: `claimed` for one held for its second)
    notified: bool  # a worker was running it and has been told to stop


def run_cancel(
    engine: Engine, tenant: str, run_id: str, actor: str, *, now: datetime | None = None
) -> Cancelled:
    if not is_uuid(run_id):
        raise RunNotFound(run_id)
    with engine.begin() as conn:
        row = conn.execute(
            text(
                f"""
                SELECT run_id, job_id, status, skip_reason, scheduled_at, job_version,
                    {run_state_sql()} AS state
                FROM runs WHERE tenant = :tenant AND run_id = :run_id FOR UPDATE
                """
            ),
            {"tenant": tenant, "run_id": run_id},
        ).first()
        if row is None:
            raise RunNotFound(run_id)
        if row.status in FINISHED:
            raise RunFinished(run_id, row.status)
        at = db_now(conn, now)
        conn.execute(
            text(
                f"""
                UPDATE runs SET status = {RUN_CANCELLED}, cancelled_by = :actor,
                    finished_at = {NOW_SQL},
                    error = 'cancelled by token ' || :actor, lease_token = NULL,
                    lease_expires_at = NULL, retry_at = NULL, skip_reason = NULL
                WHERE run_id = :run_id
                """
            ),
            {"run_id": run_id, "actor": actor, "now": now},
        )
        if row.status == RunStatus.retry_scheduled:
            conn.execute(
                text(
                    f"""
                    DELETE FROM triggers WHERE job_id = :job_id AND kind = {KIND_RETRY}
                      AND run_scheduled_at = :scheduled_at
                    """
                ),
                {"job_id": row.job_id, "scheduled_at": row.scheduled_at},
            )
        held_back = row.status == RunStatus.pending and row.skip_reason == QUEUED
        if not held_back:
            release_queued_in(conn, str(row.job_id))
        notified = row.status == RunStatus.running
        if notified:
            conn.execute(
                text("SELECT pg_notify(:channel, :run_id)"),
                {"channel": CANCEL_CHANNEL, "run_id": run_id},
            )
        audit_in(
            conn,
            tenant=tenant,
            job_id=str(row.job_id),
            actor=actor,
            action="cancel_run",
            at=at,
            version=row.job_version,
            changes={
                "run_id": run_id,
                "status": {"from": row.state, "to": RunStatus.cancelled.value},
            },
        )
        after = text("SELECT * FROM runs WHERE run_id = :run_id")
        record = run_record(conn.execute(after, {"run_id": run_id}).one())
    return Cancelled(record, row.state, notified)

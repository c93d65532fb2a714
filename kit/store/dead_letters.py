"""Dead letters: runs that used up their attempts, with the error history, replayable.

A replay puts the same run (same run id, so the task's idempotency key guards its effect)
back to `pending` with the next attempt number and a fresh attempt budget, and sets
`replayed_at`. The budget's base is the attempt the run died at (the last entry of the
dead letter's error history), read by `ATTEMPT_BASE_SQL` when the next failure is judged.
A replay of a run that is not dead (already replayed and not dead again) changes nothing
and is refused with ReplayConflict (HTTP 409), so a retried request cannot run it twice.
The replayed run is published by the reaper on its next pass, like a manual run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from kit.core.errors import FieldError
from kit.core.leases import RunStatus
from kit.store.db import NOW_SQL, is_uuid
from kit.store.errors import RunNotFound, StoreError
from kit.store.runs import cursor_decode, cursor_encode, run_state_sql
from kit.store.vocab import RUN_DEAD, RUN_PENDING

MAX_PAGE = 500
MAX_BULK_REPLAY = 1000

# The attempt at which the run's current attempt budget began (0: never replayed).
ATTEMPT_BASE_SQL = """coalesce((
    SELECT (d.errors -> -1 ->> 'attempt')::int FROM dead_letters d
    WHERE d.run_id = r.run_id AND d.replayed_at IS NOT NULL), 0)"""


class ReplayConflict(StoreError):
    """The run is not dead (it was replayed already and has not died again)."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} is {status}, not dead: it was already replayed")
        self.run_id = run_id
        self.status = status


@dataclass(frozen=True)
class DeadLetterRecord:
    run_id: str
    job_id: str
    tenant: str
    errors: list[dict[str, Any]]
    created_at: datetime
    replayed_at: datetime | None
    run_status: str
    attempt: int
    scheduled_at: datetime


@dataclass(frozen=True)
class DeadLetterPage:
    dead_letters: list[DeadLetterRecord]
    next_cursor: str | None


_SELECT = f"""
SELECT d.run_id, d.job_id, d.tenant, d.errors, d.created_at, d.replayed_at,
       {run_state_sql("r")} AS run_status, r.attempt, r.scheduled_at
FROM dead_letters d JOIN runs r ON r.run_id = d.run_id
"""


def _record(row: Any) -> DeadLetterRecord:
    return DeadLetterRecord(
        run_id=str(row.run_id),
        job_id=str(row.job_id),
        tenant=row.tenant,
        errors=list(row.errors),
        created_at=row.created_at,
        replayed_at=row.replayed_at,
        run_status=row.run_status,
        attempt=row.attempt,
        scheduled_at=row.scheduled_at,
    )


def dead_letter_in(conn: Connection, run_id: str, now: datetime | None = None) -> None:
    """Inside the transaction that made the run dead: record it with its error history
    (and its failure notification, `notification_in`). A run that dies again after a
    replay replaces its earlier dead letter. `created_at` (when it died: the list's
    order, a bulk replay's range) is the transaction's clock."""
    conn.execute(
        text(
            f"""
            INSERT INTO dead_letters (run_id, job_id, tenant, errors, created_at)
            SELECT run_id, job_id, tenant, errors, {NOW_SQL} FROM runs WHERE run_id = :run_id
            ON CONFLICT (run_id) DO UPDATE
            SET errors = excluded.errors, created_at = excluded.created_at, replayed_at = NULL
            """
        ),
        {"run_id": run_id, "now": now},
    )
    notification_in(conn, run_id, now)


# A job that names a failure webhook is told of each dead letter: the outbox row is
# written here, in the dead letter's own transaction, and sent by the maintenance
# service (kit.maintenance.notifier); once per dead letter, (run id, attempt).
_NOTIFY = f"""
INSERT INTO notifications (tenant, job_id, job_name, run_id, attempt, scheduled_at, error,
    target, created_at, next_at)
SELECT r.tenant, r.job_id, j.name, r.run_id, r.attempt, r.scheduled_at, r.error, j.notify,
    {NOW_SQL}, {NOW_SQL}
FROM runs r JOIN jobs j ON j.job_id = r.job_id
WHERE r.run_id = :run_id AND j.notify IS NOT NULL
ON CONFLICT (run_id, attempt) DO NOTHING
"""


def notification_in(conn: Connection, run_id: str, now: datetime | None = None) -> None:
    """The failure notification of the run that just died, if its job names a webhook."""
    conn.execute(text(_NOTIFY), {"run_id": run_id, "now": now})


def dead_letters_list(
    engine: Engine,
    tenant: str,
    job_id: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> DeadLetterPage:
    """Newest first, keyset-paginated on (created_at, run_id); replayed ones included
    (their `replayed_at` is set)."""
    if not 1 <= limit <= MAX_PAGE:
        raise FieldError("limit", f"must be between 1 and {MAX_PAGE}")
    if job_id is not None and not is_uuid(job_id):
        raise FieldError("job_id", "is not a job id")
    after = cursor_decode(cursor) if cursor else None
    sql = _SELECT + (
        " WHERE d.tenant = :tenant"
        " AND (CAST(:job_id AS uuid) IS NULL OR d.job_id = CAST(:job_id AS uuid))"
    )
    params: dict[str, Any] = {"tenant": tenant, "job_id": job_id, "limit": limit + 1}
    if after is not None:
        sql += " AND (d.created_at, d.run_id) < (:after_at, CAST(:after_id AS uuid))"
        params.update(after_at=after[0], after_id=after[1])
    sql += " ORDER BY d.created_at DESC, d.run_id DESC LIMIT :limit"
    with engine.begin() as conn:
        rows = conn.execute(text(sql), params).all()
    page = [_record(row) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = cursor_encode(page[-1].created_at, page[-1].run_id)
    return DeadLetterPage(page, next_cursor)


def dead_letter_get(engine: Engine, tenant: str, run_id: str) -> DeadLetterRecord:
    if not is_uuid(run_id):
        raise RunNotFound(run_id)
    with engine.begin() as conn:
        row = conn.execute(
            text(_SELECT + " WHERE d.tenant = :tenant AND d.run_id = :run_id"),
            {"tenant": tenant, "run_id": run_id},
        ).first()
    if row is None:
        raise RunNotFound(run_id)
    return _record(row)


_REPLAY_RUN = f"""
UPDATE runs r SET status = {RUN_PENDING}, attempt = r.attempt + 1, dispatched_at = NULL,
    lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, retry_at = NULL,
    started_at = NULL, finished_at = NULL, error = NULL, claimed_at = NULL,
    attempt_started_at = NULL
"""


def dead_letter_replay(
    engine: Engine, tenant: str, run_id: str, *, now: datetime | None = None
) -> DeadLetterRecord:
    """Back to pending with a fresh budget; ReplayConflict when the run is not dead."""
    if not is_uuid(run_id):
        raise RunNotFound(run_id)
    with engine.begin() as conn:
        row = conn.execute(
            text(
                """
                SELECT r.status FROM dead_letters d JOIN runs r ON r.run_id = d.run_id
                WHERE d.tenant = :tenant AND d.run_id = :run_id FOR UPDATE
                """
            ),
            {"tenant": tenant, "run_id": run_id},
        ).first()
        if row is None:
            raise RunNotFound(run_id)
        if row.status != RunStatus.dead:
            raise ReplayConflict(run_id, row.status)
        conn.execute(text(_REPLAY_RUN + " WHERE r.run_id = :run_id"), {"run_id": run_id})
        conn.execute(
            text(f"UPDATE dead_letters SET replayed_at = {NOW_SQL} WHERE run_id = :run_id"),
            {"run_id": run_id, "now": now},
        )
        record = conn.execute(text(_SELECT + " WHERE d.run_id = :run_id"), {"run_id": run_id}).one()
    return _record(record)


def dead_letters_replay_bulk(
    engine: Engine,
    tenant: str,
    job_id: str | None = None,
    dead_from: datetime | None = None,
    dead_to: datetime | None = None,
    limit: int = MAX_BULK_REPLAY,
    *,
    now: datetime | None = None,
) -> int:
    """Replay up to `limit` dead runs of the tenant (of one job, dead in [from, to)),
    oldest first; returns how many. Runs already replayed are not touched again."""
    if not 1 <= limit <= MAX_BULK_REPLAY:
        raise FieldError("limit", f"must be between 1 and {MAX_BULK_REPLAY}")
    if job_id is not None and not is_uuid(job_id):
        raise FieldError("job_id", "is not a job id")
    if dead_from is not None and dead_to is not None and dead_to <= dead_from:
        raise FieldError("to", "must be after from")
    sql = f"""
    WITH picked AS (
        SELECT r.run_id FROM dead_letters d JOIN runs r ON r.run_id = d.run_id
        WHERE d.tenant = :tenant AND r.status = {RUN_DEAD}
          AND (CAST(:job_id AS uuid) IS NULL OR d.job_id = CAST(:job_id AS uuid))
          AND (CAST(:dead_from AS timestamptz) IS NULL
               OR d.created_at >= CAST(:dead_from AS timestamptz))
          AND (CAST(:dead_to AS timestamptz) IS NULL
               OR d.created_at < CAST(:dead_to AS timestamptz))
        ORDER BY d.created_at, d.run_id
        LIMIT :limit
        FOR UPDATE OF r SKIP LOCKED
    ), replayed AS (
        {_REPLAY_RUN} FROM picked p WHERE r.run_id = p.run_id RETURNING r.run_id
    )
    UPDATE dead_letters d SET replayed_at = {NOW_SQL} FROM replayed
    WHERE d.run_id = replayed.run_id RETURNING d.run_id
    """
    params = {
        "tenant": tenant,
        "job_id": job_id,
        "dead_from": dead_from,
        "dead_to": dead_to,
        "limit": limit,
        "now": now,
    }
    with engine.begin() as conn:
        return len(conn.execute(text(sql), params).all())

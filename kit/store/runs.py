"""Runs as the API sees them: history listing with keyset pagination, and run-now.

A run's id is `kit.core.ids.run_id(job_id, scheduled_at)`, so inserting the same
(job, scheduled time) twice yields one row; run-now relies on that too.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, literal_column, select
from sqlalchemy.dialects.postgresql import insert

from kit.core.errors import FieldError
from kit.core.ids import run_id as make_run_id
from kit.core.leases import RunStatus
from kit.core.run_state import RunState
from kit.core.timeutil import EPOCH
from kit.store.audit import KIT_ACTOR, audit_in
from kit.store.db import db_now, is_uuid
from kit.store.errors import IdempotencyConflict, JobNotFound, RunNotFound, TierNotAllowed
from kit.store.jobs import idempotency_key_claim, request_fingerprint
from kit.store.pg_async import AsyncPool, Query, Steps, run_steps, run_steps_async
from kit.store.schema import jobs, runs
from kit.store.vocab import RUN_RUNNING, STATE_CLAIMED

MAX_PAGE = 500
RUN_STATES = tuple(s.value for s in RunState)


def run_state_sql(alias: str = "", now: str = "now()") -> str:
    """kit.core.run_state.run_state in SQL, by the database's clock (or `now`, an SQL
    instant): a running run with no start recorded for its attempt whose due time is
    still ahead is `claimed` (tests/contract/test_run_lease.py holds the two equal)."""
    a = f"{alias}." if alias else ""
    return (
        f"CASE WHEN {a}status = {RUN_RUNNING} AND {a}attempt_started_at IS NULL"
        f" AND greatest({a}scheduled_at, {a}retry_at) > {now}"
        f" THEN {STATE_CLAIMED} ELSE {a}status END"
    )


# A run read with the state it is shown in (select(runs, STATE)).
STATE = literal_column(run_state_sql()).label("state")


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    job_id: str
    tenant: str
    job_version: int
    priority: str
    scheduled_at: datetime
    attempt: int
    status: str
    trigger_kind: str
    worker_id: str | None
    lease_expires_at: datetime | None
    dispatched_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    skip_reason: str | None
    created_at: datetime
    cancelled_by: str | None = None  # the token that cancelled it (POST /v1/runs/{id}:cancel)
    claimed_at: datetime | None = None  # the current attempt's claim
    attempt_started_at: datetime | None = None  # the current attempt's start
    retry_at: datetime | None = None  # a retry's due time
    state: str | None = None  # kit.core.run_state, by the database's clock when read

    @property
    def shown_status(self) -> str:
        """What the API and the console call its status (a RunState)."""
        return self.state or self.status


@dataclass(frozen=True)
class RunPage:
    runs: list[RunRecord]
    next_cursor: str | None  # None: this was the last page


def run_record(row: Any) -> RunRecord:
    return RunRecord(
        run_id=str(row.run_id),
        job_id=str(row.job_id),
        tenant=row.tenant,
        job_version=row.job_version,
        priority=row.priority,
        scheduled_at=row.scheduled_at,
        attempt=row.attempt,
        status=row.status,
        trigger_kind=row.trigger_kind,
        worker_id=row.worker_id,
        lease_expires_at=row.lease_expires_at,
        dispatched_at=row.dispatched_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        error=row.error,
        skip_reason=row.skip_reason,
        created_at=row.created_at,
        cancelled_by=row.cancelled_by,
        claimed_at=row.claimed_at,
        attempt_started_at=row.attempt_started_at,
        retry_at=row.retry_at,
        state=getattr(row, "state", None),
    )


def cursor_encode(scheduled_at: datetime, run_id: str) -> str:
    """Opaque to clients: the (scheduled_at, run_id) of the last run on a page."""
    micros = (scheduled_at - EPOCH) // timedelta(microseconds=1)
    raw = f"{micros}:{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        micros_text, run_id = base64.urlsafe_b64decode(padded).decode().split(":", 1)
        micros = int(micros_text)
        if not is_uuid(run_id):
            raise ValueError(run_id)
        at = EPOCH + timedelta(microseconds=micros)
    except (ValueError, UnicodeDecodeError, binascii.Error, OverflowError, OSError) as exc:
        raise FieldError("cursor", "is not a cursor returned by this API") from exc
    return at, run_id


# Runs of a job, newest first (limit + 1 rows: one more says a next page exists), and
# whether the job exists (which only matters when it has none): one statement, one round
# trip. No runs gives one row with the flag and no run. A filter on the status and a
# cursor each add a condition: four texts, made once.
_RUN_COLUMNS = (
    "run_id",
    "job_id",
    "tenant",
    "job_version",
    "priority",
    "scheduled_at",
    "attempt",
    "status",
    "trigger_kind",
    "worker_id",
    "lease_expires_at",
    "dispatched_at",
    "started_at",
    "finished_at",
    "error",
    "skip_reason",
    "created_at",
    "cancelled_by",
    "claimed_at",
    "attempt_started_at",
    "retry_at",
)


def _runs_page_sql(by_status: bool, after: bool) -> str:
    conditions = ["tenant = %(tenant)s", "job_id = %(job_id)s::uuid"]
    if by_status:
        conditions.append(f"{run_state_sql()} = %(status)s")
    if after:
        conditions.append(
            "(scheduled_at, run_id) < (%(after_at)s::timestamptz, %(after_id)s::uuid)"
        )
    return f"""
SELECT e.job_exists, {", ".join(f"r.{c}" for c in _RUN_COLUMNS)}, r.state
FROM (SELECT EXISTS (SELECT FROM jobs WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid)
        AS job_exists) AS e
LEFT JOIN LATERAL (
    SELECT {", ".join(_RUN_COLUMNS)}, {run_state_sql()} AS state FROM runs
    WHERE {" AND ".join(conditions)}
    ORDER BY scheduled_at DESC, run_id DESC
    LIMIT %(limit)s
) AS r ON true
ORDER BY r.scheduled_at DESC, r.run_id DESC"""


RUNS_PAGE_SQL = {
    (by_status, after): _runs_page_sql(by_status, after)
    for by_status in (False, True)
    for after in (False, True)
}


def _runs_page(
    tenant: str,
    job_id: str,
    status: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Steps[RunPage]:
    if status is not None and status not in RUN_STATES:
        raise FieldError("status", f"must be one of {', '.join(RUN_STATES)}")
    if not 1 <= limit <= MAX_PAGE:
        raise FieldError("limit", f"must be between 1 and {MAX_PAGE}")
    after = cursor_decode(cursor) if cursor else None
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    args: dict[str, Any] = {"tenant": tenant, "job_id": job_id, "limit": limit + 1}
    if status is not None:
        args["status"] = status
    if after is not None:
        args["after_at"], args["after_id"] = after
    rows = yield Query(RUNS_PAGE_SQL[status is not None, after is not None], args)
    found = [row for row in rows or () if row.run_id is not None]
    if not found and after is None and not (rows and rows[0].job_exists):
        raise JobNotFound(job_id)
    return _page(found, limit)


def runs_list(
    engine: Engine,
    tenant: str,
    job_id: str,
    status: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> RunPage:
    """Runs of one job, newest first, keyset-paginated on (scheduled_at, run_id).

    History outlives the job: a deleted job's runs are still listed; a job that
    never existed for this tenant (and has no runs) is not found.
    """
    return run_steps(engine, _runs_page(tenant, job_id, status, cursor, limit), atomic=False)


async def runs_list_async(
    pool: AsyncPool,
    tenant: str,
    job_id: str,
    status: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> RunPage:
    return await run_steps_async(
        pool, _runs_page(tenant, job_id, status, cursor, limit), atomic=False
    )


def _page(rows: Sequence[Any], limit: int) -> RunPage:
    page = [run_record(row) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last = page[-1]
        next_cursor = cursor_encode(last.scheduled_at, last.run_id)
    return RunPage(page, next_cursor)


def run_get(engine: Engine, tenant: str, run_id: str) -> RunRecord:
    if not is_uuid(run_id):
        raise RunNotFound(run_id)
    with engine.begin() as conn:
        row = conn.execute(
            select(runs, STATE).where(runs.c.tenant == tenant, runs.c.run_id == run_id)
        ).first()
    if row is None:
        raise RunNotFound(run_id)
    return run_record(row)


def run_now_fingerprint(job_id: str) -> str:
    """The request an Idempotency-Key of run-now stands for: this job's run-now. It can
    equal no job-create body, so a key reused across the two is a conflict."""
    return request_fingerprint({"run_now": {"job_id": job_id}})


def run_now(
    engine: Engine,
    tenant: str,
    job_id: str,
    now: datetime | None = None,
    actor: str = KIT_ACTOR,
    idempotency_key: str | None = None,
    tiers: Collection[str] | None = None,
) -> tuple[RunRecord, bool]:
    """Insert a manual run scheduled now (pending, not yet published: the reaper's next pass or
    the reaper publishes it). Returns (run, created); a second call within the same
    millisecond names the same run id and returns the existing run.

    With an `idempotency_key`, a retry returns the run the first call made (created
    False) however much later it comes; the key used for another request (another job,
    a job create) raises IdempotencyConflict. The key shares the tenant's
    `idempotency_keys` with job creates; its row's `created_at` is the run's
    `scheduled_at`, which with the job id names the run (`kit.core.ids.run_id`).

    With `tiers` (the operator's tiers for the tenant), a job whose priority is not one
    of them raises TierNotAllowed and nothing is written.
    """
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    with engine.begin() as conn:
        job = conn.execute(
            select(jobs.c.version, jobs.c.priority).where(
                jobs.c.tenant == tenant, jobs.c.job_id == job_id
            )
        ).first()
        if job is None:
            raise JobNotFound(job_id)
        if tiers is not None and job.priority not in tiers:
            raise TierNotAllowed(job.priority)  # the operator took the job's tier back
        at = db_now(conn, now).astimezone(UTC)
        at = at.replace(microsecond=at.microsecond // 1000 * 1000)  # run ids are per ms
        if idempotency_key is not None:
            earlier = _claim_run_now_key(conn, tenant, job_id, idempotency_key, at)
            if earlier is not None:
                return earlier, False
        rid = make_run_id(job_id, at)
        inserted = conn.execute(
            insert(runs)
            .values(
                run_id=rid,
                job_id=job_id,
                tenant=tenant,
                job_version=job.version,
                priority=job.priority,
                scheduled_at=at,
                attempt=1,
                status=RunStatus.pending.value,
                trigger_kind="manual",
            )
            .on_conflict_do_nothing(index_elements=[runs.c.run_id])
            .returning(runs.c.run_id)
        ).first()
        if inserted is not None:
            audit_in(
                conn,
                tenant=tenant,
                job_id=job_id,
                actor=actor,
                action="run_now",
                at=at,
                version=job.version,
                changes={"run_id": rid},
            )
        row = conn.execute(select(runs, STATE).where(runs.c.run_id == rid)).one()
    return run_record(row), inserted is not None


def _claim_run_now_key(
    conn: Connection, tenant: str, job_id: str, key: str, at: datetime
) -> RunRecord | None:
    """Insert the key for the run about to be made (its row's created_at is the run's
    scheduled_at), or return the run an earlier use made."""
    earlier = idempotency_key_claim(conn, tenant, key, run_now_fingerprint(job_id), job_id, at)
    if earlier is None:
        return None
    row = conn.execute(
        select(runs, STATE).where(
            runs.c.tenant == tenant, runs.c.run_id == make_run_id(job_id, earlier.created_at)
        )
    ).first()
    if row is None:
        raise IdempotencyConflict("the run made with this Idempotency-Key no longer exists")
    return run_record(row)

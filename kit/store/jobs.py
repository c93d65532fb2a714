"""The job repository: a job and its trigger are always written in one transaction.

An edit bumps `version` and replaces the job's triggers with one of the new version, so a
trigger of an older version cannot fire. Deleting a job removes its triggers and keeps
its run history. A paused job keeps its trigger: the scheduler parks it when it comes
due, and a resume puts it back where the misfire policy wants the owed fires.

The operations the jobs API calls (create, get, edit, delete) are written once, as steps
(kit.store.pg_async: statements yielded, rows received, decisions with kit.core in
between), and offered twice: on an Engine (`job_create(engine, ...)`, tests, tooling, the
console) and on the async pool (`job_create_async(pool, ...)`, what the HTTP API runs).
Their statements are this module's `*_SQL` constants. Each write is one statement that
changes every table it must (data-modifying CTEs: the job, its trigger, its audit entry),
so a create is two round trips (the database's clock, then the write), a get one, and an
edit or a delete a transaction of two statements (the job read and locked with the
clock, then the write).
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import IntegrityError

from kit.core.audit import AuditAction, edit_action, job_diff, redacted
from kit.core.ids import run_id as make_run_id
from kit.core.jitter import jitter_offset_ms
from kit.core.leases import RunStatus
from kit.core.partitions import PARTITION_COUNT, partition_of
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.schedule import (
    CronSchedule,
    OneOffSchedule,
    Schedule,
    next_fire,
    parse_schedule,
    schedule_to_dict,
)
from kit.core.timeutil import EPOCH, from_epoch_ms, to_epoch_ms
from kit.core.trigger import (
    SKIP_EDITED,
    JobView,
    TriggerKind,
    trigger_after_edit,
    trigger_after_resume,
)
from kit.store.audit import KIT_ACTOR, RESUMED_TRIGGER, job_view
from kit.store.db import db_now, is_uuid
from kit.store.errors import IdempotencyConflict, JobLimitReached, JobNotFound, NameTaken
from kit.store.pg_async import (
    AsyncPool,
    Execute,
    Query,
    Steps,
    run_steps,
    run_steps_async,
    run_steps_in,
)
from kit.store.schema import jobs
from kit.store.tenants import tenant_check, tenant_upsert_in

_NAME_CONSTRAINT = "uq_jobs_tenant_name"


@dataclass(frozen=True)
class JobSpec:
    """A validated job as a client may set it (the API builds it from the request)."""

    name: str
    schedule: Schedule
    task: Mapping[str, Any]
    retry: Mapping[str, Any]  # RetryPolicy.to_dict()
    misfire: Mapping[str, Any]  # MisfirePolicy.to_dict()
    timeout_s: int = 3600
    overlap: str = "allow"
    priority: str = "normal"
    jitter_s: int = 0
    paused: bool = False
    # auto-pause after this many dead runs in a row (None: the operator's default; 0: never)
    pause_after_dead: int | None = None
    notify: Mapping[str, Any] | None = None  # the failure webhook (kit.core.notify)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    tenant: str
    spec: JobSpec
    version: int
    created_at: datetime
    updated_at: datetime
    next_fire_at: datetime | None  # the job's schedule trigger, None once a one-off fired
    durations: JobDurations | None = None  # how long its runs take (None: not measured)

    @property
    def status(self) -> str:
        if self.spec.paused:
            return "paused"
        return "active" if self.next_fire_at is not None else "finished"


@dataclass(frozen=True)
class JobDurations:
    """How long a job's recent runs took (kit.core.durations) and the lease its runs are
    claimed with (None: the fleet's default), as last measured (`measured_at`)."""

    p50_ms: int
    p99_ms: int
    samples: int
    lease_ttl_ms: int | None
    measured_at: datetime


def job_durations(row: Any) -> JobDurations | None:
    if getattr(row, "durations_at", None) is None:
        return None
    return JobDurations(
        row.duration_p50_ms,
        row.duration_p99_ms,
        row.duration_samples,
        row.lease_ttl_ms,
        row.durations_at,
    )


@dataclass(frozen=True)
class JobCreate:
    tenant: str
    spec: JobSpec
    partitions: int = PARTITION_COUNT
    idempotency_key: str | None = None
    request_hash: str | None = None  # request_fingerprint() of the body, with the key
    now: datetime | None = None  # None: the database's clock
    job_id: str | None = None  # None: a new uuid4
    actor: str = KIT_ACTOR  # who, for the audit log (the API: the caller's token id)
    max_jobs: int | None = None  # the operator's limit of the tenant's jobs (None: none)


@dataclass(frozen=True)
class JobCreated:
    job: JobRecord
    created: bool  # False: an idempotent replay returned the job created earlier


@dataclass(frozen=True)
class JobUpdate:
    tenant: str
    job_id: str
    changes: Mapping[str, Any] = field(default_factory=dict)  # JobSpec field -> new value
    partitions: int = PARTITION_COUNT
    now: datetime | None = None
    actor: str = KIT_ACTOR  # who, for the audit log (the API: the caller's token id)


def request_fingerprint(body: Any) -> str:
    """sha256 of canonical JSON: the same request body always gives the same hash."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def first_fire_at(
    spec: JobSpec,
    job_id: str,
    now: datetime,
    nominal_cache: dict[Schedule, datetime | None] | None = None,
) -> datetime | None:
    """When a new (or rescheduled) job's trigger fires: the next fire after `now`, moved by
    the job's deterministic jitter. A one-off time inside the creation grace (already
    past) fires at once rather than never; the API refuses older ones.

    `nominal_cache` shares next-fire computations across a batch with the same `now`
    (bulk loads repeat schedules, and a sub-hourly cron costs milliseconds to evaluate).
    """
    if isinstance(spec.schedule, OneOffSchedule):
        nominal: datetime | None = spec.schedule.at
    elif nominal_cache is not None:
        if spec.schedule not in nominal_cache:
            nominal_cache[spec.schedule] = next_fire(spec.schedule, now)
        nominal = nominal_cache[spec.schedule]
    else:
        nominal = next_fire(spec.schedule, now)
    if nominal is None:
        return None
    return nominal + timedelta(milliseconds=jitter_offset_ms(job_id, spec.jitter_s * 1000))


def _row_values(tenant: str, job_id: str, spec: JobSpec) -> dict[str, Any]:
    timezone = spec.schedule.timezone if isinstance(spec.schedule, CronSchedule) else "UTC"
    return {
        "job_id": job_id,
        "tenant": tenant,
        "name": spec.name,
        "schedule": schedule_to_dict(spec.schedule),
        "timezone": timezone,
        "task_spec": dict(spec.task),
        "retry_policy": dict(spec.retry),
        "timeout_s": spec.timeout_s,
        "overlap": spec.overlap,
        "misfire": dict(spec.misfire),
        "priority": spec.priority,
        "jitter_s": spec.jitter_s,
        "paused": spec.paused,
        "pause_after_dead": spec.pause_after_dead,
        "notify": None if spec.notify is None else dict(spec.notify),
    }


def _name_taken(exc: Exception, names: Sequence[str]) -> bool:
    """A unique violation of the job's name: psycopg's own error (the async driver) or
    SQLAlchemy's wrapping of it (on an Engine)."""
    orig = getattr(exc, "orig", exc)
    return (
        isinstance(orig, pg_errors.UniqueViolation)
        and orig.diag.constraint_name == _NAME_CONSTRAINT
        and bool(names)
    )


# ---------------------------------------------------------------------------
# The statements, in one place: the functions on an Engine and on the async pool run the
# same steps below, so the same text. Parameters are psycopg's named ones; `now` NULL is
# the database's clock.

_READ_COLUMNS = (
    "job_id",
    "tenant",
    "name",
    "schedule",
    "task_spec",
    "retry_policy",
    "timeout_s",
    "overlap",
    "misfire",
    "priority",
    "jitter_s",
    "paused",
    "pause_after_dead",
    "notify",
    "version",
    "created_at",
    "updated_at",
    "duration_p50_ms",
    "duration_p99_ms",
    "duration_samples",
    "lease_ttl_ms",
    "durations_at",
)
_JOB = ", ".join(f"j.{c}" for c in _READ_COLUMNS)
_RETURNING = ", ".join(_READ_COLUMNS)
_SCHEDULE = TriggerKind.schedule.value
# A schedule trigger's `limits_overlap`, from the job row written with it.
_LIMITS = f"j.overlap <> '{OverlapPolicy.allow.value}'"
_NOW = "coalesce(%(now)s::timestamptz, now())"

# A job with its next schedule fire (what JobRecord needs): a paused job's parked
# trigger (kit.store.scheduling._PARK_TRIGGERS) by the fire it waits at.
NEXT_FIRE_SQL = (
    "coalesce(min(t.fire_at) FILTER (WHERE t.parked_fire_at IS NULL), min(t.parked_fire_at))"
)
JOB_READ_SQL = f"""
SELECT {_JOB}, (SELECT {NEXT_FIRE_SQL} FROM triggers AS t
        WHERE t.job_id = j.job_id AND t.kind = '{_SCHEDULE}') AS next_fire_at
FROM jobs AS j
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid"""

# The same, locked for an edit or a delete, with the instant the transaction decides at.
JOB_LOCK_SQL = (
    JOB_READ_SQL.replace(" AS next_fire_at\n", f" AS next_fire_at, {_NOW} AS db_now\n")
    + "\nFOR UPDATE OF j"
)

DB_NOW_SQL = "SELECT now() AS db_now"

# A new job with its tenant (if new), its first trigger (if it has a fire) and its
# audit entry: one statement, so all of it or none (a taken name writes nothing).
JOB_INSERT_SQL = f"""
WITH new_tenant AS (
    INSERT INTO tenants (tenant) VALUES (%(tenant)s) ON CONFLICT DO NOTHING
), j AS (
    INSERT INTO jobs (job_id, tenant, name, schedule, timezone, task_spec, retry_policy,
        timeout_s, overlap, misfire, priority, jitter_s, paused, pause_after_dead, notify,
        created_at, updated_at)
    VALUES (%(job_id)s::uuid, %(tenant)s, %(name)s, %(schedule)s, %(timezone)s,
        %(task_spec)s, %(retry_policy)s, %(timeout_s)s, %(overlap)s, %(misfire)s,
        %(priority)s, %(jitter_s)s, %(paused)s, %(pause_after_dead)s, %(notify)s,
        coalesce(%(created_at)s::timestamptz, now()),
        coalesce(%(created_at)s::timestamptz, now()))
    RETURNING {_RETURNING}
), new_trigger AS (
    INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, attempt,
        limits_overlap)
    SELECT %(partition_id)s, %(fire_at)s::timestamptz, j.job_id, j.version, '{_SCHEDULE}', 1,
        {_LIMITS}
    FROM j WHERE %(fire_at)s::timestamptz IS NOT NULL
), audit AS (
    INSERT INTO job_audit (tenant, job_id, actor, action, at, version, changes, snapshot)
    SELECT j.tenant, j.job_id, %(actor)s, '{AuditAction.create.value}', %(at)s, j.version,
        %(changes)s, %(snapshot)s
    FROM j
)
SELECT {_JOB}, %(fire_at)s::timestamptz AS next_fire_at FROM j"""

# An edit: the job's new values and version, its audit entry, and its schedule trigger
# replaced by one of the new version (retry triggers stay: they are owed to runs that
# already fired, and the scheduler re-arms them under the new version). The new trigger
# is an upsert and the delete spares its key: one statement may not delete and insert
# the same key (an unchanged fire time, as a pause keeps).
JOB_UPDATE_SQL = f"""
WITH j AS (
    UPDATE jobs SET name = %(name)s, schedule = %(schedule)s, timezone = %(timezone)s,
        task_spec = %(task_spec)s, retry_policy = %(retry_policy)s,
        timeout_s = %(timeout_s)s, overlap = %(overlap)s, misfire = %(misfire)s,
        priority = %(priority)s, jitter_s = %(jitter_s)s, paused = %(paused)s,
        pause_after_dead = %(pause_after_dead)s, notify = %(notify)s, version = %(version)s,
        updated_at = %(at)s,
        dead_streak = CASE WHEN %(reset_dead_streak)s THEN 0 ELSE dead_streak END
    WHERE job_id = %(job_id)s::uuid
    RETURNING {_RETURNING}
), audit AS (
    INSERT INTO job_audit (tenant, job_id, actor, action, at, version, changes, snapshot)
    SELECT j.tenant, j.job_id, %(actor)s, %(action)s, %(at)s, j.version, %(changes)s,
        %(snapshot)s
    FROM j
), old_triggers AS (
    DELETE FROM triggers
    WHERE job_id = %(job_id)s::uuid AND kind <> '{TriggerKind.retry.value}'
        AND (kind, partition_id, fire_at) IS DISTINCT FROM
            ('{_SCHEDULE}', %(partition_id)s::smallint, %(fire_at)s::timestamptz)
), new_trigger AS (
    INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, attempt,
        limits_overlap)
    SELECT %(partition_id)s, %(fire_at)s::timestamptz, j.job_id, j.version, '{_SCHEDULE}', 1,
        {_LIMITS}
    FROM j WHERE %(fire_at)s::timestamptz IS NOT NULL
    ON CONFLICT (partition_id, fire_at, job_id, kind) DO UPDATE
        SET job_version = EXCLUDED.job_version, attempt = EXCLUDED.attempt,
            run_scheduled_at = NULL, parked_fire_at = NULL,
            limits_overlap = EXCLUDED.limits_overlap
)
SELECT {_JOB}, %(fire_at)s::timestamptz AS next_fire_at FROM j"""

# A fire the job owed that an edit skips: a skipped run (its own run id) says why.
RUN_SKIPPED_SQL = f"""
INSERT INTO runs (run_id, job_id, tenant, job_version, priority, scheduled_at, attempt,
    status, trigger_kind, skip_reason, finished_at)
VALUES (%(run_id)s::uuid, %(job_id)s::uuid, %(tenant)s, %(version)s, %(priority)s,
    %(scheduled_at)s, 1, '{RunStatus.skipped.value}', '{_SCHEDULE}', %(reason)s, %(at)s)
ON CONFLICT (run_id) DO NOTHING"""

# A delete: the job and its triggers go, its audit entry is written, and its runs owed
# but not started are cancelled (their history says why rather than wait for a trigger
# that no longer exists). Its runs and its audit log stay.
_OWED = ", ".join(f"'{s.value}'" for s in (RunStatus.pending, RunStatus.retry_scheduled))
JOB_DELETE_SQL = f"""
WITH j AS (
    DELETE FROM jobs WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid
), audit AS (
    INSERT INTO job_audit (tenant, job_id, actor, action, at, version, changes, snapshot)
    VALUES (%(tenant)s, %(job_id)s::uuid, %(actor)s, '{AuditAction.delete.value}', %(at)s,
        %(version)s, %(changes)s, NULL)
), old_triggers AS (
    DELETE FROM triggers WHERE job_id = %(job_id)s::uuid
)
UPDATE runs SET status = '{RunStatus.cancelled.value}', error = 'job deleted',
    lease_token = NULL
WHERE job_id = %(job_id)s::uuid AND status IN ({_OWED})"""

# An Idempotency-Key taken for the request about to be served (`claimed`), with the
# transaction's clock; or, taken before, its earlier use.
IDEMPOTENCY_CLAIM_SQL = """
WITH claimed AS (
    INSERT INTO idempotency_keys (tenant, key, request_hash, job_id, created_at)
    VALUES (%(tenant)s, %(key)s, %(request_hash)s, %(job_id)s::uuid,
        coalesce(%(created_at)s::timestamptz, now()))
    ON CONFLICT DO NOTHING
    RETURNING key
)
SELECT EXISTS (SELECT FROM claimed) AS claimed, now() AS db_now"""

IDEMPOTENCY_EARLIER_SQL = """
SELECT request_hash, job_id, created_at FROM idempotency_keys
WHERE tenant = %(tenant)s AND key = %(key)s"""


def _job_values(tenant: str, job_id: str, spec: JobSpec) -> dict[str, Any]:
    """A job's columns as the statements' parameters (JSON columns as jsonb)."""
    values = _row_values(tenant, job_id, spec)
    for column in _JSON_COLUMNS:
        values[column] = _jsonb(values[column])
    return values


def _jsonb(value: Any) -> Any:
    """A JSON column's parameter; None stays SQL NULL (Jsonb(None) is JSON null)."""
    return None if value is None else Jsonb(value)


# ---------------------------------------------------------------------------
# The operations, as steps (kit.store.pg_async).


def _read(tenant: str, job_id: str) -> Steps[JobRecord | None]:
    if not is_uuid(job_id):
        return None
    rows = yield Query(JOB_READ_SQL, {"tenant": tenant, "job_id": job_id})
    return job_record(rows[0]) if rows else None


def _read_locked(
    tenant: str, job_id: str, now: datetime | None
) -> Steps[tuple[JobRecord, datetime]]:
    """The job locked FOR UPDATE (JobNotFound if the tenant has none), and the instant
    the transaction decides at."""
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    rows = yield Query(JOB_LOCK_SQL, {"tenant": tenant, "job_id": job_id, "now": now})
    if not rows:
        raise JobNotFound(job_id)
    return job_record(rows[0]), rows[0].db_now


def _claim_key(
    tenant: str, key: str, request_hash: str, job_id: str, created_at: datetime | None = None
) -> Steps[tuple[Any | None, datetime]]:
    """(None, now): the key is now this request's. (earlier, now): the row of its
    earlier use (`job_id`, `created_at`); IdempotencyConflict if that was another
    request. `now` is the transaction's clock.

    A concurrent request with the same key blocks on the insert until the first one
    commits or rolls back, so two retries cannot both act."""
    args = {
        "tenant": tenant,
        "key": key,
        "request_hash": request_hash,
        "job_id": job_id,
        "created_at": created_at,
    }
    for _ in range(3):  # the earlier key may expire (maintenance) between the two reads
        (claim,) = (yield Query(IDEMPOTENCY_CLAIM_SQL, args)) or ()
        if claim.claimed:
            return None, claim.db_now
        rows = yield Query(IDEMPOTENCY_EARLIER_SQL, {"tenant": tenant, "key": key})
        if rows:
            earlier = rows[0]
            break
    else:  # pragma: no cover - the key appears and expires three times in a row
        raise IdempotencyConflict("this Idempotency-Key is being expired; retry the request")
    if earlier.request_hash != request_hash:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body"
        )
    return earlier, claim.db_now


def _create(params: JobCreate, job_id: str) -> Steps[JobCreated]:
    tenant_check(params.tenant)
    now = params.now
    db_clock: datetime | None = None
    if params.idempotency_key is not None:
        earlier, db_clock = yield from _claim_key(
            params.tenant, params.idempotency_key, params.request_hash or "", job_id
        )
        if earlier is not None:
            record = yield from _read(params.tenant, str(earlier.job_id))
            if record is None:
                raise IdempotencyConflict(
                    "the job created with this Idempotency-Key has been deleted"
                )
            return JobCreated(record, created=False)
    if params.max_jobs is not None:
        yield from _within_max_jobs(params.tenant, params.max_jobs, 1)
    if now is None:
        if db_clock is None:
            (row,) = (yield Query(DB_NOW_SQL, {})) or ()
            db_clock = row.db_now
        now = db_clock
    fire_at = first_fire_at(params.spec, job_id, now)
    view = job_view(params.spec)
    (row,) = (
        yield Query(
            JOB_INSERT_SQL,
            {
                **_job_values(params.tenant, job_id, params.spec),
                # the job's creation is the decision's instant (the database's clock);
                # an explicit `now` (tests) decides the trigger and the audit only
                "created_at": db_clock if params.now is None else None,
                "partition_id": partition_of(job_id, params.partitions),
                "fire_at": fire_at,
                "actor": params.actor,
                "at": now,
                "changes": Jsonb(job_diff(None, view)),
                "snapshot": Jsonb(redacted(view)),
            },
        )
    ) or ()
    return JobCreated(job_record(row), created=True)


# The operator's max_jobs: creates of one tenant take this lock in turn for the rest of
# their transaction, so the count each reads includes every create committed before it
# (two creates cannot both pass the last free place).
MAX_JOBS_LOCK_SQL = (
    "SELECT pg_advisory_xact_lock(hashtextextended('cronfleet.max_jobs:' || %(tenant)s, 0))"
)
JOB_COUNT_SQL = "SELECT count(*) AS n FROM jobs WHERE tenant = %(tenant)s"


def _within_max_jobs(tenant: str, limit: int, adding: int) -> Steps[None]:
    """JobLimitReached if `adding` jobs would take the tenant past `limit`; inside the
    create's transaction (the lock holds until it ends)."""
    yield Execute(MAX_JOBS_LOCK_SQL, {"tenant": tenant})
    (row,) = (yield Query(JOB_COUNT_SQL, {"tenant": tenant})) or ()
    if row.n + adding > limit:
        raise JobLimitReached(row.n, limit, adding)


def _update(params: JobUpdate) -> Steps[JobRecord]:
    """Apply changes, bump the version, and replace the triggers with one of the new
    version; see job_update."""
    current, now = yield from _read_locked(params.tenant, params.job_id, params.now)
    spec = replace(current.spec, **dict(params.changes))
    skipped_at: datetime | None = None
    if spec.schedule != current.spec.schedule or spec.jitter_s != current.spec.jitter_s:
        old = current.next_fire_at
        moved = trigger_after_edit(
            None if old is None else to_epoch_ms(old),
            jitter_offset_ms(params.job_id, current.spec.jitter_s * 1000),
            spec.schedule,
            jitter_offset_ms(params.job_id, spec.jitter_s * 1000),
            to_epoch_ms(now),
        )
        if moved.fire_at_ms is not None:
            fire_at: datetime | None = from_epoch_ms(moved.fire_at_ms)
        else:
            fire_at = first_fire_at(spec, params.job_id, now)
        if moved.skipped_ms is not None:
            skipped_at = from_epoch_ms(moved.skipped_ms)
    elif current.spec.paused and not spec.paused:
        fire_at = _resumed_fire_at(current, spec, now)
    else:
        fire_at = current.next_fire_at  # a paused job's trigger: the scan parks it again
    before, after = job_view(current.spec), job_view(spec)
    diff = job_diff(before, after)
    action = edit_action(diff)
    if current.spec.paused and not spec.paused and current.next_fire_at is not None:
        # what explain needs to know which fires the pause passed over (kit.core.owed)
        diff[RESUMED_TRIGGER] = {
            "from": current.next_fire_at.isoformat(),
            "to": None if fire_at is None else fire_at.isoformat(),
        }
    (row,) = (
        yield Query(
            JOB_UPDATE_SQL,
            {
                **_job_values(params.tenant, params.job_id, spec),
                "version": current.version + 1,
                # a resumed job starts a new auto-pause streak
                "reset_dead_streak": current.spec.paused and not spec.paused,
                "actor": params.actor,
                "action": action,
                "at": now,
                "changes": Jsonb(diff),
                "snapshot": Jsonb(redacted(after)),
                "partition_id": partition_of(params.job_id, params.partitions),
                "fire_at": fire_at,
            },
        )
    ) or ()
    if skipped_at is not None:
        yield Execute(
            RUN_SKIPPED_SQL,
            {
                "run_id": make_run_id(current.job_id, skipped_at),
                "job_id": current.job_id,
                "tenant": current.tenant,
                "version": current.version,
                "priority": current.spec.priority,
                "scheduled_at": skipped_at,
                "reason": SKIP_EDITED,
                "at": now,
            },
        )
    return job_record(row)


def _resumed_fire_at(current: JobRecord, spec: JobSpec, now: datetime) -> datetime | None:
    """Where a resumed job's trigger goes: the fires it owed while paused, from the one
    its trigger waits at, go through its misfire policy (kit.core.trigger.
    trigger_after_resume); the ones passed over are written nowhere (explain)."""
    if current.next_fire_at is None:
        return None
    view = JobView(
        job_id=current.job_id,
        version=current.version + 1,
        schedule=spec.schedule,
        jitter_offset_ms=jitter_offset_ms(current.job_id, spec.jitter_s * 1000),
        misfire=MisfirePolicy.parse(dict(spec.misfire)),
    )
    resumed = trigger_after_resume(to_epoch_ms(current.next_fire_at), view, to_epoch_ms(now))
    return None if resumed is None else from_epoch_ms(resumed)


def _delete(tenant: str, job_id: str, actor: str) -> Steps[None]:
    current, now = yield from _read_locked(tenant, job_id, None)
    yield Execute(
        JOB_DELETE_SQL,
        {
            "tenant": tenant,
            "job_id": job_id,
            "actor": actor,
            "at": now,
            "version": current.version,
            "changes": Jsonb(job_diff(job_view(current.spec), None)),
        },
    )


# ---------------------------------------------------------------------------
# The API of this module: each operation on an Engine and on an AsyncPool (the HTTP
# API's), the same steps under both.


def job_create(engine: Engine, params: JobCreate) -> JobCreated:
    """Write the job and its first trigger in one transaction, or return the job an
    earlier request with the same Idempotency-Key created."""
    job_id = params.job_id or str(uuid.uuid4())
    try:
        return run_steps(engine, _create(params, job_id), atomic=_create_atomic(params))
    except IntegrityError as exc:
        if _name_taken(exc, [params.spec.name]):
            raise NameTaken([params.spec.name]) from exc
        raise


async def job_create_async(pool: AsyncPool, params: JobCreate) -> JobCreated:
    job_id = params.job_id or str(uuid.uuid4())
    try:
        return await run_steps_async(pool, _create(params, job_id), atomic=_create_atomic(params))
    except pg_errors.UniqueViolation as exc:
        if _name_taken(exc, [params.spec.name]):
            raise NameTaken([params.spec.name]) from exc
        raise


def _create_atomic(params: JobCreate) -> bool:
    """Without an Idempotency-Key a create is a read of the clock and one statement that
    writes everything: no transaction of its own is needed. With one, the key's claim
    and the job are one transaction, as are the operator's max_jobs check and the job."""
    return params.idempotency_key is not None or params.max_jobs is not None


def idempotency_key_claim(
    conn: Connection,
    tenant: str,
    key: str,
    request_hash: str,
    job_id: str,
    created_at: datetime | None = None,
) -> Any | None:
    """Insert the key for the request about to be served (None), or return the row of
    its earlier use (`job_id`, `created_at`); IdempotencyConflict if that use was another
    request. Job creates and run-nows share the tenant's keys; inside the caller's
    transaction."""
    earlier, _ = run_steps_in(conn, _claim_key(tenant, key, request_hash, job_id, created_at))
    return earlier


def jobs_create_batch(
    engine: Engine,
    tenant: str,
    specs: Sequence[JobSpec],
    partitions: int = PARTITION_COUNT,
    now: datetime | None = None,
    actor: str | None = None,
    max_jobs: int | None = None,
) -> list[str]:
    """Create many jobs and their triggers with COPY, all or nothing; returns job ids in
    the order of `specs`. Names must be unique within the batch and the tenant. With an
    `actor` (the API's caller) each creation is audited; bulk loads pass none. With
    `max_jobs`, a batch that would take the tenant past it raises JobLimitReached and
    writes nothing."""
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        dupes = [n for n in names if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
        raise NameTaken(sorted(set(dupes)))
    job_ids = [str(uuid.uuid4()) for _ in specs]
    try:
        with engine.begin() as conn:
            tenant_upsert_in(conn, tenant)
            if max_jobs is not None:
                run_steps_in(conn, _within_max_jobs(tenant, max_jobs, len(specs)))
            taken = conn.execute(
                select(jobs.c.name).where(jobs.c.tenant == tenant, jobs.c.name.in_(names))
            ).scalars()
            taken_names = sorted(taken)
            if taken_names:
                raise NameTaken(taken_names)
            now_at = db_now(conn, now)
            _copy_jobs(conn, tenant, job_ids, specs, partitions, now_at)
            if actor is not None:
                _copy_audit(conn, tenant, job_ids, specs, now_at, actor)
    except IntegrityError as exc:
        if _name_taken(exc, names):
            raise NameTaken(names) from exc
        raise
    return job_ids


_JOB_COLUMNS = (
    "job_id",
    "tenant",
    "name",
    "schedule",
    "timezone",
    "task_spec",
    "retry_policy",
    "timeout_s",
    "overlap",
    "misfire",
    "priority",
    "jitter_s",
    "paused",
    "pause_after_dead",
    "notify",
    "version",
    "created_at",
    "updated_at",
)
_JSON_COLUMNS = {"schedule", "task_spec", "retry_policy", "misfire", "notify"}


def _copy_jobs(
    conn: Connection,
    tenant: str,
    job_ids: Sequence[str],
    specs: Sequence[JobSpec],
    partitions: int,
    now: datetime,
) -> None:
    """COPY into jobs, then triggers, on the transaction's own connection."""
    raw = conn.connection.dbapi_connection
    assert raw is not None
    with raw.cursor() as cur:
        with cur.copy(f"COPY jobs ({', '.join(_JOB_COLUMNS)}) FROM STDIN") as copy:
            for job_id, spec in zip(job_ids, specs, strict=True):
                values = _row_values(tenant, job_id, spec)
                values.update(version=1, created_at=now, updated_at=now)
                copy.write_row(
                    [_jsonb(values[c]) if c in _JSON_COLUMNS else values[c] for c in _JOB_COLUMNS]
                )
        with cur.copy(
            "COPY triggers (partition_id, fire_at, job_id, job_version, kind, attempt,"
            " limits_overlap) FROM STDIN"
        ) as copy:
            nominal_cache: dict[Schedule, datetime | None] = {}
            for job_id, spec in zip(job_ids, specs, strict=True):
                fire_at = first_fire_at(spec, job_id, now, nominal_cache)
                if fire_at is not None:
                    part = partition_of(job_id, partitions)
                    limits = spec.overlap != OverlapPolicy.allow.value
                    copy.write_row((part, fire_at, job_id, 1, "schedule", 1, limits))


def _copy_audit(
    conn: Connection,
    tenant: str,
    job_ids: Sequence[str],
    specs: Sequence[JobSpec],
    now: datetime,
    actor: str,
) -> None:
    """One 'create' audit entry per job of a batch, by COPY like the jobs themselves."""
    raw = conn.connection.dbapi_connection
    assert raw is not None
    columns = "tenant, job_id, at, actor, action, version, changes, snapshot"
    with (
        raw.cursor() as cur,
        cur.copy(f"COPY job_audit ({columns}) FROM STDIN") as copy,
    ):
        for job_id, spec in zip(job_ids, specs, strict=True):
            view = job_view(spec)
            diff = job_diff(None, view)
            copy.write_row(
                (tenant, job_id, now, actor, "create", 1, Jsonb(diff), Jsonb(redacted(view)))
            )


@functools.lru_cache(maxsize=4096)
def _stored_schedule(text: str, anchor_default: datetime) -> Schedule:
    """Stored schedules were validated on write; parse them back without a grace check.
    Cached: a page of jobs repeats schedules, and a cron costs ~0.3 ms to validate."""
    return parse_schedule(json.loads(text), now=anchor_default)


def job_record(row: Any) -> JobRecord:
    data = dict(row.schedule)
    # Only an interval without an anchor depends on when the job was made.
    needs_anchor = "every_s" in data and "anchor" not in data
    text = json.dumps(data, sort_keys=True)
    schedule = _stored_schedule(text, row.created_at if needs_anchor else EPOCH)
    spec = JobSpec(
        name=row.name,
        schedule=schedule,
        task=row.task_spec,
        retry=row.retry_policy,
        misfire=row.misfire,
        timeout_s=row.timeout_s,
        overlap=row.overlap,
        priority=row.priority,
        jitter_s=row.jitter_s,
        paused=row.paused,
        pause_after_dead=row.pause_after_dead,
        notify=row.notify,
    )
    return JobRecord(
        job_id=str(row.job_id),
        tenant=row.tenant,
        spec=spec,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        next_fire_at=row.next_fire_at,
        durations=job_durations(row),
    )


def job_read_in(conn: Connection, tenant: str, job_id: str, lock: bool = False) -> JobRecord | None:
    """The tenant's job inside the caller's transaction (locked FOR UPDATE if asked)."""
    if not lock:
        return run_steps_in(conn, _read(tenant, job_id))
    try:
        record, _ = run_steps_in(conn, _read_locked(tenant, job_id, None))
    except JobNotFound:
        return None
    return record


def job_get(engine: Engine, tenant: str, job_id: str) -> JobRecord:
    record = run_steps(engine, _read(tenant, job_id), atomic=False)
    if record is None:
        raise JobNotFound(job_id)
    return record


async def job_get_async(pool: AsyncPool, tenant: str, job_id: str) -> JobRecord:
    record = await run_steps_async(pool, _read(tenant, job_id), atomic=False)
    if record is None:
        raise JobNotFound(job_id)
    return record


def job_update(engine: Engine, params: JobUpdate) -> JobRecord:
    """Apply changes, bump the version, and replace the triggers with one of the new version.

    The schedule trigger keeps its fire time unless the schedule or jitter changed
    (then kit.core.trigger.trigger_after_edit decides: a fire owed but not yet made
    still runs, or is recorded as skipped 'edited'); a one-off that already fired stays
    fired.
    """
    try:
        return run_steps(engine, _update(params))
    except IntegrityError as exc:
        name = params.changes.get("name")
        if name is not None and _name_taken(exc, [name]):
            raise NameTaken([name]) from exc
        raise


async def job_update_async(pool: AsyncPool, params: JobUpdate) -> JobRecord:
    try:
        return await run_steps_async(pool, _update(params))
    except pg_errors.UniqueViolation as exc:
        name = params.changes.get("name")
        if name is not None and _name_taken(exc, [name]):
            raise NameTaken([name]) from exc
        raise


def job_delete(engine: Engine, tenant: str, job_id: str, actor: str = KIT_ACTOR) -> None:
    """Remove the job and its triggers; its runs and its audit log stay as history."""
    run_steps(engine, _delete(tenant, job_id, actor))


async def job_delete_async(
    pool: AsyncPool, tenant: str, job_id: str, actor: str = KIT_ACTOR
) -> None:
    await run_steps_async(pool, _delete(tenant, job_id, actor))

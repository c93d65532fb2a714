"""The job repository: a job and its trigger are always written in one transaction.

An edit bumps `version` and replaces the job's triggers with one of the new version, so a
trigger of an older version cannot fire. Deleting a job removes its triggers and keeps
its run history. A paused job keeps its trigger: the scheduler skips the fire and says why.
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
from sqlalchemy import Connection, Engine, bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError

from kit.core.audit import edit_action, job_diff, redacted
from kit.core.ids import run_id as make_run_id
from kit.core.jitter import jitter_offset_ms
from kit.core.partitions import PARTITION_COUNT, partition_of
from kit.core.schedule import (
    CronSchedule,
    OneOffSchedule,
    Schedule,
    next_fire,
    parse_schedule,
    schedule_to_dict,
)
from kit.core.timeutil import EPOCH, from_epoch_ms, to_epoch_ms
from kit.core.trigger import SKIP_EDITED, trigger_after_edit
from kit.store.audit import KIT_ACTOR, audit_change_in, job_view
from kit.store.db import db_now, is_uuid
from kit.store.errors import IdempotencyConflict, JobNotFound, NameTaken
from kit.store.schema import idempotency_keys, jobs, runs, triggers
from kit.store.tenants import tenant_upsert_in

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
    pause_after_dead: int | None = None  # auto-pause after this many dead runs in a row


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    tenant: str
    spec: JobSpec
    version: int
    created_at: datetime
    updated_at: datetime
    next_fire_at: datetime | None  # the job's schedule trigger, None once a one-off fired

    @property
    def status(self) -> str:
        if self.spec.paused:
            return "paused"
        return "active" if self.next_fire_at is not None else "finished"


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
    }


def _name_taken(exc: IntegrityError, names: Sequence[str]) -> bool:
    orig = exc.orig
    return (
        isinstance(orig, pg_errors.UniqueViolation)
        and orig.diag.constraint_name == _NAME_CONSTRAINT
        and bool(names)
    )


def job_create(engine: Engine, params: JobCreate) -> JobCreated:
    """Write the job and its first trigger in one transaction, or return the job an
    earlier request with the same Idempotency-Key created."""
    job_id = params.job_id or str(uuid.uuid4())
    try:
        with engine.begin() as conn:
            if params.idempotency_key is not None:
                earlier = _claim_idempotency_key(conn, params, job_id)
                if earlier is not None:
                    return JobCreated(earlier, created=False)
            tenant_upsert_in(conn, params.tenant)
            now = db_now(conn, params.now)
            conn.execute(jobs.insert().values(**_row_values(params.tenant, job_id, params.spec)))
            fire_at = first_fire_at(params.spec, job_id, now)
            if fire_at is not None:
                conn.execute(
                    triggers.insert().values(
                        partition_id=partition_of(job_id, params.partitions),
                        fire_at=fire_at,
                        job_id=job_id,
                        job_version=1,
                        kind="schedule",
                        attempt=1,
                    )
                )
            audit_change_in(
                conn,
                tenant=params.tenant,
                job_id=job_id,
                actor=params.actor,
                action="create",
                at=now,
                version=1,
                before=None,
                after=job_view(params.spec),
            )
            record = _job_select(conn, params.tenant, job_id)
    except IntegrityError as exc:
        if _name_taken(exc, [params.spec.name]):
            raise NameTaken([params.spec.name]) from exc
        raise
    assert record is not None
    return JobCreated(record, created=True)


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
    request. Job creates and run-nows share the tenant's keys.

    A concurrent request with the same key blocks on the insert until the first one
    commits or rolls back, so two retries cannot both act.
    """
    values: dict[str, Any] = {
        "tenant": tenant,
        "key": key,
        "request_hash": request_hash,
        "job_id": job_id,
    }
    if created_at is not None:
        values["created_at"] = created_at
    for _ in range(3):  # the earlier key may expire (maintenance) between the two reads
        claimed = conn.execute(
            insert(idempotency_keys)
            .values(**values)
            .on_conflict_do_nothing()
            .returning(idempotency_keys.c.key)
        ).first()
        if claimed is not None:
            return None
        earlier = conn.execute(
            select(
                idempotency_keys.c.request_hash,
                idempotency_keys.c.job_id,
                idempotency_keys.c.created_at,
            ).where(idempotency_keys.c.tenant == tenant, idempotency_keys.c.key == key)
        ).first()
        if earlier is not None:
            break
    else:  # pragma: no cover - the key appears and expires three times in a row
        raise IdempotencyConflict("this Idempotency-Key is being expired; retry the request")
    if earlier.request_hash != request_hash:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body"
        )
    return earlier


def _claim_idempotency_key(conn: Connection, params: JobCreate, job_id: str) -> JobRecord | None:
    """Insert the key (it names the job about to be created), or resolve an earlier use."""
    earlier = idempotency_key_claim(
        conn, params.tenant, params.idempotency_key or "", params.request_hash or "", job_id
    )
    if earlier is None:
        return None
    record = _job_select(conn, params.tenant, earlier.job_id)
    if record is None:
        raise IdempotencyConflict("the job created with this Idempotency-Key has been deleted")
    return record


def jobs_create_batch(
    engine: Engine,
    tenant: str,
    specs: Sequence[JobSpec],
    partitions: int = PARTITION_COUNT,
    now: datetime | None = None,
    actor: str | None = None,
) -> list[str]:
    """Create many jobs and their triggers with COPY, all or nothing; returns job ids in
    the order of `specs`. Names must be unique within the batch and the tenant. With an
    `actor` (the API's caller) each creation is audited; bulk loads pass none."""
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        dupes = [n for n in names if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
        raise NameTaken(sorted(set(dupes)))
    job_ids = [str(uuid.uuid4()) for _ in specs]
    try:
        with engine.begin() as conn:
            tenant_upsert_in(conn, tenant)
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
    "version",
    "created_at",
    "updated_at",
)
_JSON_COLUMNS = {"schedule", "task_spec", "retry_policy", "misfire"}


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
                    [Jsonb(values[c]) if c in _JSON_COLUMNS else values[c] for c in _JOB_COLUMNS]
                )
        with cur.copy(
            "COPY triggers (partition_id, fire_at, job_id, job_version, kind, attempt) FROM STDIN"
        ) as copy:
            nominal_cache: dict[Schedule, datetime | None] = {}
            for job_id, spec in zip(job_ids, specs, strict=True):
                fire_at = first_fire_at(spec, job_id, now, nominal_cache)
                if fire_at is not None:
                    copy.write_row(
                        (partition_of(job_id, partitions), fire_at, job_id, 1, "schedule", 1)
                    )


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


def _job_select_statements() -> tuple[Any, Any]:
    """A job with its next schedule fire, read and read-for-update: built once (a
    statement built per call cost its construction and its cache key every time: the
    jobs API's largest share of CPU, profiled in issue 16)."""
    next_fire_at = (
        select(func.min(triggers.c.fire_at))
        .where(triggers.c.job_id == jobs.c.job_id, triggers.c.kind == "schedule")
        .scalar_subquery()
    )
    query = select(jobs, next_fire_at.label("next_fire_at")).where(
        jobs.c.tenant == bindparam("tenant"), jobs.c.job_id == bindparam("job_id")
    )
    return query, query.with_for_update(of=jobs)


_JOB_SELECT, _JOB_SELECT_FOR_UPDATE = _job_select_statements()


def _job_select(conn: Connection, tenant: str, job_id: str, lock: bool = False) -> JobRecord | None:
    query = _JOB_SELECT_FOR_UPDATE if lock else _JOB_SELECT
    row = conn.execute(query, {"tenant": tenant, "job_id": job_id}).first()
    return job_record(row) if row is not None else None


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
    )
    return JobRecord(
        job_id=str(row.job_id),
        tenant=row.tenant,
        spec=spec,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        next_fire_at=row.next_fire_at,
    )


def job_read_in(conn: Connection, tenant: str, job_id: str, lock: bool = False) -> JobRecord | None:
    """The tenant's job inside the caller's transaction (locked FOR UPDATE if asked)."""
    if not is_uuid(job_id):
        return None
    return _job_select(conn, tenant, job_id, lock=lock)


def job_get(engine: Engine, tenant: str, job_id: str) -> JobRecord:
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    with engine.begin() as conn:
        record = _job_select(conn, tenant, job_id)
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
    if not is_uuid(params.job_id):
        raise JobNotFound(params.job_id)
    try:
        with engine.begin() as conn:
            current = _job_select(conn, params.tenant, params.job_id, lock=True)
            if current is None:
                raise JobNotFound(params.job_id)
            spec = replace(current.spec, **dict(params.changes))
            version = current.version + 1
            now = db_now(conn, params.now)
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
            else:
                fire_at = current.next_fire_at
            values = _row_values(params.tenant, params.job_id, spec)
            values.update(version=version, updated_at=now)
            if current.spec.paused and not spec.paused:
                values["dead_streak"] = 0  # a resumed job starts a new auto-pause streak
            conn.execute(update(jobs).where(jobs.c.job_id == params.job_id).values(**values))
            before, after = job_view(current.spec), job_view(spec)
            audit_change_in(
                conn,
                tenant=params.tenant,
                job_id=params.job_id,
                actor=params.actor,
                action=edit_action(job_diff(before, after)),
                at=now,
                version=version,
                before=before,
                after=after,
            )
            # Replace the schedule trigger; retry triggers are owed to runs that already
            # fired and survive the edit (the scheduler re-arms them under the new version).
            conn.execute(
                delete(triggers).where(
                    triggers.c.job_id == params.job_id, triggers.c.kind != "retry"
                )
            )
            if fire_at is not None:
                conn.execute(
                    triggers.insert().values(
                        partition_id=partition_of(params.job_id, params.partitions),
                        fire_at=fire_at,
                        job_id=params.job_id,
                        job_version=version,
                        kind="schedule",
                        attempt=1,
                    )
                )
            if skipped_at is not None:
                _record_skipped(conn, current, skipped_at, now, SKIP_EDITED)
            record = _job_select(conn, params.tenant, params.job_id)
    except IntegrityError as exc:
        name = params.changes.get("name")
        if name is not None and _name_taken(exc, [name]):
            raise NameTaken([name]) from exc
        raise
    assert record is not None
    return record


def _record_skipped(
    conn: Connection, job: JobRecord, at: datetime, now: datetime, reason: str
) -> None:
    """A fire the job owed that will not run: a skipped run (its own run id) says why."""
    conn.execute(
        insert(runs)
        .values(
            run_id=make_run_id(job.job_id, at),
            job_id=job.job_id,
            tenant=job.tenant,
            job_version=job.version,
            priority=job.spec.priority,
            scheduled_at=at,
            attempt=1,
            status="skipped",
            trigger_kind="schedule",
            skip_reason=reason,
            finished_at=now,
        )
        .on_conflict_do_nothing(index_elements=[runs.c.run_id])
    )


def job_delete(engine: Engine, tenant: str, job_id: str, actor: str = KIT_ACTOR) -> None:
    """Remove the job and its triggers; its runs and its audit log stay as history."""
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    with engine.begin() as conn:
        current = _job_select(conn, tenant, job_id, lock=True)
        if current is None:
            raise JobNotFound(job_id)
        conn.execute(delete(jobs).where(jobs.c.tenant == tenant, jobs.c.job_id == job_id))
        audit_change_in(
            conn,
            tenant=tenant,
            job_id=job_id,
            actor=actor,
            action="delete",
            at=db_now(conn),
            version=current.version,
            before=job_view(current.spec),
            after=None,
        )
        conn.execute(delete(triggers).where(triggers.c.job_id == job_id))
        # Runs owed but not started will not run now: say so in their history rather
        # than leave them waiting for a trigger that no longer exists.
        conn.execute(
            update(runs)
            .where(
                runs.c.job_id == job_id,
                runs.c.status.in_(("pending", "retry_scheduled")),
            )
            .values(status="cancelled", error="job deleted", lease_token=None)
        )

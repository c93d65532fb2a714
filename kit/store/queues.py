"""The task queue for outside, pull-based workers, on PostgreSQL.

Every decision (may this token act, lease or dead-letter, when is the retry) is made by
kit.core.queue_task on the row read under `FOR UPDATE`; this module only reads and
writes. Time is the database's (`now()` of the transaction) unless a caller passes
`now` (tests, the model). Concurrent lessees lock candidate rows with `FOR UPDATE SKIP
LOCKED`, so two of them never get the same task and neither waits for the other.
"""

from __future__ import annotations

import random
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, DateTime, Engine, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert

from kit.core.queue_task import (
    LEASABLE,
    QueueTask,
    TaskStatus,
    TaskTransition,
    ack_task,
    heartbeat_task,
    lease_task,
    nack_task,
)
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.store.db import db_now, is_uuid
from kit.store.errors import IdempotencyConflict, StoreError
from kit.store.schema import queue_tasks

MAX_LEASE_TASKS = 100
# A lease request keeps looking past expired tasks it dead-letters, but not forever:
# the rest are dead-lettered by later requests.
_LEASE_ROUNDS = 5


class TaskNotFound(StoreError):
    """No such task for this tenant (another tenant's task is not found either)."""


class LeaseRefused(StoreError):
    """The lease token may not act on the task now; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TaskEnqueue:
    tenant: str
    queue: str
    payload: Any
    delay_s: int = 0
    max_attempts: int = 3
    timeout_s: int = 300
    idempotency_key: str | None = None
    request_hash: str | None = None  # fingerprint of (queue, body), with the key
    now: datetime | None = None


@dataclass(frozen=True)
class TaskEnqueued:
    task_id: str
    status: str
    created: bool  # False: an idempotent replay returned the task created earlier


@dataclass(frozen=True)
class TaskLease:
    tenant: str
    queue: str
    worker_id: str
    max_tasks: int = 1
    lease_s: int = 60
    now: datetime | None = None


@dataclass(frozen=True)
class LeasedTask:
    task_id: str
    lease_token: str
    payload: Any
    attempt: int
    lease_expires_at: datetime


@dataclass(frozen=True)
class TaskNacked:
    task_id: str
    status: str  # queued (retry) or dead
    attempt: int
    visible_at: datetime | None  # when it may be leased again; None when dead
    dead_reason: str | None


@dataclass(frozen=True)
class QueueStats:
    queued: int  # waiting, including delayed ones and expired leases
    leased: int  # held by a live lease
    dlq: int  # dead letters
    oldest_age_s: float  # how long the longest-waiting visible task has waited; 0 if none


# The hot statements, built once: a statement built per call costs its construction and
# its cache key every time (a quarter of a queue call's CPU in the API, profiled).
_NOW = func.coalesce(bindparam("now", type_=DateTime(timezone=True)), func.now())
_LOCKED_ONE = (
    select(queue_tasks, _NOW.label("db_now"))
    .where(queue_tasks.c.tenant == bindparam("tenant"), queue_tasks.c.task_id == bindparam("id"))
    .with_for_update()
)
_LOCKED_MANY = (
    select(queue_tasks, _NOW.label("db_now"))
    .where(
        queue_tasks.c.tenant == bindparam("tenant"),
        queue_tasks.c.task_id.in_(bindparam("ids", expanding=True)),
    )
    .order_by(queue_tasks.c.task_id)
    .with_for_update()
)
_LEASE_CANDIDATES = (
    select(queue_tasks, _NOW.label("db_now"))
    .where(
        queue_tasks.c.tenant == bindparam("tenant"),
        queue_tasks.c.queue == bindparam("queue"),
        queue_tasks.c.status.in_([s.value for s in LEASABLE]),
        queue_tasks.c.visible_at <= _NOW,
    )
    .order_by(queue_tasks.c.visible_at, queue_tasks.c.task_id)
    .limit(bindparam("want"))
    .with_for_update(skip_locked=True)
)
_ENQUEUE = (
    insert(queue_tasks)
    .values(
        task_id=bindparam("task_id"),
        tenant=bindparam("tenant"),
        queue=bindparam("queue"),
        payload=bindparam("payload", type_=queue_tasks.c.payload.type),
        status=TaskStatus.queued.value,
        attempt=0,
        max_attempts=bindparam("max_attempts"),
        timeout_s=bindparam("timeout_s"),
        visible_at=_NOW + func.make_interval(0, 0, 0, 0, 0, 0, bindparam("delay_s")),
        idempotency_key=bindparam("idempotency_key"),
        request_hash=bindparam("request_hash"),
        created_at=_NOW,
    )
    .on_conflict_do_nothing(index_elements=["tenant", "idempotency_key"])
    .returning(queue_tasks.c.task_id)
)


def _ms(instant: datetime | None) -> int | None:
    return None if instant is None else to_epoch_ms(instant)


def _at(ms: int | None) -> datetime | None:
    return None if ms is None else from_epoch_ms(ms)


def _task(row: Any) -> QueueTask:
    return QueueTask(
        task_id=str(row.task_id),
        status=TaskStatus(row.status),
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        timeout_ms=row.timeout_s * 1000,
        visible_at_ms=to_epoch_ms(row.visible_at),
        lease_token=row.lease_token,
        lease_expires_at_ms=_ms(row.lease_expires_at),
        deadline_ms=_ms(row.deadline_at),
        worker_id=row.worker_id,
        dead_reason=row.dead_reason,
    )


def _lease_values(task: QueueTask) -> dict[str, Any]:
    """The columns a transition may change, from the core's new state."""
    return {
        "status": task.status.value,
        "attempt": task.attempt,
        "visible_at": _at(task.visible_at_ms),
        "lease_token": task.lease_token,
        "lease_expires_at": _at(task.lease_expires_at_ms),
        "deadline_at": _at(task.deadline_ms),
        "worker_id": task.worker_id,
        "dead_reason": task.dead_reason,
    }


def _error_entry(attempt: int, error: str, now: datetime) -> list[dict[str, Any]]:
    return [{"attempt": attempt, "error": error, "at": now.isoformat()}]


# ---------------------------------------------------------------------------
# Enqueue


def task_enqueue(engine: Engine, params: TaskEnqueue) -> TaskEnqueued:
    """Insert the task, visible after its delay; with an Idempotency-Key, a retry of the
    same request returns the task created first, another request with the key is refused.

    A concurrent request with the same key blocks on the unique index until the first
    commits, then finds its row, so two retries cannot both create."""
    task_id = str(uuid.uuid4())
    with engine.begin() as conn:
        inserted = conn.execute(
            _ENQUEUE,
            {
                "task_id": task_id,
                "tenant": params.tenant,
                "queue": params.queue,
                "payload": params.payload,
                "max_attempts": params.max_attempts,
                "timeout_s": params.timeout_s,
                "delay_s": params.delay_s,
                "idempotency_key": params.idempotency_key,
                "request_hash": params.request_hash,
                "now": params.now,
            },
        ).first()
        if inserted is not None:
            return TaskEnqueued(task_id, TaskStatus.queued.value, created=True)
        earlier = conn.execute(
            select(queue_tasks.c.task_id, queue_tasks.c.status, queue_tasks.c.request_hash).where(
                queue_tasks.c.tenant == params.tenant,
                queue_tasks.c.idempotency_key == params.idempotency_key,
            )
        ).one()
    if earlier.request_hash != params.request_hash:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body"
        )
    return TaskEnqueued(str(earlier.task_id), earlier.status, created=False)


MAX_BATCH_TASKS = 1000


def task_enqueue_many(
    engine: Engine, tenant: str, queue: str, tasks: Sequence[TaskEnqueue]
) -> list[TaskEnqueued]:
    """Insert many tasks of one queue in one transaction (all or none), in order; they
    carry no Idempotency-Key (a retried batch enqueues again). `tenant` and `queue` of
    the items are ignored: the batch's own apply."""
    if not 1 <= len(tasks) <= MAX_BATCH_TASKS:
        raise ValueError(f"a batch has 1 to {MAX_BATCH_TASKS} tasks")
    ids = [str(uuid.uuid4()) for _ in tasks]
    with engine.begin() as conn:
        now = db_now(conn, tasks[0].now)
        conn.execute(
            insert(queue_tasks),
            [
                {
                    "task_id": task_id,
                    "tenant": tenant,
                    "queue": queue,
                    "payload": item.payload,
                    "status": TaskStatus.queued.value,
                    "attempt": 0,
                    "max_attempts": item.max_attempts,
                    "timeout_s": item.timeout_s,
                    "visible_at": now + timedelta(seconds=item.delay_s),
                    "created_at": now,
                }
                for task_id, item in zip(ids, tasks, strict=True)
            ],
        )
    return [TaskEnqueued(task_id, TaskStatus.queued.value, created=True) for task_id in ids]


# ---------------------------------------------------------------------------
# Lease


_apply = (
    update(queue_tasks)
    .where(queue_tasks.c.task_id == bindparam("b_task_id"))
    .values(
        status=bindparam("status"),
        attempt=bindparam("attempt"),
        visible_at=bindparam("visible_at"),
        lease_token=bindparam("lease_token"),
        lease_expires_at=bindparam("lease_expires_at"),
        deadline_at=bindparam("deadline_at"),
        worker_id=bindparam("worker_id"),
        dead_reason=bindparam("dead_reason"),
    )
)


def task_lease(engine: Engine, params: TaskLease) -> list[LeasedTask]:
    """Lease up to `max_tasks` visible tasks of the queue, oldest visible first.

    Candidates are locked with SKIP LOCKED: a concurrent lessee skips them instead of
    waiting, and never gets the same task. An expired lease found on its last attempt is
    dead-lettered here, and the search goes on for live work.
    """
    if not 1 <= params.max_tasks <= MAX_LEASE_TASKS:
        raise ValueError(f"max_tasks must be between 1 and {MAX_LEASE_TASKS}")
    leased: list[LeasedTask] = []
    with engine.begin() as conn:
        for _ in range(_LEASE_ROUNDS):
            want = params.max_tasks - len(leased)
            # the transaction's now(), read with the candidates: no round trip of its own
            rows = conn.execute(
                _LEASE_CANDIDATES,
                {"tenant": params.tenant, "queue": params.queue, "want": want, "now": params.now},
            ).all()
            if not rows:
                break
            now = rows[0].db_now
            now_ms = to_epoch_ms(now)
            moves: list[dict[str, Any]] = []
            dead: list[TaskTransition] = []
            for row in rows:
                token = secrets.token_urlsafe(24)
                result = lease_task(
                    _task(row), params.worker_id, token, now_ms, params.lease_s * 1000
                )
                if not result.accepted:  # cannot happen for a row the query chose
                    continue
                moves.append({"b_task_id": row.task_id, **_lease_values(result.task)})
                if result.event == "expire_dead":
                    dead.append(result)
                else:
                    assert result.task.lease_expires_at_ms is not None
                    leased.append(
                        LeasedTask(
                            task_id=result.task.task_id,
                            lease_token=token,
                            payload=row.payload,
                            attempt=result.task.attempt,
                            lease_expires_at=from_epoch_ms(result.task.lease_expires_at_ms),
                        )
                    )
            if moves:
                conn.execute(_apply, moves)
            if dead:
                _dead_letter_expired(conn, dead, now)
            if len(rows) < want or not dead:
                break
    return leased


def _dead_letter_expired(conn: Connection, dead: list[TaskTransition], now: datetime) -> None:
    for result in dead:
        task = result.task
        conn.execute(
            update(queue_tasks)
            .where(queue_tasks.c.task_id == task.task_id)
            .values(
                finished_at=now,
                errors=queue_tasks.c.errors.op("||")(
                    _json_list(task.attempt, task.dead_reason or "", now)
                ),
            )
        )


def _json_list(attempt: int, error: str, now: datetime) -> Any:
    return bindparam(None, _error_entry(attempt, error, now), type_=queue_tasks.c.errors.type)


# ---------------------------------------------------------------------------
# Ack, nack, heartbeat


def _locked(conn: Connection, tenant: str, task_id: str, now: datetime | None) -> Any:
    """The task's row under FOR UPDATE, with the transaction's clock as `db_now`."""
    if not is_uuid(task_id):
        raise TaskNotFound(task_id)
    row = conn.execute(_LOCKED_ONE, {"tenant": tenant, "id": task_id, "now": now}).first()
    if row is None:
        raise TaskNotFound(task_id)
    return row


def _decided(result: TaskTransition) -> QueueTask:
    if not result.accepted:
        raise LeaseRefused(result.reason or "refused")
    return result.task


@dataclass(frozen=True)
class AckItem:
    task_id: str
    lease_token: str
    result: Any = None


@dataclass(frozen=True)
class AckOutcome:
    task_id: str
    status: str | None  # "done" when acked (or the ack repeated), None when refused
    refusal: str | None = None  # "not_found" or "lease_refused"
    reason: str | None = None


# An ack writes what the core's decision changed, the result and the finish time.
_ack_apply = _apply.values(
    result=bindparam("result", type_=queue_tasks.c.result.type),
    finished_at=bindparam("finished_at"),
)


def task_ack_many(
    engine: Engine, tenant: str, items: Sequence[AckItem], now: datetime | None = None
) -> list[AckOutcome]:
    """Ack many tasks in one transaction, each decided on its own (one refused ack does
    not refuse the others); one outcome per item, in order. Rows are locked in id order,
    so two batches sharing tasks cannot deadlock."""
    ids = {item.task_id: _canonical(item.task_id) for item in items}
    wanted = sorted({i for i in ids.values() if i is not None})
    outcomes: list[AckOutcome] = []
    with engine.begin() as conn:
        rows = []
        if wanted:
            rows = conn.execute(_LOCKED_MANY, {"tenant": tenant, "ids": wanted, "now": now}).all()
        current = {str(row.task_id): _task(row) for row in rows}
        at = rows[0].db_now if rows else None
        changes: dict[str, dict[str, Any]] = {}
        for item in items:
            task_id = ids[item.task_id]
            task = current.get(task_id) if task_id is not None else None
            if task is None or at is None:
                outcomes.append(AckOutcome(item.task_id, None, "not_found", "no such task"))
                continue
            decision = ack_task(task, item.lease_token, to_epoch_ms(at))
            if not decision.accepted:
                reason = decision.reason or "refused"
                outcomes.append(AckOutcome(item.task_id, None, "lease_refused", reason))
                continue
            if decision.event == "ack":
                changes[task_id] = {
                    "b_task_id": task_id,
                    **_lease_values(decision.task),
                    "result": item.result,
                    "finished_at": at,
                }
            current[task_id] = decision.task
            outcomes.append(AckOutcome(item.task_id, decision.task.status.value))
        if changes:
            conn.execute(_ack_apply, list(changes.values()))
    return outcomes


def _canonical(task_id: str) -> str | None:
    try:
        return str(uuid.UUID(task_id))
    except (ValueError, TypeError, AttributeError):
        return None


def task_ack(
    engine: Engine,
    tenant: str,
    task_id: str,
    lease_token: str,
    result: Any = None,
    now: datetime | None = None,
) -> str:
    """Mark the task done with its result; returns the status ("done"). Repeating the
    ack with the same token is accepted and changes nothing."""
    (outcome,) = task_ack_many(engine, tenant, [AckItem(task_id, lease_token, result)], now)
    if outcome.refusal == "not_found":
        raise TaskNotFound(task_id)
    if outcome.refusal is not None:
        raise LeaseRefused(outcome.reason or "refused")
    assert outcome.status is not None
    return outcome.status


def task_nack(
    engine: Engine,
    tenant: str,
    task_id: str,
    lease_token: str,
    retryable: bool,
    error: str,
    now: datetime | None = None,
    rng: random.Random | None = None,
) -> TaskNacked:
    """Record the failure; the task is leasable again after a full-jitter backoff, or
    dead when not retryable or out of attempts."""
    rng = rng or random.Random()
    with engine.begin() as conn:
        row = _locked(conn, tenant, task_id, now)
        at = row.db_now
        task = _decided(nack_task(_task(row), lease_token, retryable, to_epoch_ms(at), rng))
        values: dict[str, Any] = _lease_values(task)
        values["errors"] = queue_tasks.c.errors.op("||")(_json_list(row.attempt, error, at))
        if task.status is TaskStatus.dead:
            values["finished_at"] = at
        conn.execute(update(queue_tasks).where(queue_tasks.c.task_id == task_id).values(**values))
    dead = task.status is TaskStatus.dead
    return TaskNacked(
        task_id=task.task_id,
        status=task.status.value,
        attempt=task.attempt,
        visible_at=None if dead else from_epoch_ms(task.visible_at_ms),
        dead_reason=task.dead_reason,
    )


def task_heartbeat(
    engine: Engine,
    tenant: str,
    task_id: str,
    lease_token: str,
    extend_s: int,
    now: datetime | None = None,
) -> datetime:
    """Extend a live lease; returns the new expiry (capped at the attempt's timeout)."""
    with engine.begin() as conn:
        row = _locked(conn, tenant, task_id, now)
        at = row.db_now
        task = _decided(heartbeat_task(_task(row), lease_token, to_epoch_ms(at), extend_s * 1000))
        conn.execute(
            update(queue_tasks)
            .where(queue_tasks.c.task_id == task_id)
            .values(**_lease_values(task))
        )
    assert task.lease_expires_at_ms is not None
    return from_epoch_ms(task.lease_expires_at_ms)


# ---------------------------------------------------------------------------
# Stats


def queue_stats(engine: Engine, tenant: str, queue: str, now: datetime | None = None) -> QueueStats:
    """Counts of one queue as a lessee would see them now. An expired lease counts as
    queued: the next lease request takes it (or dead-letters it on its last attempt)."""
    t = queue_tasks.c
    with engine.begin() as conn:
        at = db_now(conn, now)
        expired = (t.status == "leased") & (t.lease_expires_at <= at)
        row = conn.execute(
            select(
                func.count().filter((t.status == "queued") | expired).label("queued"),
                func.count()
                .filter((t.status == "leased") & (t.lease_expires_at > at))
                .label("leased"),
                func.count().filter(t.status == "dead").label("dlq"),
                func.min(t.visible_at)
                .filter(t.status.in_(("queued", "leased")) & (t.visible_at <= at))
                .label("oldest_visible_at"),
            ).where(
                t.tenant == tenant,
                t.queue == queue,
                t.status.in_(("queued", "leased", "dead")),
            )
        ).one()
    oldest = row.oldest_visible_at
    age_s = 0.0 if oldest is None else max(0.0, (at - oldest).total_seconds())
    return QueueStats(queued=row.queued, leased=row.leased, dlq=row.dlq, oldest_age_s=age_s)


def task_row(engine: Engine, tenant: str, task_id: str) -> Mapping[str, Any] | None:
    """The stored row, for tests and tooling."""
    with engine.connect() as conn:
        row = conn.execute(
            select(queue_tasks).where(
                queue_tasks.c.tenant == tenant, queue_tasks.c.task_id == task_id
            )
        ).first()
    return None if row is None else dict(row._mapping)

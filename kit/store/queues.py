"""The task queue for outside, pull-based workers, on PostgreSQL.

Every decision (may this token act, lease or dead-letter, when is the retry) is made by
kit.core.queue_task on the row read under `FOR UPDATE`; this module only reads and
writes. Time is the database's (`now()` of the transaction) unless a caller passes
`now` (tests, the model). Concurrent lessees lock candidate rows with `FOR UPDATE SKIP
LOCKED`, so two of them never get the same task and neither waits for the other.

Every operation is written once, as steps (kit.store.pg_async: statements yielded, rows
received, decisions in between), and offered twice: on a SQLAlchemy Engine
(`task_lease(engine, ...)`, for tests and tooling) and on an async pool
(`task_lease_async(pool, ...)`, what the HTTP API runs, without a thread hop). The
statement text is the module's `*_SQL` constants, shared by both. An enqueue (its
insert, and with an Idempotency-Key the read of an earlier use) and the stats are single
statements, run without a transaction of their own (`atomic=False`); a lease, an ack, a
nack and a heartbeat read, decide and write in one transaction.
"""

from __future__ import annotations

import random
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import Engine

from kit.core.queue_task import (
    QueueTask,
    TaskStatus,
    TaskTransition,
    ack_task,
    heartbeat_task,
    lease_task,
    nack_task,
)
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.crash import crash_point
from kit.store.db import is_uuid
from kit.store.errors import IdempotencyConflict, QueueFull, StoreError
from kit.store.pg_async import AsyncPool, Execute, Query, Steps, run_steps, run_steps_async
from kit.store.schema import LEASABLE_TASKS
from kit.store.vocab import COUNTED_SQL, TASK_DEAD, TASK_LEASED, TASK_QUEUED

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
    max_queued: int | None = None  # the operator's max_queued_per_queue (None: no limit)


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
# The statements, in one place: the sync functions (on an Engine) and the async ones (on
# an AsyncPool, the API's) run the same step functions below, so the same text.
# Parameters are psycopg's named ones. `now` is NULL in production: the database's clock.

_NOW = "coalesce(%(now)s::timestamptz, now())"
_STATE = (
    "task_id, status, attempt, max_attempts, timeout_s, visible_at, lease_token, "
    "lease_expires_at, deadline_at, worker_id, dead_reason"
)

ENQUEUE_SQL = f"""
INSERT INTO queue_tasks (task_id, tenant, queue, payload, status, attempt, max_attempts,
    timeout_s, visible_at, idempotency_key, request_hash, created_at)
VALUES (%(task_id)s::uuid, %(tenant)s, %(queue)s, %(payload)s, {TASK_QUEUED}, 0,
    %(max_attempts)s, %(timeout_s)s, {_NOW} + make_interval(secs => %(delay_s)s),
    %(idempotency_key)s, %(request_hash)s, {_NOW})
ON CONFLICT (tenant, idempotency_key) DO NOTHING
RETURNING task_id"""

ENQUEUED_EARLIER_SQL = """
SELECT task_id, status, request_hash FROM queue_tasks
WHERE tenant = %(tenant)s AND idempotency_key = %(idempotency_key)s"""

# A batch: one statement whatever its size (arrays, one element per task, in order).
ENQUEUE_MANY_SQL = f"""
INSERT INTO queue_tasks (task_id, tenant, queue, payload, status, attempt, max_attempts,
    timeout_s, visible_at, created_at)
SELECT t.task_id, %(tenant)s, %(queue)s, t.payload, {TASK_QUEUED}, 0, t.max_attempts,
    t.timeout_s, n.at + make_interval(secs => t.delay_s), n.at
FROM (SELECT {_NOW} AS at) AS n,
    unnest(%(task_id)s::uuid[], %(payload)s::jsonb[], %(max_attempts)s::int[],
        %(timeout_s)s::int[], %(delay_s)s::int[])
        WITH ORDINALITY AS t(task_id, payload, max_attempts, timeout_s, delay_s, n)
ORDER BY t.n"""

# What a lease request considers (kit.core.queue_task.leasable), in its order
# (lease_order); LEASABLE_TASKS is the partial index's predicate, so the scan reads it.
LEASE_CANDIDATES_SQL = f"""
SELECT {_STATE}, payload, {_NOW} AS db_now FROM queue_tasks
WHERE tenant = %(tenant)s AND queue = %(queue)s AND {LEASABLE_TASKS}
    AND visible_at <= {_NOW}
ORDER BY visible_at, task_id
LIMIT %(want)s
FOR UPDATE SKIP LOCKED"""

# The rows acks, nacks and heartbeats decide on, locked in id order (two batches
# sharing tasks cannot deadlock), with the transaction's clock.
LOCKED_SQL = f"""
SELECT {_STATE}, {_NOW} AS db_now FROM queue_tasks
WHERE tenant = %(tenant)s AND task_id = ANY(%(task_id)s::uuid[])
ORDER BY task_id
FOR UPDATE"""

# Every transition's write, for any number of tasks in one statement: the columns the
# core's new state sets, a finish time and a result once (NULL: keep), and an entry
# appended to the error history ('[]': none).
APPLY_SQL = """
UPDATE queue_tasks AS q SET
    status = u.status, attempt = u.attempt, visible_at = u.visible_at,
    lease_token = u.lease_token, lease_expires_at = u.lease_expires_at,
    deadline_at = u.deadline_at, worker_id = u.worker_id, dead_reason = u.dead_reason,
    finished_at = coalesce(u.finished_at, q.finished_at),
    result = coalesce(u.result, q.result),
    errors = q.errors || u.error
FROM unnest(%(task_id)s::uuid[], %(status)s::text[], %(attempt)s::int[],
    %(visible_at)s::timestamptz[], %(lease_token)s::text[],
    %(lease_expires_at)s::timestamptz[], %(deadline_at)s::timestamptz[],
    %(worker_id)s::text[], %(dead_reason)s::text[], %(finished_at)s::timestamptz[],
    %(result)s::jsonb[], %(error)s::jsonb[])
    AS u(task_id, status, attempt, visible_at, lease_token, lease_expires_at, deadline_at,
        worker_id, dead_reason, finished_at, result, error)
WHERE q.task_id = u.task_id"""

STATS_SQL = f"""
SELECT
    count(*) FILTER (WHERE status = {TASK_QUEUED}
        OR (status = {TASK_LEASED} AND lease_expires_at <= {_NOW})) AS queued,
    count(*) FILTER (WHERE status = {TASK_LEASED} AND lease_expires_at > {_NOW}) AS leased,
    count(*) FILTER (WHERE status = {TASK_DEAD}) AS dlq,
    min(visible_at) FILTER (WHERE {LEASABLE_TASKS} AND visible_at <= {_NOW})
        AS oldest_visible_at,
    {_NOW} AS db_now
FROM queue_tasks
WHERE tenant = %(tenant)s AND queue = %(queue)s AND status IN {COUNTED_SQL}"""

_APPLY_COLUMNS = (
    "task_id",
    "status",
    "attempt",
    "visible_at",
    "lease_token",
    "lease_expires_at",
    "deadline_at",
    "worker_id",
    "dead_reason",
    "finished_at",
    "result",
    "error",
)
_NO_ERROR = Jsonb([])


def _change(
    task: QueueTask,
    finished_at: datetime | None = None,
    result: Jsonb | None = None,
    error: Jsonb = _NO_ERROR,
) -> dict[str, Any]:
    """One task's write: the columns the core's new state sets, and what else changes."""
    return {
        "task_id": task.task_id,
        **_lease_values(task),
        "finished_at": finished_at,
        "result": result,
        "error": error,
    }


def _apply(changes: Sequence[Mapping[str, Any]]) -> Execute:
    return Execute(APPLY_SQL, {c: [change[c] for change in changes] for c in _APPLY_COLUMNS})


# ---------------------------------------------------------------------------
# The operations, as steps (kit.store.pg_async): each runs in one transaction.


# The operator's max_queued_per_queue: enqueues to one tenant's queue take this lock in
# turn for the rest of their transaction, so each counts every task committed before it.
QUEUE_LOCK_SQL = (
    "SELECT pg_advisory_xact_lock(hashtextextended("
    "'cronfleet.max_queued:' || %(tenant)s || '/' || %(queue)s, 0))"
)
QUEUED_COUNT_SQL = f"""
SELECT count(*) AS n FROM queue_tasks
WHERE tenant = %(tenant)s AND queue = %(queue)s AND {LEASABLE_TASKS}"""


def _within_max_queued(tenant: str, queue: str, limit: int, adding: int) -> Steps[None]:
    """QueueFull if `adding` tasks would take the queue's unfinished tasks (queued or
    leased) past `limit`; inside the enqueue's transaction."""
    yield Execute(QUEUE_LOCK_SQL, {"tenant": tenant, "queue": queue})
    (row,) = (yield Query(QUEUED_COUNT_SQL, {"tenant": tenant, "queue": queue})) or ()
    if row.n + adding > limit:
        raise QueueFull(row.n, limit, adding)


def _enqueue(params: TaskEnqueue) -> Steps[TaskEnqueued]:
    task_id = str(uuid.uuid4())
    if params.max_queued is not None:
        yield from _within_max_queued(params.tenant, params.queue, params.max_queued, 1)
    inserted = yield Query(
        ENQUEUE_SQL,
        {
            "task_id": task_id,
            "tenant": params.tenant,
            "queue": params.queue,
            "payload": Jsonb(params.payload),
            "max_attempts": params.max_attempts,
            "timeout_s": params.timeout_s,
            "delay_s": params.delay_s,
            "idempotency_key": params.idempotency_key,
            "request_hash": params.request_hash,
            "now": params.now,
        },
    )
    if inserted:
        return TaskEnqueued(task_id, TaskStatus.queued.value, created=True)
    (earlier,) = (
        yield Query(
            ENQUEUED_EARLIER_SQL,
            {"tenant": params.tenant, "idempotency_key": params.idempotency_key},
        )
    ) or ()
    if earlier.request_hash != params.request_hash:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body"
        )
    return TaskEnqueued(str(earlier.task_id), earlier.status, created=False)


MAX_BATCH_TASKS = 1000


def _enqueue_many(
    tenant: str, queue: str, tasks: Sequence[TaskEnqueue], max_queued: int | None = None
) -> Steps[list[TaskEnqueued]]:
    if not 1 <= len(tasks) <= MAX_BATCH_TASKS:
        raise ValueError(f"a batch has 1 to {MAX_BATCH_TASKS} tasks")
    if max_queued is not None:
        yield from _within_max_queued(tenant, queue, max_queued, len(tasks))
    ids = [str(uuid.uuid4()) for _ in tasks]
    yield Execute(
        ENQUEUE_MANY_SQL,
        {
            "tenant": tenant,
            "queue": queue,
            "now": tasks[0].now,
            "task_id": ids,
            "payload": [Jsonb(t.payload) for t in tasks],
            "max_attempts": [t.max_attempts for t in tasks],
            "timeout_s": [t.timeout_s for t in tasks],
            "delay_s": [t.delay_s for t in tasks],
        },
    )
    return [TaskEnqueued(task_id, TaskStatus.queued.value, created=True) for task_id in ids]


def _lease(params: TaskLease) -> Steps[list[LeasedTask]]:
    if not 1 <= params.max_tasks <= MAX_LEASE_TASKS:
        raise ValueError(f"max_tasks must be between 1 and {MAX_LEASE_TASKS}")
    leased: list[LeasedTask] = []
    for _ in range(_LEASE_ROUNDS):
        want = params.max_tasks - len(leased)
        # the transaction's now(), read with the candidates: no round trip of its own
        rows = yield Query(
            LEASE_CANDIDATES_SQL,
            {"tenant": params.tenant, "queue": params.queue, "want": want, "now": params.now},
        )
        if not rows:
            break
        now = rows[0].db_now
        now_ms = to_epoch_ms(now)
        changes: list[dict[str, Any]] = []
        dead = 0
        for row in rows:
            token = secrets.token_urlsafe(24)
            result = lease_task(_task(row), params.worker_id, token, now_ms, params.lease_s * 1000)
            if not result.accepted:  # cannot happen for a row the query chose
                continue
            task = result.task
            if result.event == "expire_dead":
                dead += 1
                entry = _error_entry(task.attempt, task.dead_reason or "", now)
                changes.append(_change(task, finished_at=now, error=Jsonb(entry)))
                continue
            changes.append(_change(task))
            assert task.lease_expires_at_ms is not None
            leased.append(
                LeasedTask(
                    task_id=task.task_id,
                    lease_token=token,
                    payload=row.payload,
                    attempt=task.attempt,
                    lease_expires_at=from_epoch_ms(task.lease_expires_at_ms),
                )
            )
        crash_point("queue.lease_decided", changes)
        if changes:
            yield _apply(changes)
        if len(rows) < want or not dead:
            break
    return leased


def _locked(tenant: str, task_ids: Sequence[str], now: datetime | None) -> Steps[Sequence[Any]]:
    """The tasks' rows under FOR UPDATE (ids canonical UUIDs), each with `db_now`."""
    if not task_ids:
        return []
    rows = yield Query(LOCKED_SQL, {"tenant": tenant, "task_id": list(task_ids), "now": now})
    return rows or []


def _locked_one(tenant: str, task_id: str, now: datetime | None) -> Steps[Any]:
    canonical = _canonical(task_id)
    rows = (yield from _locked(tenant, [canonical], now)) if canonical is not None else []
    if not rows:
        raise TaskNotFound(task_id)
    return rows[0]


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


def _ack_many(
    tenant: str, items: Sequence[AckItem], now: datetime | None
) -> Steps[list[AckOutcome]]:
    ids = {item.task_id: _canonical(item.task_id) for item in items}
    wanted = sorted({i for i in ids.values() if i is not None})
    rows = yield from _locked(tenant, wanted, now)
    current = {str(row.task_id): _task(row) for row in rows}
    at = rows[0].db_now if rows else None
    changes: dict[str, dict[str, Any]] = {}
    outcomes: list[AckOutcome] = []
    for item in items:
        task_id = ids[item.task_id]
        task = current.get(task_id) if task_id is not None else None
        if task is None or task_id is None or at is None:
            outcomes.append(AckOutcome(item.task_id, None, "not_found", "no such task"))
            continue
        decision = ack_task(task, item.lease_token, to_epoch_ms(at))
        if not decision.accepted:
            reason = decision.reason or "refused"
            outcomes.append(AckOutcome(item.task_id, None, "lease_refused", reason))
            continue
        if decision.event == "ack":
            changes[task_id] = _change(decision.task, finished_at=at, result=Jsonb(item.result))
        current[task_id] = decision.task
        outcomes.append(AckOutcome(item.task_id, decision.task.status.value))
    crash_point("queue.ack_decided", changes)
    if changes:
        yield _apply(list(changes.values()))
    return outcomes


def _canonical(task_id: str) -> str | None:
    """The id as PostgreSQL writes it, or None if it is not one (kit.store.db.is_uuid)."""
    return task_id.lower() if is_uuid(task_id) else None


def _ack_one(outcome: AckOutcome) -> str:
    if outcome.refusal == "not_found":
        raise TaskNotFound(outcome.task_id)
    if outcome.refusal is not None:
        raise LeaseRefused(outcome.reason or "refused")
    assert outcome.status is not None
    return outcome.status


def _nack(
    tenant: str,
    task_id: str,
    lease_token: str,
    retryable: bool,
    error: str,
    now: datetime | None,
    rng: random.Random,
) -> Steps[TaskNacked]:
    row = yield from _locked_one(tenant, task_id, now)
    at = row.db_now
    task = _decided(nack_task(_task(row), lease_token, retryable, to_epoch_ms(at), rng))
    dead = task.status is TaskStatus.dead
    entry = Jsonb(_error_entry(row.attempt, error, at))
    crash_point("queue.nack_decided")
    yield _apply([_change(task, finished_at=at if dead else None, error=entry)])
    return TaskNacked(
        task_id=task.task_id,
        status=task.status.value,
        attempt=task.attempt,
        visible_at=None if dead else from_epoch_ms(task.visible_at_ms),
        dead_reason=task.dead_reason,
    )


def _heartbeat(
    tenant: str, task_id: str, lease_token: str, extend_s: int, now: datetime | None
) -> Steps[datetime]:
    row = yield from _locked_one(tenant, task_id, now)
    at_ms = to_epoch_ms(row.db_now)
    task = _decided(heartbeat_task(_task(row), lease_token, at_ms, extend_s * 1000))
    crash_point("queue.heartbeat_decided")
    yield _apply([_change(task)])
    assert task.lease_expires_at_ms is not None
    return from_epoch_ms(task.lease_expires_at_ms)


def _stats(tenant: str, queue: str, now: datetime | None) -> Steps[QueueStats]:
    (row,) = (yield Query(STATS_SQL, {"tenant": tenant, "queue": queue, "now": now})) or ()
    oldest = row.oldest_visible_at
    age_s = 0.0 if oldest is None else max(0.0, (row.db_now - oldest).total_seconds())
    return QueueStats(queued=row.queued, leased=row.leased, dlq=row.dlq, oldest_age_s=age_s)


# ---------------------------------------------------------------------------
# The API of this module: each operation on an Engine (sync) and on an AsyncPool (the
# HTTP API's), the same steps under both.


def task_enqueue(engine: Engine, params: TaskEnqueue) -> TaskEnqueued:
    """Insert the task, visible after its delay; with an Idempotency-Key, a retry of the
    same request returns the task created first, another request with the key is refused.

    A concurrent request with the same key blocks on the unique index until the first
    commits, then finds its row, so two retries cannot both create."""
    return run_steps(engine, _enqueue(params), atomic=params.max_queued is not None)


async def task_enqueue_async(pool: AsyncPool, params: TaskEnqueue) -> TaskEnqueued:
    return await run_steps_async(pool, _enqueue(params), atomic=params.max_queued is not None)


def task_enqueue_many(
    engine: Engine,
    tenant: str,
    queue: str,
    tasks: Sequence[TaskEnqueue],
    max_queued: int | None = None,
) -> list[TaskEnqueued]:
    """Insert many tasks of one queue in one statement (all or none), in order; they
    carry no Idempotency-Key (a retried batch enqueues again). `tenant` and `queue` of
    the items are ignored: the batch's own apply."""
    atomic = max_queued is not None
    return run_steps(engine, _enqueue_many(tenant, queue, tasks, max_queued), atomic=atomic)


async def task_enqueue_many_async(
    pool: AsyncPool,
    tenant: str,
    queue: str,
    tasks: Sequence[TaskEnqueue],
    max_queued: int | None = None,
) -> list[TaskEnqueued]:
    steps = _enqueue_many(tenant, queue, tasks, max_queued)
    return await run_steps_async(pool, steps, atomic=max_queued is not None)


def task_lease(engine: Engine, params: TaskLease) -> list[LeasedTask]:
    """Lease up to `max_tasks` visible tasks of the queue, oldest visible first.

    Candidates are locked with SKIP LOCKED: a concurrent lessee skips them instead of
    waiting, and never gets the same task. An expired lease found on its last attempt is
    dead-lettered here, and the search goes on for live work.
    """
    return run_steps(engine, _lease(params))


async def task_lease_async(pool: AsyncPool, params: TaskLease) -> list[LeasedTask]:
    return await run_steps_async(pool, _lease(params))


def task_ack_many(
    engine: Engine, tenant: str, items: Sequence[AckItem], now: datetime | None = None
) -> list[AckOutcome]:
    """Ack many tasks in one transaction, each decided on its own (one refused ack does
    not refuse the others); one outcome per item, in order."""
    return run_steps(engine, _ack_many(tenant, items, now))


async def task_ack_many_async(
    pool: AsyncPool, tenant: str, items: Sequence[AckItem], now: datetime | None = None
) -> list[AckOutcome]:
    return await run_steps_async(pool, _ack_many(tenant, items, now))


async def task_ack_async(
    pool: AsyncPool,
    tenant: str,
    task_id: str,
    lease_token: str,
    result: Any = None,
    now: datetime | None = None,
) -> str:
    item = AckItem(task_id, lease_token, result)
    return _ack_one((await run_steps_async(pool, _ack_many(tenant, [item], now)))[0])


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
    steps = _nack(tenant, task_id, lease_token, retryable, error, now, rng or random.Random())
    return run_steps(engine, steps)


async def task_nack_async(
    pool: AsyncPool,
    tenant: str,
    task_id: str,
    lease_token: str,
    retryable: bool,
    error: str,
    now: datetime | None = None,
    rng: random.Random | None = None,
) -> TaskNacked:
    steps = _nack(tenant, task_id, lease_token, retryable, error, now, rng or random.Random())
    return await run_steps_async(pool, steps)


def task_heartbeat(
    engine: Engine,
    tenant: str,
    task_id: str,
    lease_token: str,
    extend_s: int,
    now: datetime | None = None,
) -> datetime:
    """Extend a live lease; returns the new expiry (capped at the attempt's timeout)."""
    return run_steps(engine, _heartbeat(tenant, task_id, lease_token, extend_s, now))


async def task_heartbeat_async(
    pool: AsyncPool,
    tenant: str,
    task_id: str,
    lease_token: str,
    extend_s: int,
    now: datetime | None = None,
) -> datetime:
    return await run_steps_async(pool, _heartbeat(tenant, task_id, lease_token, extend_s, now))


def queue_stats(engine: Engine, tenant: str, queue: str, now: datetime | None = None) -> QueueStats:
    """Counts of one queue as a lessee would see them now. An expired lease counts as
    queued: the next lease request takes it (or dead-letters it on its last attempt)."""
    return run_steps(engine, _stats(tenant, queue, now), atomic=False)


async def queue_stats_async(
    pool: AsyncPool, tenant: str, queue: str, now: datetime | None = None
) -> QueueStats:
    return await run_steps_async(pool, _stats(tenant, queue, now), atomic=False)

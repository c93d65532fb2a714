"""The task-queue API for outside, pull-based workers: enqueue, lease, ack, nack,
heartbeat, stats. Auth and tenant scoping are the jobs API's: a bearer token (`read` for
GET, `write` otherwise), and another tenant's task or queue is simply not there (404, or
an empty queue). A queue is a name within the tenant, created by its first task.

A lease hands out a `lease_token`; ack, nack and heartbeat must carry it and are refused
with 409 and the reason when it is not the current one or the lease expired.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from kit.api.auth import Caller, IdempotencyKey, principal
from kit.api.body import StrictJsonRoute
from kit.api.declared import Whole
from kit.api.errors import ApiError
from kit.api.ids import BodyTaskId, TaskId
from kit.api.models import QueueTaskStatus
from kit.api.state import db_pool
from kit.api.tenancy import limits_of, queue_full_refused
from kit.core.errors import FieldError
from kit.core.queue_task import MAX_ATTEMPTS
from kit.store import queues as queue_store
from kit.store.errors import QueueFull
from kit.store.jobs import request_fingerprint

router = APIRouter(
    prefix="/v1", dependencies=[Depends(principal)], route_class=StrictJsonRoute, tags=["queues"]
)

QUEUE_PATTERN = r"^[a-z0-9._-]{1,64}$"
QueueName = Annotated[
    str, Path(pattern=QUEUE_PATTERN, description="1 to 64 of a-z, 0-9, '.', '_', '-'")
]
LeaseToken = Annotated[str, Field(min_length=1, max_length=200)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TaskIn(_Strict):
    payload: Any = Field(description="Any JSON value, handed to the worker as is.")
    delay_sec: Whole = Field(default=0, ge=0, le=86_400)
    max_attempts: Whole = Field(default=3, ge=1, le=MAX_ATTEMPTS)
    timeout_sec: Whole = Field(
        default=300,
        ge=1,
        le=86_400,
        description="No attempt is held longer: leases and heartbeats are capped by it.",
    )


class TaskCreatedOut(BaseModel):
    task_id: str
    status: QueueTaskStatus


class TaskBatchIn(_Strict):
    tasks: list[TaskIn] = Field(min_length=1, max_length=queue_store.MAX_BATCH_TASKS)


class TaskBatchOut(BaseModel):
    tasks: list[TaskCreatedOut] = Field(description="One per task sent, in the same order.")


class LeaseIn(_Strict):
    worker_id: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
    max_tasks: Whole = Field(default=1, ge=1, le=queue_store.MAX_LEASE_TASKS)
    lease_sec: Whole = Field(default=60, ge=1, le=3600)


class LeasedTaskOut(BaseModel):
    task_id: str
    lease_token: str
    payload: Any
    attempt: int
    lease_expires_at: datetime


class LeaseOut(BaseModel):
    tasks: list[LeasedTaskOut]


class AckIn(_Strict):
    lease_token: LeaseToken
    result: Any = None


class AckOut(BaseModel):
    task_id: str
    status: Literal["done"]


class AckItemIn(_Strict):
    task_id: BodyTaskId
    lease_token: LeaseToken
    result: Any = None


class AckBatchIn(_Strict):
    acks: list[AckItemIn] = Field(min_length=1, max_length=queue_store.MAX_BATCH_TASKS)


class AckRefusalOut(BaseModel):
    code: Literal["not_found", "lease_refused"]
    message: str


class AckResultOut(BaseModel):
    task_id: str
    status: Literal["done"] | None = Field(description="done, or None when refused")
    error: AckRefusalOut | None = Field(
        description="Why this ack was refused (what the one-task ack answers as 404 or 409)."
    )


class AckBatchOut(BaseModel):
    results: list[AckResultOut] = Field(description="One per ack sent, in the same order.")


class NackIn(_Strict):
    lease_token: LeaseToken
    retryable: bool = True
    error: str = Field(default="", max_length=4096)


class NackOut(BaseModel):
    task_id: str
    status: Literal["queued", "dead"]
    attempt: int = Field(description="Attempts made so far; the next lease is attempt + 1.")
    visible_at: datetime | None = Field(description="When it may be leased again (None: dead).")
    dead_reason: str | None


class HeartbeatIn(_Strict):
    lease_token: LeaseToken
    extend_sec: Whole = Field(ge=1, le=3600)


class HeartbeatOut(BaseModel):
    task_id: str
    lease_expires_at: datetime


class QueueStatsOut(BaseModel):
    queue: str
    queued: int = Field(description="Waiting, including delayed tasks and expired leases.")
    leased: int = Field(description="Held by a live lease.")
    dlq: int = Field(description="Dead letters: not retryable, or attempts exhausted.")
    oldest_age_sec: float = Field(description="Wait of the oldest visible task since visible.")


def _check_json_size(field: str, value: Any, max_bytes: int) -> None:
    size = len(json.dumps(value, separators=(",", ":")).encode())
    if size > max_bytes:
        raise FieldError(field, f"is {size} bytes of JSON; the limit is {max_bytes}")


def _check_json_sizes(field: str, values: list[Any], settings: Any) -> None:
    """Every value of a batch within the payload limit, or one 422 naming each that is
    not (`field` formatted with the item's index)."""
    problems: list[tuple[str, str]] = []
    for index, value in enumerate(values):
        try:
            _check_json_size(field.format(index), value, settings.max_queue_payload_bytes)
        except FieldError as exc:
            problems.append((exc.field, exc.reason))
    if problems:
        raise ApiError(422, f"{problems[0][0]}: {problems[0][1]}", problems)


def _refused(exc: queue_store.LeaseRefused) -> ApiError:
    return ApiError(409, exc.reason, [("lease_token", exc.reason)], code="lease_refused")


def _not_found() -> ApiError:
    return ApiError(404, "no such task")


@router.post(
    "/queues/{queue}/tasks",
    status_code=201,
    response_model=TaskCreatedOut,
    summary="Enqueue a task",
    responses={200: {"model": TaskCreatedOut, "description": "idempotent replay"}},
)
async def enqueue_task(
    queue: QueueName,
    body: TaskIn,
    request: Request,
    response: Response,
    caller: Caller,
    idempotency_key: IdempotencyKey = None,
) -> TaskCreatedOut:
    """A retried enqueue with the same `Idempotency-Key` and request returns the same task
    (200, with its current status); the same key with another request is a 409."""
    _check_json_size("payload", body.payload, request.app.state.settings.max_queue_payload_bytes)
    request_hash = None
    if idempotency_key is not None:
        request_hash = request_fingerprint({"queue": queue, "body": body.model_dump()})
    params = queue_store.TaskEnqueue(
        tenant=caller.tenant,
        queue=queue,
        payload=body.payload,
        delay_s=body.delay_sec,
        max_attempts=body.max_attempts,
        timeout_s=body.timeout_sec,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        max_queued=limits_of(request, caller.tenant).max_queued_per_queue,
    )
    try:
        created = await queue_store.task_enqueue_async(db_pool(request), params)
    except QueueFull as exc:
        raise queue_full_refused(caller.tenant, exc) from exc
    if not created.created:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    return TaskCreatedOut(task_id=created.task_id, status=created.status)


@router.post(
    "/queues/{queue}/tasks:batch",
    status_code=201,
    response_model=TaskBatchOut,
    summary="Enqueue many tasks at once, all or nothing",
)
async def enqueue_tasks_batch(
    queue: QueueName, body: TaskBatchIn, request: Request, caller: Caller
) -> TaskBatchOut:
    """Up to 1,000 tasks per call, written in one transaction: any invalid task refuses
    the whole batch with a 422 naming it (`tasks[17].payload`). A batch carries no
    Idempotency-Key: sending it again enqueues the tasks again."""
    _check_json_sizes(
        "tasks[{}].payload", [t.payload for t in body.tasks], request.app.state.settings
    )
    params = [
        queue_store.TaskEnqueue(
            tenant=caller.tenant,
            queue=queue,
            payload=item.payload,
            delay_s=item.delay_sec,
            max_attempts=item.max_attempts,
            timeout_s=item.timeout_sec,
        )
        for item in body.tasks
    ]
    max_queued = limits_of(request, caller.tenant).max_queued_per_queue
    try:
        created = await queue_store.task_enqueue_many_async(
            db_pool(request), caller.tenant, queue, params, max_queued
        )
    except QueueFull as exc:
        raise queue_full_refused(caller.tenant, exc) from exc
    return TaskBatchOut(tasks=[TaskCreatedOut(task_id=c.task_id, status=c.status) for c in created])


@router.post(
    "/queues/{queue}/lease",
    response_model=LeaseOut,
    summary="Lease up to max_tasks visible tasks, oldest first",
)
async def lease_tasks(
    queue: QueueName, body: LeaseIn, request: Request, caller: Caller
) -> LeaseOut:
    """Concurrent lessees never get the same task. An empty list means nothing is visible
    now. A task whose lease expired is leased again (its attempt counts) or, after its
    last attempt, dead-lettered."""
    params = queue_store.TaskLease(
        tenant=caller.tenant,
        queue=queue,
        worker_id=body.worker_id,
        max_tasks=body.max_tasks,
        lease_s=body.lease_sec,
    )
    leased = await queue_store.task_lease_async(db_pool(request), params)
    return LeaseOut(
        tasks=[
            LeasedTaskOut(
                task_id=t.task_id,
                lease_token=t.lease_token,
                payload=t.payload,
                attempt=t.attempt,
                lease_expires_at=t.lease_expires_at,
            )
            for t in leased
        ]
    )


@router.post("/tasks/{task_id:id}/ack", response_model=AckOut, summary="Finish a task")
async def ack(task_id: TaskId, body: AckIn, request: Request, caller: Caller) -> AckOut:
    """Repeating an ack with the same token answers 200 again and changes nothing."""
    _check_json_size("result", body.result, request.app.state.settings.max_queue_payload_bytes)
    try:
        await queue_store.task_ack_async(
            db_pool(request), caller.tenant, task_id, body.lease_token, body.result
        )
    except queue_store.TaskNotFound as exc:
        raise _not_found() from exc
    except queue_store.LeaseRefused as exc:
        raise _refused(exc) from exc
    return AckOut(task_id=task_id, status="done")


@router.post("/tasks:ack", response_model=AckBatchOut, summary="Finish many tasks, each on its own")
async def ack_batch(body: AckBatchIn, request: Request, caller: Caller) -> AckBatchOut:
    """Up to 1,000 acks per call, in one transaction; each is decided on its own, as the
    one-task ack would decide it, and a refused one (unknown task, stale or expired
    lease) does not refuse the others: its `error` says why."""
    _check_json_sizes("acks[{}].result", [a.result for a in body.acks], request.app.state.settings)
    outcomes = await queue_store.task_ack_many_async(
        db_pool(request),
        caller.tenant,
        [queue_store.AckItem(a.task_id, a.lease_token, a.result) for a in body.acks],
    )
    return AckBatchOut(
        results=[
            AckResultOut(
                task_id=o.task_id,
                status="done" if o.status == "done" else None,
                error=None
                if o.refusal is None
                else AckRefusalOut(code=o.refusal, message=o.reason or ""),  # type: ignore[arg-type]
            )
            for o in outcomes
        ]
    )


@router.post("/tasks/{task_id:id}/nack", response_model=NackOut, summary="Fail an attempt")
async def nack(task_id: TaskId, body: NackIn, request: Request, caller: Caller) -> NackOut:
    """Retryable: leasable again after exponential backoff with full jitter (base 1 s,
    cap 300 s). Not retryable, or the last attempt: dead letter."""
    try:
        nacked = await queue_store.task_nack_async(
            db_pool(request),
            caller.tenant,
            task_id,
            body.lease_token,
            body.retryable,
            body.error,
        )
    except queue_store.TaskNotFound as exc:
        raise _not_found() from exc
    except queue_store.LeaseRefused as exc:
        raise _refused(exc) from exc
    return NackOut(
        task_id=nacked.task_id,
        status=nacked.status,  # type: ignore[arg-type]
        attempt=nacked.attempt,
        visible_at=nacked.visible_at,
        dead_reason=nacked.dead_reason,
    )


@router.post(
    "/tasks/{task_id:id}/heartbeat", response_model=HeartbeatOut, summary="Extend a live lease"
)
async def heartbeat(
    task_id: TaskId, body: HeartbeatIn, request: Request, caller: Caller
) -> HeartbeatOut:
    """The lease runs to now + extend_sec, but never past the attempt's timeout_sec."""
    try:
        expires = await queue_store.task_heartbeat_async(
            db_pool(request),
            caller.tenant,
            task_id,
            body.lease_token,
            body.extend_sec,
        )
    except queue_store.TaskNotFound as exc:
        raise _not_found() from exc
    except queue_store.LeaseRefused as exc:
        raise _refused(exc) from exc
    return HeartbeatOut(task_id=task_id, lease_expires_at=expires)


@router.get("/queues/{queue}/stats", response_model=QueueStatsOut, summary="Queue depth")
async def stats(queue: QueueName, request: Request, caller: Caller) -> QueueStatsOut:
    counts = await queue_store.queue_stats_async(db_pool(request), caller.tenant, queue)
    return QueueStatsOut(
        queue=queue,
        queued=counts.queued,
        leased=counts.leased,
        dlq=counts.dlq,
        oldest_age_sec=counts.oldest_age_s,
    )

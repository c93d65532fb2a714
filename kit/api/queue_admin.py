"""The pull queues as a person sees them: every queue of the tenant with its depth, and
its dead tasks put back (GET /v1/queues, POST /v1/queues/{queue}/dead:replay). The
console's queues page reads and acts through the same store calls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.body import StrictJsonRoute
from kit.api.declared import whole_in
from kit.api.queues import QueueName
from kit.api.state import engine_of
from kit.store import console_views as views
from kit.store.db import is_uuid

router = APIRouter(
    prefix="/v1", dependencies=[Depends(principal)], route_class=StrictJsonRoute, tags=["queues"]
)


class QueueOut(BaseModel):
    queue: str
    queued: int = Field(description="waiting, including delayed tasks and expired leases")
    leased: int = Field(description="held by a live lease")
    dead: int = Field(description="dead letters: not retryable, or attempts exhausted")
    oldest_age_sec: float = Field(description="wait of the oldest visible task since visible")


class QueuesOut(BaseModel):
    queues: list[QueueOut] = Field(description="every queue holding a task not done")


class DeadTaskOut(BaseModel):
    task_id: str
    attempt: int
    dead_reason: str | None
    last_error: str | None


class DeadTasksOut(BaseModel):
    queue: str
    tasks: list[DeadTaskOut] = Field(description="the newest dead tasks first")


class ReplayIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    task_ids: list[Annotated[str, Field(max_length=36)]] | None = Field(
        default=None,
        max_length=views.QUEUE_REPLAY_MAX,
        description="these dead tasks; left out: the oldest `limit` dead tasks of the queue",
    )
    limit: whole_in(1, views.QUEUE_REPLAY_MAX) = views.QUEUE_REPLAY_MAX


class ReplayOut(BaseModel):
    replayed: int


@router.get("/queues", response_model=QueuesOut, summary="The tenant's queues and their depth")
async def queues(request: Request, caller: Caller) -> QueuesOut:
    found = await run_in_threadpool(views.queues_overview, engine_of(request), caller.tenant)
    return QueuesOut(
        queues=[
            QueueOut(
                queue=q.queue,
                queued=q.queued,
                leased=q.leased,
                dead=q.dead,
                oldest_age_sec=q.oldest_age_s,
            )
            for q in found
        ]
    )


@router.get("/queues/{queue}/dead", response_model=DeadTasksOut, summary="A queue's dead tasks")
async def dead_tasks(
    queue: QueueName,
    request: Request,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DeadTasksOut:
    found = await run_in_threadpool(
        views.queue_dead_tasks, engine_of(request), caller.tenant, queue, limit
    )
    return DeadTasksOut(
        queue=queue,
        tasks=[
            DeadTaskOut(
                task_id=t.task_id,
                attempt=t.attempt,
                dead_reason=t.dead_reason,
                last_error=t.last_error,
            )
            for t in found
        ],
    )


@router.post(
    "/queues/{queue}/dead:replay",
    response_model=ReplayOut,
    summary="Put dead tasks back in their queue, with a fresh attempt budget",
)
async def replay(queue: QueueName, body: ReplayIn, request: Request, caller: Caller) -> ReplayOut:
    """Each dead task named (or the oldest `limit`) becomes visible at once with a fresh
    attempt budget; its error history stays. A task that is not dead is left alone."""
    ids = None if body.task_ids is None else [i.lower() for i in body.task_ids]
    if ids is not None:
        ids = [i for i in ids if is_uuid(i)]  # an id the kit never issued names nothing
    done = await run_in_threadpool(
        views.queue_replay, engine_of(request), caller.tenant, queue, ids, body.limit
    )
    return ReplayOut(replayed=done)

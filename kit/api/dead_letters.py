"""The /v1/dead-letters routes: list, inspect and replay runs that used up their attempts.

Tenant-scoped like every /v1 route: another tenant's dead letter is not found (404).
A replay puts the same run (same run id, hence the same idempotency key for the task)
back to pending with a fresh attempt budget; the reaper publishes it on its next pass.
Replaying a run that is not dead (already replayed, and not dead again) is refused with
409 `already_replayed` and changes nothing, so a retried replay request is harmless.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

from kit.api.auth import Caller, principal
from kit.api.body import StrictJsonRoute
from kit.api.declared import INSTANT, INSTANT_DOC, Cursor, Whole
from kit.api.errors import ApiError
from kit.api.ids import BodyJobId, JobIdFilter, RunId
from kit.api.models import RunStateName
from kit.core.schedule import parse_instant
from kit.store import dead_letters as store
from kit.store.errors import RunNotFound

router = APIRouter(
    prefix="/v1",
    dependencies=[Depends(principal)],
    route_class=StrictJsonRoute,
    tags=["dead letters"],
)


class DeadLetterOut(BaseModel):
    run_id: str
    job_id: str
    errors: list[dict[str, Any]] = Field(
        description='one {"attempt", "error", "finished_at"} per failed attempt, oldest first'
    )
    dead_at: datetime
    replayed_at: datetime | None
    run_status: RunStateName
    attempt: int
    scheduled_at: datetime

    @classmethod
    def of(cls, record: store.DeadLetterRecord) -> DeadLetterOut:
        return cls(
            run_id=record.run_id,
            job_id=record.job_id,
            errors=record.errors,
            dead_at=record.created_at,
            replayed_at=record.replayed_at,
            run_status=record.run_status,
            attempt=record.attempt,
            scheduled_at=record.scheduled_at,
        )


class DeadLetterPageOut(BaseModel):
    dead_letters: list[DeadLetterOut]
    next_cursor: str | None


class BulkReplayIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    job_id: BodyJobId | None = None
    dead_from: str | None = Field(
        default=None,
        alias="from",
        pattern=INSTANT,
        description=f"dead at or after this instant ({INSTANT_DOC})",
    )
    dead_to: str | None = Field(
        default=None, alias="to", pattern=INSTANT, description=f"dead before this ({INSTANT_DOC})"
    )
    limit: Whole = Field(default=store.MAX_BULK_REPLAY, ge=1, le=store.MAX_BULK_REPLAY)


class BulkReplayOut(BaseModel):
    replayed: int
    more: bool = Field(description="the limit was reached: call again for the rest")


def _engine(request: Request) -> Engine:
    return request.app.state.engine


def _not_found() -> ApiError:
    return ApiError(404, "no such dead letter")


def _aware(value: str | None, field: str) -> datetime | None:
    return None if value is None else parse_instant(value, field)


@router.get(
    "/dead-letters",
    response_model=DeadLetterPageOut,
    summary="Dead letters, newest first (replayed ones included, with replayed_at)",
)
def list_dead_letters(
    request: Request,
    caller: Caller,
    job_id: JobIdFilter = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=store.MAX_PAGE)] = 50,
) -> DeadLetterPageOut:
    page = store.dead_letters_list(_engine(request), caller.tenant, job_id, cursor, limit)
    return DeadLetterPageOut(
        dead_letters=[DeadLetterOut.of(d) for d in page.dead_letters],
        next_cursor=page.next_cursor,
    )


@router.get(
    "/dead-letters/{run_id:id}",
    response_model=DeadLetterOut,
    summary="A dead letter with its error history",
)
def get_dead_letter(run_id: RunId, request: Request, caller: Caller) -> DeadLetterOut:
    try:
        return DeadLetterOut.of(store.dead_letter_get(_engine(request), caller.tenant, run_id))
    except RunNotFound as exc:
        raise _not_found() from exc


@router.post(
    "/dead-letters/{run_id:id}:replay",
    response_model=DeadLetterOut,
    summary="Replay one dead run: same run id, next attempt, fresh attempt budget",
    responses={409: {"description": "the run is not dead: it was already replayed"}},
)
def replay_dead_letter(run_id: RunId, request: Request, caller: Caller) -> DeadLetterOut:
    try:
        record = store.dead_letter_replay(_engine(request), caller.tenant, run_id)
    except RunNotFound as exc:
        raise _not_found() from exc
    except store.ReplayConflict as exc:
        raise ApiError(409, str(exc), code="already_replayed") from exc
    return DeadLetterOut.of(record)


@router.post(
    "/dead-letters:replay",
    response_model=BulkReplayOut,
    summary="Replay many dead runs (of a job, dead in [from, to)), oldest first, bounded",
)
def replay_dead_letters(body: BulkReplayIn, request: Request, caller: Caller) -> BulkReplayOut:
    count = store.dead_letters_replay_bulk(
        _engine(request),
        caller.tenant,
        job_id=body.job_id,
        dead_from=_aware(body.dead_from, "from"),
        dead_to=_aware(body.dead_to, "to"),
        limit=body.limit,
    )
    return BulkReplayOut(replayed=count, more=count == body.limit)

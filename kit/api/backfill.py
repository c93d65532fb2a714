"""POST /v1/jobs/{id}:backfill: the runs a job's schedule owed in a past range."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.body import StrictJsonRoute
from kit.api.declared import HISTORY_INSTANT, INSTANT_DOC
from kit.api.errors import ApiError
from kit.api.ids import JobId
from kit.api.models import ErrorOut
from kit.api.state import engine_of, settings_of
from kit.api.tenancy import limits_of, tier_not_allowed
from kit.core.owed import check_instant
from kit.core.schedule import parse_instant
from kit.store import backfill as store
from kit.store.errors import JobPaused, TierNotAllowed

router = APIRouter(
    prefix="/v1", dependencies=[Depends(principal)], route_class=StrictJsonRoute, tags=["jobs"]
)


class BackfillIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: str = Field(
        alias="from", pattern=HISTORY_INSTANT, description=f"{INSTANT_DOC}, inclusive"
    )
    end: str = Field(
        alias="to", pattern=HISTORY_INSTANT, description=f"{INSTANT_DOC}, exclusive; at most now"
    )


class BackfilledRunOut(BaseModel):
    run_id: str
    scheduled_at: datetime
    outcome: str = Field(description="created | revived (was skipped) | existing")


class BackfillOut(BaseModel):
    job_id: str
    owed: int = Field(description="fires the schedule owed in [from, to)")
    created: int
    revived: int = Field(description="fires recorded as skipped, now pending again")
    existing: int = Field(description="fires that already had a run: nothing new")
    history_complete: bool = Field(
        description="false: the job predates its audit log; its current schedule was assumed"
    )
    runs: list[BackfilledRunOut]


@router.post(
    "/jobs/{job_id:id}:backfill",
    status_code=202,
    response_model=BackfillOut,
    summary="Create the runs the schedule owed in a past range (deterministic run ids)",
    responses={409: {"model": ErrorOut, "description": "the job is paused (`job_paused`)"}},
)
async def backfill_job(
    job_id: JobId, body: BackfillIn, request: Request, caller: Caller
) -> BackfillOut:
    """Every fire of the job's schedule with a time in [from, to) (the schedule in force
    at that time, the DST rule applied, before the job existed the one it was created
    with) gets its run, named as the scheduler names it: a fire that already has a run
    gets nothing new, so repeating a backfill creates nothing; a fire skipped (paused,
    overlap, misfire) is revived. At most CRONFLEET_MAX_BACKFILL_RUNS fires (422 beyond),
    and `from` no earlier than the run history's retention (CRONFLEET_RUN_RETENTION_S,
    from the start of that day: 422 naming it; older runs would be expired by the next
    maintenance pass). The runs are published by the reaper's next pass (like manual
    runs); with an overlap policy other than `allow` they run one at a time.

    A paused job is refused with 409 `job_paused` and nothing is written: a paused job
    runs nothing of its schedule, and a backfill is its schedule's runs. Resume it, then
    backfill (a fire skipped while it was paused is revived)."""
    start = check_instant(parse_instant(body.start, "from"), "from")
    end = check_instant(parse_instant(body.end, "to"), "to")
    settings = settings_of(request)
    tiers = limits_of(request, caller.tenant).tiers
    try:
        done = await run_in_threadpool(
            lambda: store.job_backfill(
                engine_of(request),
                caller.tenant,
                job_id,
                start,
                end,
                max_runs=settings.max_backfill_runs,
                actor=caller.token_id,
                written_ahead_ms=settings.scan_ahead_ms,
                run_retention_s=settings.run_retention_s,
                tiers=tiers,
            )
        )
    except TierNotAllowed as exc:
        raise tier_not_allowed(request, caller.tenant, exc) from exc
    except JobPaused as exc:
        raise ApiError(
            409,
            "the job is paused: a backfill's runs would run while it is; resume it "
            "(PATCH paused=false), then backfill",
            code="job_paused",
        ) from exc

    def outcome(run_id: str) -> str:
        if run_id in done.created:
            return "created"
        return "revived" if run_id in done.revived else "existing"

    return BackfillOut(
        job_id=done.job_id,
        owed=len(done.owed),
        created=len(done.created),
        revived=len(done.revived),
        existing=done.existing,
        history_complete=done.history_complete,
        runs=[
            BackfilledRunOut(run_id=r, scheduled_at=at, outcome=outcome(r)) for r, at in done.owed
        ],
    )

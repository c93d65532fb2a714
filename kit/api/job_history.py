"""What happened to a job: its audit log (GET /v1/jobs/{id}/audit) and "why didn't my
job run?" (GET /v1/jobs/{id}/explain)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.compute import cpu_bound
from kit.api.declared import HISTORY_INSTANT, INSTANT_DOC, Cursor
from kit.api.ids import JobId
from kit.api.models import RunStateName, RunTrigger
from kit.api.state import engine_of, settings_of
from kit.api.tenancy import limits_of
from kit.api.waiting import load_window, waiting_note
from kit.core.owed import (
    DUE_GRACE_MS,
    EARLIEST,
    MAX_EXPLAIN_FIRES,
    Outcome,
    check_instant,
    dst_note,
)
from kit.core.schedule import CronSchedule, parse_instant, schedule_to_dict
from kit.store import audit as audit_store
from kit.store import explain as explain_store

router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["jobs"])


class AuditEntryOut(BaseModel):
    audit_id: int
    at: datetime
    actor: str = Field(description="token id of the caller, or `kit` for the kit's own acts")
    action: str
    version: int | None
    changes: dict[str, Any] = Field(
        description='{"field": {"from": old, "to": new}} (header and env values redacted)'
    )


class AuditPageOut(BaseModel):
    entries: list[AuditEntryOut]
    next_cursor: str | None


@router.get(
    "/jobs/{job_id:id}/audit",
    response_model=AuditPageOut,
    summary="A job's audit log, newest first: who changed what, when",
)
async def job_audit(
    job_id: JobId,
    request: Request,
    caller: Caller,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=audit_store.MAX_PAGE)] = 50,
) -> AuditPageOut:
    page = await run_in_threadpool(
        audit_store.audit_list, engine_of(request), caller.tenant, job_id, cursor, limit
    )
    return AuditPageOut(
        entries=[
            AuditEntryOut(
                audit_id=e.audit_id,
                at=e.at,
                actor=e.actor,
                action=e.action,
                version=e.version,
                changes=e.changes,
            )
            for e in page.entries
        ],
        next_cursor=page.next_cursor,
    )


class FireOut(BaseModel):
    scheduled_at: datetime = Field(description="the trigger time (schedule + jitter), UTC")
    local: str = Field(description="the schedule's own fire time in its time zone")
    outcome: Outcome
    status: str | None = Field(description="the run's status (outcome ran or skipped)")
    run_id: str = Field(description="the run id this fire has (or would have)")
    attempt: int | None
    reason: str | None
    dst: str | None = Field(description="how the DST rule shaped this fire, if it did")


class OtherRunOut(BaseModel):
    run_id: str
    scheduled_at: datetime
    status: RunStateName
    trigger: RunTrigger


class EraOut(BaseModel):
    schedule: dict[str, Any]
    since: datetime | None
    version: int | None


class ExplainOut(BaseModel):
    job_id: str
    now: datetime
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    schedules: list[EraOut] = Field(description="the schedules in force, oldest first")
    history_complete: bool = Field(
        description="false: the job predates its audit log; its current schedule was assumed"
    )
    summary: dict[str, int]
    fires: list[FireOut]
    other_runs: list[OtherRunOut] = Field(
        description="runs in the range no owed fire names: run now, backfills, edited-away fires"
    )
    next_from: datetime | None = Field(
        description=f"more than `limit` fires: ask again from here (limit <= {MAX_EXPLAIN_FIRES})"
    )
    held: str | None = Field(
        default=None,
        description="the job's runs are held by the operator's kill switch: which, since "
        "when (`held: switch off for tenant acme since ...`); null otherwise",
    )
    waiting: str | None = Field(
        default=None,
        description="some of the job's runs are due and not started, and their tenant is at "
        "one of the operator's limits on the workers: which, with the counts (`waiting: "
        "tenant acme at max_running (2 of 2 running)`; each such fire's `reason` says the "
        "same); null otherwise",
    )


def _range(start: str | None, end: str | None) -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    end_at = check_instant(parse_instant(end, "to") if end else now + timedelta(hours=1), "to")
    # the default `from` never falls before the range's earliest instant (a `to` in 1970)
    start_at = (
        parse_instant(start, "from") if start else max(EARLIEST, end_at - timedelta(hours=25))
    )
    return check_instant(start_at, "from"), end_at


def explain_out(done: explain_store.Explanation, waiting: str | None = None) -> ExplainOut:
    """`waiting`: what holds the job's runs that wait to start (kit.api.waiting), the
    reason of each such fire that has none of its own."""
    fires: list[FireOut] = []
    for e in done.fires:
        schedule = done.eras[e.fire.era].schedule
        zone = schedule.zone if isinstance(schedule, CronSchedule) else UTC
        fires.append(
            FireOut(
                scheduled_at=e.fire.at,
                local=e.fire.nominal.astimezone(zone).isoformat(),
                outcome=e.outcome,
                status=done.shown(e.run) if e.run else None,
                run_id=e.fire.run_id,
                attempt=e.run.attempt if e.run else None,
                reason=(
                    waiting
                    if e.reason is None and e.run and e.run.run_id in done.awaiting
                    else e.reason
                ),
                dst=dst_note(schedule, e.fire.nominal),
            )
        )
    counts = Counter(e.outcome.value for e in done.fires)
    return ExplainOut(
        job_id=done.job_id,
        now=done.now,
        start=done.start,
        end=done.end,
        schedules=[
            EraOut(schedule=schedule_to_dict(era.schedule), since=era.since, version=era.version)
            for era in done.eras
        ],
        history_complete=done.history_complete,
        held=done.held,
        waiting=waiting if done.awaiting else None,
        summary={o.value: counts.get(o.value, 0) for o in Outcome},
        fires=fires,
        other_runs=[
            OtherRunOut(
                run_id=o.run.run_id,
                scheduled_at=o.scheduled_at,
                status=done.shown(o.run),
                trigger=o.run.trigger_kind,
            )
            for o in done.other_runs
        ],
        next_from=done.next_from,
    )


@router.get(
    "/jobs/{job_id:id}/explain",
    response_model=ExplainOut,
    response_model_by_alias=True,
    summary="Why didn't my job run? Every fire the schedule owed in a range, and its fate",
)
async def explain_job(
    job_id: JobId,
    request: Request,
    caller: Caller,
    start: Annotated[
        str | None,
        Query(
            alias="from", pattern=HISTORY_INSTANT, description=f"{INSTANT_DOC}; default to - 25 h"
        ),
    ] = None,
    end: Annotated[
        str | None,
        Query(alias="to", pattern=HISTORY_INSTANT, description=f"{INSTANT_DOC}; default now + 1 h"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_EXPLAIN_FIRES)] = 500,
) -> ExplainOut:
    """Each fire the job's schedule owed with a time in [from, to) (the schedule in
    force at that time, from the job's audit log, with the DST rule of kit.core applied)
    and its outcome: `ran` (with the run's status), `skipped` (with the reason: paused,
    overlap, misfire), `not_yet_due` (in the future, or due less than 30 s ago), or
    `missing`: due, and no run was recorded, which is a bug to report. The range spans
    at most 366 days (422 naming `from` beyond)."""
    start_at, end_at = _range(start, end)
    limits = limits_of(request, caller.tenant)
    done = await cpu_bound(
        request,
        lambda: explain_store.job_explain(
            engine_of(request),
            caller.tenant,
            job_id,
            start_at,
            end_at,
            limit=limit,
            due_grace_ms=DUE_GRACE_MS,
            written_ahead_ms=settings_of(request).scan_ahead_ms,
            load_window_ms=load_window(limits),
        ),
    )
    return explain_out(done, waiting_note(caller.tenant, limits, done.load, done.task_type))

"""GET /v1/runs/{run_id}: one run in full, for the run page and for anyone asking what
happened to it: the run, every attempt (its due, claim, start and end times, worker,
start lag, outcome, error and output while kept), its idempotency key and the fire of
the schedule it answers with its explain entry; and while it waits to start, the switch
or the tenant's limit that holds it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.ids import RunId
from kit.api.job_history import FireOut, explain_out
from kit.api.models import RunOut, run_fields
from kit.api.state import engine_of, settings_of
from kit.api.tenancy import limits_of
from kit.api.waiting import load_window, waiting_note
from kit.store import explain as explain_store
from kit.store.errors import JobNotFound
from kit.store.run_detail import RunDetail, run_detail

router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["runs"])


class AttemptOut(BaseModel):
    attempt: int
    outcome: str = Field(
        description="`failed` for an attempt that failed; `preempted` for one stopped to give "
        "its slot to a paid tenant's run (the same attempt number runs again); else the "
        "run's status (`claimed`, `running`, `succeeded`, ...)"
    )
    due_at: datetime | None = Field(description="when the attempt was due: schedule or retry")
    claimed_at: datetime | None
    started_at: datetime | None = Field(description="when its task began (the worker's clock)")
    finished_at: datetime | None
    lag_s: float | None = Field(description="started_at - due_at")
    worker_id: str | None
    error: str | None
    output: str | None = Field(
        description="a command's stdout or an HTTP task's status and body: at most 4 KiB, "
        "secret values masked; null when nothing was kept (or it expired)"
    )
    stderr: str | None = Field(description="a command's stderr, as `output`")


class RunDetailOut(RunOut):
    idempotency_key: str = Field(description="what every attempt's task was given: the run id")
    attempts: list[AttemptOut] = Field(description="oldest first")
    fire: FireOut | None = Field(
        description="the schedule's fire this run answers, as explain tells it (null for a "
        "run now, a backfill, or a deleted job)"
    )
    held: str | None = Field(
        default=None,
        description="pending and held by the operator's kill switch: which, since when "
        "(`held: switch off for tenant acme since ...`); null otherwise",
    )
    waiting: str | None = Field(
        default=None,
        description="due, not started, and its tenant at one of the operator's limits on "
        "the workers: which, with the counts (`waiting: tenant acme at max_running (2 of 2 "
        "running)`); null otherwise, or when the wait is for its tenant's fair share of a "
        "worker (counted on the workers' /metrics only)",
    )


def _fire(request: Request, tenant: str, detail: RunDetail) -> FireOut | None:
    run = detail.run
    if run.trigger_kind not in ("schedule", "retry"):
        return None
    at = run.scheduled_at
    try:
        done = explain_store.job_explain(
            engine_of(request),
            tenant,
            run.job_id,
            at,
            at + timedelta(milliseconds=1),
            limit=1,
            written_ahead_ms=settings_of(request).scan_ahead_ms,
        )
    except JobNotFound:
        return None
    return next((f for f in explain_out(done).fires if f.run_id == run.run_id), None)


def detail_out(detail: RunDetail, fire: FireOut | None, waiting: str | None = None) -> RunDetailOut:
    body: dict[str, Any] = run_fields(detail.run)
    return RunDetailOut(
        **body,
        idempotency_key=detail.run.run_id,
        attempts=[
            AttemptOut(**{k: v for k, v in a.__dict__.items()}, lag_s=a.lag_s)
            for a in detail.attempts
        ],
        fire=fire,
        held=detail.held,
        waiting=waiting,
    )


async def run_detail_of(request: Request, tenant: str, run_id: str) -> RunDetailOut:
    """The route's answer (the console's run page reads it too)."""

    limits = limits_of(request, tenant)

    def read() -> RunDetailOut:
        detail = run_detail(engine_of(request), tenant, run_id, load_window(limits))
        waiting = (
            waiting_note(tenant, limits, detail.load, detail.task_type) if detail.awaiting else None
        )
        return detail_out(detail, _fire(request, tenant, detail), waiting)

    return await run_in_threadpool(read)


@router.get(
    "/runs/{run_id:id}",
    response_model=RunDetailOut,
    summary="Get a run: its attempts, their times, worker, lag, outcome and output",
)
async def get_run(run_id: RunId, request: Request, caller: Caller) -> RunDetailOut:
    return await run_detail_of(request, caller.tenant, run_id)

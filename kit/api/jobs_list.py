"""GET /v1/jobs: the caller's jobs, filtered, in name order, a page at a time, counted."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.declared import NO_CONTROL, Cursor
from kit.api.models import JobOut, Priority, RunStateName
from kit.api.state import engine_of
from kit.store import jobs_list as store
from kit.store.jobs import JobRecord
from kit.store.jobs_list import NO_RUN, LastRun
from kit.store.schema import RUN_STATUSES
from kit.tasks import registry

TASK_TYPES = registry.names()
TaskTypeName = Literal[TASK_TYPES]  # type: ignore[valid-type]
LastStatus = Literal[(*RUN_STATUSES, NO_RUN)]  # type: ignore[valid-type]
router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["jobs"])


class LastRunOut(BaseModel):
    run_id: str
    status: RunStateName
    scheduled_at: datetime


class JobSummaryOut(JobOut):
    last_run: LastRunOut | None = Field(
        default=None, description="the newest run scheduled at or before now"
    )

    @classmethod
    def of_listed(cls, job: JobRecord, last: LastRun | None) -> JobSummaryOut:
        out = cls.of(job)
        if last is not None:
            out.last_run = LastRunOut(
                run_id=last.run_id, status=last.status, scheduled_at=last.scheduled_at
            )
        return out


class JobListOut(BaseModel):
    jobs: list[JobSummaryOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")
    count: int = Field(description=f"jobs matching the filters (at most {store.COUNT_CAP})")
    count_exact: bool = Field(description=f"false: {store.COUNT_CAP} or more jobs match")


@router.get(
    "/jobs",
    response_model=JobListOut,
    summary="List jobs: filter by name prefix, paused, task type, priority, last run status",
)
async def list_jobs(
    request: Request,
    caller: Caller,
    name_prefix: Annotated[
        str | None,
        Query(pattern=NO_CONTROL, max_length=200, description="names starting with this"),
    ] = None,
    paused: Annotated[bool | None, Query(description="only paused (true) or active")] = None,
    task_type: Annotated[TaskTypeName | None, Query(description="the task's type")] = None,
    priority: Annotated[Priority | None, Query(description="the job's priority")] = None,
    last_status: Annotated[
        LastStatus | None, Query(description="status of the last run, or `none` (never ran)")
    ] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=store.MAX_PAGE)] = 50,
) -> JobListOut:
    """Jobs in name order (byte order: `B` before `a`); a page and the count of all
    matches. The count stops at 10,000 (`count_exact` false beyond)."""
    filters = store.JobFilter(
        name_prefix=name_prefix or None,
        paused=paused,
        task_type=task_type or None,
        priority=priority or None,
        last_status=last_status or None,
        task_types=TASK_TYPES,
    )
    page = await run_in_threadpool(
        store.jobs_list, engine_of(request), caller.tenant, filters, cursor, limit
    )
    return JobListOut(
        jobs=[JobSummaryOut.of_listed(job, last) for job, last in page.jobs],
        next_cursor=page.next_cursor,
        count=page.count,
        count_exact=page.count_exact,
    )

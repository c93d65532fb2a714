"""The /v1 routes: jobs and their runs. Every object is scoped to the caller's tenant;
another tenant's id is simply not found (404), never forbidden, so ids leak nothing.

A job with a command task is written only when the token has the `command` scope and
the operator's task policy allows that executable for the tenant (kit.core.task_policy);
otherwise 403 with the reason, and nothing is written. Likewise a job's priority tier
must be one the operator's tenant policy allows the tenant (403, field `priority`; a
job that names none gets the tenant's default tier), and a create that would take the
tenant past its `max_jobs` is refused (kit.api.tenancy)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy import Engine

from kit.api.auth import Caller, IdempotencyKey, principal
from kit.api.body import StrictJsonRoute
from kit.api.declared import Cursor
from kit.api.errors import ApiError
from kit.api.ids import JobId
from kit.api.models import (
    JobBatchIn,
    JobBatchOut,
    JobIn,
    JobOut,
    JobPatch,
    RunOut,
    RunPageOut,
    RunStateName,
    check_limits,
    check_one_off_grace,
    check_task_size,
    job_fields,
    run_fields,
    trusted_json,
)
from kit.api.state import db_pool, in_store
from kit.api.tenancy import (
    REFUSED,
    check_tier,
    job_limit_refused,
    limits_of,
    tier_not_allowed,
    tier_refused,
)
from kit.core.errors import FieldError
from kit.core.tenancy import TenantLimits
from kit.settings import Settings
from kit.store import jobs as job_store
from kit.store import runs as run_store
from kit.store.errors import JobLimitReached, NameTaken, TierNotAllowed
from kit.store.tokens import TokenInfo

router = APIRouter(
    prefix="/v1",
    dependencies=[Depends(principal)],
    route_class=StrictJsonRoute,
)


def _engine(request: Request) -> Engine:
    return request.app.state.engine


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def task_refusal(
    request: Request, caller: TokenInfo, task: Mapping[str, Any], prefix: str = ""
) -> tuple[str, str] | None:
    """(field, reason) if this caller may not write this task, else None."""
    if task.get("type") != "command":
        return None
    if not caller.allows("command"):
        return f"{prefix}task.type", "a command task needs a token with the 'command' scope"
    refusal = request.app.state.task_policy.current().command_refusal(caller.tenant, task)
    if refusal is None:
        return None
    return f"{prefix}{refusal[0]}", refusal[1]


def with_tier(body: JobIn, spec: job_store.JobSpec, limits: TenantLimits) -> job_store.JobSpec:
    """The spec with the tenant's default tier when the client named none."""
    if "priority" in body.model_fields_set:
        return spec
    return replace(spec, priority=limits.default_tier)


def _forbidden(problems: list[tuple[str, str]]) -> ApiError:
    return ApiError(403, f"{problems[0][0]}: {problems[0][1]}", problems)


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobOut,
    tags=["jobs"],
    summary="Create a job and its first trigger",
    responses={200: {"model": JobOut, "description": "idempotent replay of an earlier create"}},
)
async def create_job(
    body: JobIn,
    request: Request,
    caller: Caller,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """A retried create with the same `Idempotency-Key` and body returns the same job
    (200); the same key with another body is a 409."""
    settings = _settings(request)
    limits = limits_of(request, caller.tenant)
    spec = with_tier(body, body.to_spec(), limits)
    check_limits(spec, datetime.now(UTC), settings.one_off_grace_s, settings.max_task_spec_bytes)
    if refusal := task_refusal(request, caller, spec.task):
        raise _forbidden([refusal])
    if reason := limits.tier_refusal(spec.priority):
        raise tier_refused(caller.tenant, reason)
    request_hash = None
    if idempotency_key is not None:
        request_hash = job_store.request_fingerprint(await request.json())
    params = job_store.JobCreate(
        tenant=caller.tenant,
        spec=spec,
        partitions=settings.partitions,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        actor=caller.token_id,
        max_jobs=limits.max_jobs,
    )
    try:
        result = await job_store.job_create_async(db_pool(request), params)
    except JobLimitReached as exc:
        raise job_limit_refused(caller.tenant, exc) from exc
    if not result.created:
        return trusted_json(job_fields(result.job), 200, {"Idempotent-Replayed": "true"})
    return trusted_json(job_fields(result.job), 201)


@router.post(
    "/jobs:batch",
    status_code=201,
    response_model=JobBatchOut,
    tags=["jobs"],
    summary="Create many jobs at once, all or nothing",
)
def create_jobs_batch(body: JobBatchIn, request: Request, caller: Caller) -> JobBatchOut:
    """Up to 5,000 jobs per call. Any invalid job refuses the whole batch with a 422 that
    names each problem (`jobs[17].schedule.cron`); nothing is written."""
    settings = _settings(request)
    limits = limits_of(request, caller.tenant)
    now = datetime.now(UTC)
    specs: list[job_store.JobSpec] = []
    problems: list[tuple[str, str]] = []
    first_index: dict[str, int] = {}
    for index, job in enumerate(body.jobs):
        try:
            spec = with_tier(job, job.to_spec(), limits)
            check_limits(spec, now, settings.one_off_grace_s, settings.max_task_spec_bytes)
        except FieldError as exc:
            problems.append((f"jobs[{index}].{exc.field}", exc.reason))
            continue
        if spec.name in first_index:
            problems.append(
                (f"jobs[{index}].name", f"duplicates jobs[{first_index[spec.name]}].name")
            )
        first_index.setdefault(spec.name, index)
        specs.append(spec)
    if problems:
        raise ApiError(422, f"{problems[0][0]}: {problems[0][1]}", problems)
    refusals = [
        refusal
        for index, spec in enumerate(specs)
        if (refusal := task_refusal(request, caller, spec.task, f"jobs[{index}]."))
    ]
    refusals += [
        (f"jobs[{index}].priority", reason)
        for index, spec in enumerate(specs)
        if (reason := limits.tier_refusal(spec.priority))
    ]
    if refusals:
        if any(field.endswith(".priority") for field, _ in refusals):
            REFUSED.labels(caller.tenant, "tiers").inc()
        raise _forbidden(refusals)
    try:
        job_ids = job_store.jobs_create_batch(
            _engine(request),
            caller.tenant,
            specs,
            settings.partitions,
            actor=caller.token_id,
            max_jobs=limits.max_jobs,
        )
    except JobLimitReached as exc:
        raise job_limit_refused(caller.tenant, exc) from exc
    except NameTaken as exc:
        fields = [
            (f"jobs[{first_index[name]}].name", f"{name!r} is already used by another job")
            for name in exc.names
            if name in first_index
        ]
        raise ApiError(409, str(exc), fields, code="name_taken") from exc
    return JobBatchOut(count=len(job_ids), job_ids=job_ids)


@router.get("/jobs/{job_id:id}", response_model=JobOut, tags=["jobs"], summary="Get a job")
async def get_job(job_id: JobId, request: Request, caller: Caller) -> Response:
    job = await job_store.job_get_async(db_pool(request), caller.tenant, job_id)
    return trusted_json(job_fields(job))


@router.patch(
    "/jobs/{job_id:id}",
    response_model=JobOut,
    tags=["jobs"],
    summary="Edit a job (also pause and resume); bumps its version",
)
async def update_job(job_id: JobId, body: JobPatch, request: Request, caller: Caller) -> Response:
    """Send only the fields to change. The job's trigger is replaced by one of the new
    version in the same transaction, so the old version never fires."""
    return trusted_json(job_fields(await job_edit(job_id, body, request, caller)))


async def job_edit(
    job_id: str, body: JobPatch, request: Request, caller: TokenInfo
) -> job_store.JobRecord:
    """The edit of PATCH /v1/jobs/{job_id} (the console edits through it too)."""
    settings = _settings(request)
    changes: dict[str, Any] = body.changes()
    if "schedule" in changes:
        check_one_off_grace(changes["schedule"], datetime.now(UTC), settings.one_off_grace_s)
    if "task" in changes:
        check_task_size(changes["task"], settings.max_task_spec_bytes)
        if refusal := task_refusal(request, caller, changes["task"]):
            raise _forbidden([refusal])
    if "priority" in changes:
        check_tier(request, caller.tenant, changes["priority"])
    params = job_store.JobUpdate(
        tenant=caller.tenant,
        job_id=job_id,
        changes=changes,
        partitions=settings.partitions,
        actor=caller.token_id,
    )
    return await job_store.job_update_async(db_pool(request), params)


@router.delete(
    "/jobs/{job_id:id}",
    status_code=204,
    response_class=Response,
    tags=["jobs"],
    summary="Delete a job and its triggers (its run history stays)",
)
async def delete_job(job_id: JobId, request: Request, caller: Caller) -> Response:
    await job_store.job_delete_async(db_pool(request), caller.tenant, job_id, actor=caller.token_id)
    return Response(status_code=204)


@router.get(
    "/jobs/{job_id:id}/runs",
    response_model=RunPageOut,
    tags=["runs"],
    summary="A job's runs, newest first",
)
async def list_runs(
    job_id: JobId,
    request: Request,
    caller: Caller,
    status: Annotated[RunStateName | None, Query(description="only runs in this status")] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=run_store.MAX_PAGE)] = 50,
) -> Response:
    page = await run_store.runs_list_async(
        db_pool(request), caller.tenant, job_id, status, cursor, limit
    )
    body = {"runs": [run_fields(r) for r in page.runs], "next_cursor": page.next_cursor}
    return trusted_json(body)


@router.post(
    "/jobs/{job_id:id}/runs",
    status_code=202,
    response_model=RunOut,
    tags=["runs"],
    summary="Run a job now (a manual run, dispatched asynchronously)",
    responses={200: {"model": RunOut, "description": "idempotent replay of an earlier run-now"}},
)
async def run_job_now(
    job_id: JobId,
    request: Request,
    response: Response,
    caller: Caller,
    idempotency_key: IdempotencyKey = None,
) -> RunOut:
    """A retried run-now with the same `Idempotency-Key` returns the run the first call
    made (200); the same key for another job, or one used by a job create, is a 409."""
    try:
        run, created = await in_store(
            request,
            run_store.run_now,
            caller.tenant,
            job_id,
            actor=caller.token_id,
            idempotency_key=idempotency_key,
            tiers=limits_of(request, caller.tenant).tiers,
        )
    except TierNotAllowed as exc:
        raise tier_not_allowed(request, caller.tenant, exc) from exc
    if idempotency_key is not None and not created:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    return RunOut.of(run)

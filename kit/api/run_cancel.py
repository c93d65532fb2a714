"""POST /v1/runs/{id}:cancel: stop a run; who cancelled it is recorded on the run."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.errors import ApiError
from kit.api.ids import RunId
from kit.api.models import RunOut
from kit.api.state import engine_of
from kit.store import run_cancel as store

router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["runs"])


class CancelledOut(RunOut):
    was: str = Field(description="the run's status before the cancel")
    worker_notified: bool = Field(
        description="it was running: its worker was told to stop the task now"
    )


@router.post(
    "/runs/{run_id:id}:cancel",
    response_model=CancelledOut,
    summary="Cancel a run: not started -> cancelled at once; running -> its task is stopped",
    responses={409: {"description": "the run already finished"}},
)
async def cancel_run(run_id: RunId, request: Request, caller: Caller) -> CancelledOut:
    """The run becomes `cancelled` with `cancelled_by` (the token). A running run's
    worker hears of it at commit (PostgreSQL NOTIFY) and stops the task: a command's
    process group gets SIGTERM then SIGKILL after 2 s, an HTTP request is abandoned, a
    sleep cut short. If the worker missed the notice, its next heartbeat finds the lease
    gone (within CRONFLEET_RUN_LEASE_TTL_MS / 3). A finished run is a 409."""
    try:
        done = await run_in_threadpool(
            store.run_cancel, engine_of(request), caller.tenant, run_id, caller.token_id
        )
    except store.RunFinished as exc:
        raise ApiError(409, str(exc), code="run_finished") from exc
    out = RunOut.of(done.run).model_dump()
    return CancelledOut(**out, was=done.was, worker_notified=done.notified)

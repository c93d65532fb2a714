"""The operator's kill switches over HTTP (kit.store.switches): list them, turn one off,
lift it. Only the operator (a token of CRONFLEET_OPERATOR_TENANT with the `admin`
scope, as for the fleet view) may; any other token gets a 403. `cronfleet switch`
does the same from a shell."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.body import StrictJsonRoute
from kit.api.errors import ApiError
from kit.api.state import engine_of, settings_of
from kit.api.tenancy import is_operator_token
from kit.core.defaults import misfire_grace_ms
from kit.core.switches import MAX_REASON_CHARS, MAX_VALUE_CHARS, Switch, parse_switch
from kit.settings import Settings
from kit.store import switches as store
from kit.tasks import registry

router = APIRouter(
    prefix="/v1", dependencies=[Depends(principal)], route_class=StrictJsonRoute, tags=["fleet"]
)
OPERATOR_ONLY = (
    "the kill switches are the operator's (a token of CRONFLEET_OPERATOR_TENANT with the "
    "'admin' scope)"
)


class SwitchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["tenant", "task_type", "tier"]
    value: str = Field(min_length=1, max_length=MAX_VALUE_CHARS)
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)


class SwitchOut(BaseModel):
    kind: str
    value: str
    reason: str
    actor: str
    since: datetime
    held: int = Field(description="runs due and not started because of this switch")


class SwitchAuditOut(BaseModel):
    at: datetime
    actor: str
    action: str = Field(description="off | on")
    kind: str
    value: str
    reason: str
    held: int | None = Field(description="on: the runs it held when lifted")
    skipped: int | None = Field(description="on: held runs their misfire policy skipped")


class SwitchesOut(BaseModel):
    switches: list[SwitchOut] = Field(description="every switch that is off, oldest first")
    recent: list[SwitchAuditOut] = Field(description="the latest switch changes, newest first")


class SwitchOffOut(BaseModel):
    switch: SwitchOut
    changed: bool = Field(description="false: it was already off (with this reason)")


class SwitchOnOut(BaseModel):
    kind: str
    value: str
    since: datetime = Field(description="when it had been turned off")
    kept: int = Field(description="held runs that now run (published by the reaper)")
    skipped: int = Field(description="held runs their job's misfire policy skipped")


def operator_switch(request: Request, caller: object, body: SwitchIn) -> Switch:
    if not is_operator_token(settings_of(request), caller):  # type: ignore[arg-type]
        raise ApiError(403, OPERATOR_ONLY)
    return parse_switch(body.kind, body.value, registry.names())


def switch_out(state: store.SwitchState) -> SwitchOut:
    return SwitchOut(
        kind=state.kind,
        value=state.value,
        reason=state.reason,
        actor=state.actor,
        since=state.since,
        held=state.held,
    )


def lift_grace_ms(settings: Settings) -> int:
    """The scheduler's misfire grace with this fleet's timings (kit.core.defaults)."""
    return misfire_grace_ms(settings.partition_lease_ttl_ms, settings.node_heartbeat_ms)


@router.get("/switches", response_model=SwitchesOut, summary="The kill switches (operator only)")
async def list_switches(request: Request, caller: Caller) -> SwitchesOut:
    if not is_operator_token(settings_of(request), caller):
        raise ApiError(403, OPERATOR_ONLY)
    engine = engine_of(request)
    states = await run_in_threadpool(store.switches_list, engine)
    recent = await run_in_threadpool(store.switch_audit_list, engine, 50)
    return SwitchesOut(
        switches=[switch_out(s) for s in states],
        recent=[SwitchAuditOut(**vars(e)) for e in recent],
    )


@router.post(
    "/switches:off",
    response_model=SwitchOffOut,
    summary="Stop starting runs of a tenant, a task type or a tier, fleet-wide (operator only)",
)
async def switch_off(body: SwitchIn, request: Request, caller: Caller) -> SwitchOffOut:
    """Runs it holds stay pending and are counted; none is dropped. Runs already claimed
    by a worker (their second within the scan-ahead) or running are not stopped."""
    switch = operator_switch(request, caller, body)
    state, changed = await run_in_threadpool(
        store.switch_off, engine_of(request), switch, body.reason, caller.token_id
    )
    return SwitchOffOut(switch=switch_out(state), changed=changed)


@router.post(
    "/switches:on",
    response_model=SwitchOnOut,
    summary="Lift a switch: its held runs go through their job's misfire policy (operator only)",
    responses={404: {"description": "that switch is not off"}},
)
async def switch_on(body: SwitchIn, request: Request, caller: Caller) -> SwitchOnOut:
    switch = operator_switch(request, caller, body)
    try:
        lifted = await run_in_threadpool(
            store.switch_on,
            engine_of(request),
            switch,
            caller.token_id,
            lift_grace_ms(settings_of(request)),
            body.reason,
        )
    except store.SwitchNotOff as exc:
        raise ApiError(404, str(exc), [("value", str(exc))], code="switch_not_off") from exc
    return SwitchOnOut(
        kind=switch.kind.value,
        value=switch.value,
        since=lifted.since,
        kept=len(lifted.kept),
        skipped=len(lifted.skipped),
    )

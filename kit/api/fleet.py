"""What each caller sees of the fleet (docs/security.md, "What a tenant sees of the fleet").

- A tenant sees its own: GET /v1/in-flight (`read`) counts its unfinished runs per
  priority tier (waiting: due and not claimed yet, its share of the workers' lag) and how
  long the oldest has waited. Nothing of other tenants' runs, of workers, scheduler
  nodes, topics or the consumer group.
- The fleet-wide view (GET /v1/fleet: nodes and their partitions, workers and every
  tenant's runs in flight, the consumer group, lag per tier, every tenant's figures from
  the workers' reports) is the operator's: only a
  token of the tenant `CRONFLEET_OPERATOR_TENANT` names, with the `admin` scope. Any
  other token, a tenant's `admin` included, gets a 403; unset, no token does.
- The lag is read from the broker by the process's one LagSampler (kit.api.lag_sampler),
  never per request.

`tests/integration/test_fleet_view.py`.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.errors import ApiError
from kit.api.lag_sampler import LAG_SAMPLE_S, LagSampler
from kit.api.state import engine_of, group_id_of, settings_of, topic_prefix_of
from kit.core.tenant_figures import WINDOW_S
from kit.store.console_sessions import ConsoleSession
from kit.store.fleet import FleetView, InFlightView, fleet_read, in_flight_read
from kit.store.tokens import TokenInfo
from kit.transport.lag import TierLag, tier_lags

router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["fleet"])
NOT_OPERATOR = (
    "the fleet-wide view is the operator's (a token of CRONFLEET_OPERATOR_TENANT with the "
    "'admin' scope); GET /v1/in-flight shows this tenant's own runs"
)


class NodeOut(BaseModel):
    node_id: str
    live: bool
    partitions: int = Field(description="partitions whose lease it holds now")
    heartbeat_at: datetime
    started_at: datetime


class WorkerOut(BaseModel):
    worker_id: str
    live: bool
    in_flight: int = Field(description="runs it holds a live lease on")
    concurrency: int | None
    heartbeat_at: datetime | None
    started_at: datetime | None


class TierOut(BaseModel):
    tier: str
    topic: str
    lag: int | None = Field(description="messages not yet consumed (null: no topic yet)")
    partitions: int


class TenantFleetOut(BaseModel):
    tenant: str = Field(description="a tenant, or `_other`: the tenants past the workers' labels")
    started: int = Field(description="runs started over the last minute, summed over live workers")
    waiting_share: int = Field(description="due runs waiting now for the other tenants' turn")
    waiting_limit: int = Field(description="due runs waiting now at the tenant's own limit")
    limited: int = Field(
        description="times over the last minute a free slot passed the tenant over for its limit"
    )
    lag_p99_s: float | None = Field(
        description="start lag p99 of first attempts over the last minute: the largest of the "
        "live workers' p99s (null: none started)"
    )


class FleetOut(BaseModel):
    now: datetime
    partitions: int
    partitions_unowned: int
    nodes: list[NodeOut]
    workers: list[WorkerOut]
    consumer_group: str
    tiers: list[TierOut]
    lag_sampled_at: datetime = Field(
        description=f"when the lag was read from the broker (at most every {LAG_SAMPLE_S:g} s)"
    )
    kafka_error: str | None = Field(description="why the lag could not be read, if it could not")
    tenants: list[TenantFleetOut] = Field(
        description="each tenant the live workers reported, by tenant (their last presence beat)"
    )
    tenants_window_s: float = Field(description="the window of `started`, `limited`, `lag_p99_s`")


class TierInFlightOut(BaseModel):
    tier: str
    waiting: int = Field(description="due, not claimed by a worker yet: this tenant's lag")
    ahead: int = Field(description="written ahead of their second")
    held: int = Field(description="held back by the job's overlap policy (queue)")
    claimed: int = Field(description="a worker holds it and waits for its second")
    running: int = Field(description="its second has come and a worker holds it")
    retry_scheduled: int
    oldest_waiting_at: datetime | None = Field(description="the oldest waiting run's time")


class InFlightOut(BaseModel):
    now: datetime
    tiers: list[TierInFlightOut] = Field(description="every priority tier, most urgent first")


def is_operator(request: Request, who: TokenInfo | ConsoleSession | None) -> bool:
    """A token of the operator's tenant (the setting; never a tenant's choice) that has
    the `admin` scope."""
    token = who.token if isinstance(who, ConsoleSession) else who
    tenant = settings_of(request).operator_tenant
    return bool(tenant) and token is not None and token.tenant == tenant and token.allows("admin")


def _sampler(request: Request) -> LagSampler:
    """The process's one sampler, made on first use (on the event loop: no race) with
    the group and topics `cronfleet api` named."""
    state = request.app.state
    sampler: LagSampler | None = getattr(state, "lag_sampler", None)
    if sampler is None:
        bootstrap = settings_of(request).kafka_bootstrap
        group, prefix = group_id_of(request), topic_prefix_of(request)
        sampler = LagSampler(lambda: tier_lags(bootstrap, group, topic_prefix=prefix), LAG_SAMPLE_S)
        state.lag_sampler = sampler
    return sampler


async def fleet_now(request: Request) -> tuple[FleetView, list[TierLag], str | None, datetime]:
    """The operator's view: the database's now, the latest lag sample."""
    settings = settings_of(request)
    view = await run_in_threadpool(
        fleet_read, engine_of(request), settings.partitions, settings.partition_lease_ttl_ms
    )
    sample = await _sampler(request).latest()
    return view, sample.tiers, sample.error, sample.at


async def in_flight_now(request: Request, tenant: str) -> InFlightView:
    return await run_in_threadpool(in_flight_read, engine_of(request), tenant)


@router.get(
    "/fleet",
    response_model=FleetOut,
    summary="The fleet (operator only): nodes, partitions, lag, workers",
)
async def fleet(request: Request, caller: Caller) -> FleetOut:
    if not is_operator(request, caller):
        raise ApiError(403, NOT_OPERATOR)
    view, tiers, error, sampled_at = await fleet_now(request)
    return FleetOut(
        now=view.now,
        partitions=view.partitions_total,
        partitions_unowned=view.partitions_unowned,
        nodes=[NodeOut(**n.__dict__) for n in view.nodes],
        workers=[WorkerOut(**w.__dict__) for w in view.workers],
        consumer_group=group_id_of(request),
        tiers=[TierOut(**t.__dict__) for t in tiers],
        lag_sampled_at=sampled_at,
        kafka_error=error,
        tenants=[TenantFleetOut(**t.__dict__) for t in view.tenants],
        tenants_window_s=WINDOW_S,
    )


@router.get(
    "/in-flight",
    response_model=InFlightOut,
    summary="This tenant's unfinished runs per priority tier",
)
async def in_flight(request: Request, caller: Caller) -> InFlightOut:
    view = await in_flight_now(request, caller.tenant)
    return InFlightOut(now=view.now, tiers=[TierInFlightOut(**t.__dict__) for t in view.tiers])

"""GET /v1/fleet (admin scope): scheduler nodes and their partitions, consumer lag per
priority tier, workers. Operator information: a token without `admin` gets a 403."""

from __future__ import annotations

from datetime import datetime

from confluent_kafka import KafkaException
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from kit.api.auth import Caller, principal
from kit.api.errors import ApiError
from kit.api.state import engine_of, group_id_of, settings_of, topic_prefix_of
from kit.store.fleet import FleetView, fleet_read
from kit.transport.lag import TierLag, tier_lags

router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["fleet"])


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


class FleetOut(BaseModel):
    now: datetime
    partitions: int
    partitions_unowned: int
    nodes: list[NodeOut]
    workers: list[WorkerOut]
    consumer_group: str
    tiers: list[TierOut]
    kafka_error: str | None = Field(description="why the lag could not be read, if it could not")


def require_admin(caller: Caller) -> None:
    if not caller.allows("admin"):
        raise ApiError(403, "the fleet view needs the 'admin' scope")


async def fleet_now(request: Request) -> tuple[FleetView, list[TierLag], str | None]:
    settings = settings_of(request)
    view = await run_in_threadpool(
        fleet_read, engine_of(request), settings.partitions, settings.partition_lease_ttl_ms
    )
    group, prefix = group_id_of(request), topic_prefix_of(request)
    try:
        tiers = await run_in_threadpool(
            lambda: tier_lags(settings.kafka_bootstrap, group, topic_prefix=prefix)
        )
        error = None
    except KafkaException as exc:
        tiers, error = [], str(exc)
    return view, tiers, error


@router.get("/fleet", response_model=FleetOut, summary="The fleet: nodes, partitions, lag, workers")
async def fleet(request: Request, caller: Caller) -> FleetOut:
    require_admin(caller)
    view, tiers, error = await fleet_now(request)
    return FleetOut(
        now=view.now,
        partitions=view.partitions_total,
        partitions_unowned=view.partitions_unowned,
        nodes=[NodeOut(**n.__dict__) for n in view.nodes],
        workers=[WorkerOut(**w.__dict__) for w in view.workers],
        consumer_group=group_id_of(request),
        tiers=[TierOut(**t.__dict__) for t in tiers],
        kafka_error=error,
    )

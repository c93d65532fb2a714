"""The fleet as PostgreSQL knows it: the operator's view (scheduler nodes and the
partitions each owns, workers and what they are running, every tenant's runs, and every
tenant's figures summed over the live workers' reports, kit.core.tenant_figures), and a
tenant's own (its unfinished runs per tier). Database clock throughout, unless a caller
(a test) passes `now`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from kit.core.dispatch import PRIORITY_TIERS
from kit.core.tenant_figures import TenantFigure, fleet_figures
from kit.core.trigger import QUEUED
from kit.store.db import NOW_SQL, db_now
from kit.store.runs import run_state_sql
from kit.store.vocab import (
    BUSY_SQL,
    RUN_PENDING,
    RUN_RETRY_SCHEDULED,
    RUN_RUNNING,
    STATE_CLAIMED,
    STATE_RUNNING,
)


@dataclass(frozen=True)
class NodeView:
    node_id: str
    heartbeat_at: datetime
    started_at: datetime
    live: bool
    partitions: int  # partitions whose unexpired lease it holds


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    heartbeat_at: datetime | None
    started_at: datetime | None
    live: bool
    concurrency: int | None
    in_flight: int  # runs it holds a lease on now (the database's count)


@dataclass(frozen=True)
class FleetView:
    now: datetime
    nodes: list[NodeView]
    partitions_total: int  # CRONFLEET_PARTITIONS
    partitions_unowned: int  # no live owner: nothing scans them until a node takes them
    workers: list[WorkerView]
    tenants: list[TenantFigure]  # summed over the live workers' presence rows, by tenant


_NODES = f"""
SELECT n.node_id, n.heartbeat_at, n.started_at,
       n.heartbeat_at > {NOW_SQL} - make_interval(secs => :node_ttl_s) AS live,
       count(l.partition_id) AS partitions
FROM scheduler_nodes n
LEFT JOIN partition_leases l ON l.owner = n.node_id AND l.expires_at > {NOW_SQL}
GROUP BY n.node_id, n.heartbeat_at, n.started_at
ORDER BY n.node_id
"""
_OWNED = f"""
SELECT count(*) FROM partition_leases
WHERE owner IS NOT NULL AND expires_at > {NOW_SQL} AND partition_id < :partitions
"""
# Workers: presence rows, plus any worker id holding a live lease without one (a worker
# of an older version, or one whose link is reconnecting). Running runs are found by
# the (status, lease_expires_at) index.
_WORKERS = f"""
WITH running AS (
    SELECT worker_id, count(*) AS n FROM runs
    WHERE status = {RUN_RUNNING} AND lease_expires_at > {NOW_SQL} AND worker_id IS NOT NULL
    GROUP BY worker_id
)
SELECT coalesce(w.worker_id, r.worker_id) AS worker_id, w.heartbeat_at, w.started_at,
       coalesce(w.heartbeat_at > {NOW_SQL} - make_interval(secs => :worker_ttl_s), r.n > 0)
           AS live,
       w.concurrency, coalesce(r.n, 0) AS in_flight, w.tenants
FROM workers w FULL JOIN running r ON r.worker_id = w.worker_id
ORDER BY 1
"""


def fleet_read(
    engine: Engine,
    partitions: int,
    node_ttl_ms: int,
    worker_ttl_s: float = 15.0,
    *,
    now: datetime | None = None,
) -> FleetView:
    """A node is live while its heartbeat is younger than `node_ttl_ms` at `now`, a worker
    while its presence row is younger than `worker_ttl_s` (or it holds a live lease)."""
    with engine.begin() as conn:
        at = db_now(conn, now)
        nodes = [
            NodeView(r.node_id, r.heartbeat_at, r.started_at, bool(r.live), int(r.partitions))
            for r in conn.execute(text(_NODES), {"node_ttl_s": node_ttl_ms / 1000, "now": now})
        ]
        owned = conn.execute(text(_OWNED), {"partitions": partitions, "now": now}).scalar_one()
        rows = conn.execute(text(_WORKERS), {"worker_ttl_s": worker_ttl_s, "now": now}).all()
    workers = [
        WorkerView(
            r.worker_id, r.heartbeat_at, r.started_at, bool(r.live), r.concurrency, int(r.in_flight)
        )
        for r in rows
    ]
    tenants = fleet_figures(r.tenants for r in rows if r.live)
    return FleetView(at, nodes, partitions, partitions - int(owned), workers, tenants)


@dataclass(frozen=True)
class TierInFlight:
    tier: str
    waiting: int  # due, published, not claimed yet: the tenant's share of the lag
    ahead: int  # written ahead of their second (the scheduler's scan-ahead)
    held: int  # held back by the job's overlap policy (`queue`), not published yet
    claimed: int  # a worker holds it and waits for its second (kit.core.run_state)
    running: int
    retry_scheduled: int
    oldest_waiting_at: datetime | None


@dataclass(frozen=True)
class InFlightView:
    now: datetime
    tiers: list[TierInFlight]


# One tenant's unfinished runs, through its own jobs (jobs by tenant, then each job's
# unfinished runs by the partial index ix_runs_busy_job_id): the cost is the tenant's,
# whatever the rest of the fleet holds.
_IN_FLIGHT = f"""
WITH mine AS (
    SELECT r.priority, r.status, r.scheduled_at, {run_state_sql("r", NOW_SQL)} AS state,
           r.status = {RUN_PENDING} AND r.skip_reason IS NOT DISTINCT FROM :held AS held
    FROM jobs j JOIN runs r ON r.job_id = j.job_id
    WHERE j.tenant = :tenant AND r.tenant = :tenant AND r.status IN {BUSY_SQL}
)
SELECT priority,
       count(*) FILTER (WHERE status = {RUN_PENDING} AND NOT held
                        AND scheduled_at <= {NOW_SQL}) AS waiting,
       count(*) FILTER (WHERE status = {RUN_PENDING} AND NOT held
                        AND scheduled_at > {NOW_SQL}) AS ahead,
       count(*) FILTER (WHERE held) AS held,
       count(*) FILTER (WHERE state = {STATE_CLAIMED}) AS claimed,
       count(*) FILTER (WHERE state = {STATE_RUNNING}) AS running,
       count(*) FILTER (WHERE status = {RUN_RETRY_SCHEDULED}) AS retry_scheduled,
       min(scheduled_at) FILTER (WHERE status = {RUN_PENDING} AND NOT held
                                 AND scheduled_at <= {NOW_SQL}) AS oldest_waiting_at
FROM mine GROUP BY priority
"""


def in_flight_read(engine: Engine, tenant: str, *, now: datetime | None = None) -> InFlightView:
    """A tenant's unfinished runs per priority tier (every tier, most urgent first), by
    the database's clock unless `now` is given: what a tenant may see of the fleet."""
    with engine.begin() as conn:
        at = db_now(conn, now)
        rows = {
            r.priority: r
            for r in conn.execute(
                text(_IN_FLIGHT), {"tenant": tenant, "now": now, "held": QUEUED.value}
            )
        }
    tiers = []
    for tier in PRIORITY_TIERS:
        r = rows.get(tier)
        tiers.append(
            TierInFlight(
                tier,
                int(r.waiting) if r else 0,
                int(r.ahead) if r else 0,
                int(r.held) if r else 0,
                int(r.claimed) if r else 0,
                int(r.running) if r else 0,
                int(r.retry_scheduled) if r else 0,
                r.oldest_waiting_at if r else None,
            )
        )
    return InFlightView(at, tiers)

"""Fleet-wide gauges read from the database, the source of truth: how many trigger
partitions no scheduler node holds right now, and how many dead letters wait for a replay.
The reaper publishes them (kit/reaper), so an alarm needs no node to report its own death."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from kit.store.db import NOW_SQL


@dataclass(frozen=True)
class FleetHealth:
    partitions_unowned: int
    dead_letters_waiting: int


def fleet_health_read(
    engine: Engine, partitions: int, *, now: datetime | None = None
) -> FleetHealth:
    """One short read: partitions without an unexpired lease at `now` (the database's
    clock by default) among 0..partitions-1, and dead letters not replayed."""
    with engine.connect() as conn:
        owned = conn.execute(
            text(
                "SELECT count(*) FROM partition_leases WHERE owner IS NOT NULL "
                f"AND expires_at > {NOW_SQL} AND partition_id < :n"
            ),
            {"n": partitions, "now": now},
        ).scalar_one()
        waiting = conn.execute(
            text("SELECT count(*) FROM dead_letters WHERE replayed_at IS NULL")
        ).scalar_one()
    return FleetHealth(
        partitions_unowned=partitions - int(owned), dead_letters_waiting=int(waiting)
    )

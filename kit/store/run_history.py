"""Run history at scale: `runs` is partitioned by day, on ranges of the run id (whose
first 48 bits are the scheduled instant, kit.core.ids), so a day of history is dropped
as a table, not deleted row by row, and a lookup by id reaches one day's partition.

`runs_default` takes what has no day of its own: runs of a day never created (a backfill
of last month, the history older than yesterday that migration 0011 re-keyed), and runs
kept past the retention because the kit still needs them
(kit.core.retention.run_kept_past_retention). Old rows leave it in bounded batches.

The kit does this itself rather than through pg_partman: it is three statements a day
that must agree with the id layout in kit.core.ids and with the rule of what is kept,
both tested here; pg_partman would need the extension installed on every server (and on
RDS at a version RDS offers) and still could not move live runs out of a day it drops.

Lock costs, stated: creating a day (`CREATE TABLE ... PARTITION OF`) and dropping one
(`DETACH`, then `DROP`) take an ACCESS EXCLUSIVE lock on `runs` for the length of a
catalog change plus, for a drop, the copy of the day's kept runs, found over partial
indexes; both wait at most `LOCK_TIMEOUT` and are retried next pass rather than queue
the fleet behind them. Creating a day also checks `runs_default` for rows of that day
(a scan of it: small unless an upgrade left old history there).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TypeVar

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from kit.core.ids import run_id_floor
from kit.core.retention import (
    day_bounds_ms,
    plan_run_days,
    run_days_wanted,
    run_history_cutoff_ms,
)
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.crash import crash_point
from kit.store.vocab import BUSY_SQL

DEFAULT_PARTITION = "runs_default"
LOCK_TIMEOUT = "2s"
DEFAULT_AHEAD_DAYS = 3
_DAY_NAME = re.compile(r"^runs_(\d{4})(\d{2})(\d{2})$")
_LIVE = BUSY_SQL  # kit.core.retention.LIVE_RUN_STATUSES: runs a day's history keeps


def in_batch(alias: str) -> str:
    """SQL bounding a batch of runs by its lowest and highest id (:lo, :hi; batch_bounds):
    the planner keeps only the days the batch falls in. A range, checked in O(1) beside
    a key; the batch's list there was evaluated whole per run looked up (kit.store.claims
    says more)."""
    return f"{alias}.run_id BETWEEN CAST(:lo AS uuid) AND CAST(:hi AS uuid)"


def batch_bounds(run_ids: Iterable[str]) -> dict[str, str]:
    """The :lo and :hi of in_batch (uuid text sorts as the uuids do)."""
    ids = [str(r).lower() for r in run_ids]
    return {"lo": min(ids), "hi": max(ids)}


def partition_name(day: date) -> str:
    return f"runs_{day:%Y%m%d}"


def is_run_partition(name: str) -> bool:
    """A table the kit made as a partition of `runs` (not a model of kit.store.schema)."""
    return name == DEFAULT_PARTITION or _DAY_NAME.match(name) is not None


def day_of_partition(name: str) -> date | None:
    m = _DAY_NAME.match(name)
    return date(int(m[1]), int(m[2]), int(m[3])) if m else None


@dataclass(frozen=True)
class RunPartition:
    name: str
    day: date | None  # None: the default partition
    rows_estimate: int  # pg_class.reltuples (-1 before the first analyze)
    bytes: int  # table, indexes and TOAST


def run_partitions(conn: Connection) -> list[RunPartition]:
    """Every partition of `runs`, days in order, the default last."""
    rows = conn.execute(
        text(
            """
            SELECT c.relname, c.reltuples::bigint AS rows, pg_total_relation_size(c.oid) AS bytes
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'runs'::regclass
            """
        )
    ).all()
    parts = [RunPartition(r.relname, day_of_partition(r.relname), r.rows, r.bytes) for r in rows]
    return sorted(parts, key=lambda p: (p.day is None, p.day or date.min))


def _bounds(day: date) -> tuple[str, str]:
    start, end = day_bounds_ms(day)
    return run_id_floor(start), run_id_floor(end)


def _serialized(conn: Connection, name: str) -> bool:
    """Any number of maintenance processes (and `db upgrade`s) may run: one at a time
    changes the days, each waiting at most LOCK_TIMEOUT on the tables it changes.
    Returns whether the partition `name` exists, as seen under that lock."""
    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_KEY})
    return conn.execute(text("SELECT to_regclass(:n) IS NOT NULL"), {"n": name}).scalar_one()


_ADVISORY_KEY = 0x6366_7268  # 'cfrh': cronfleet run history


def create_day_in(conn: Connection, day: date) -> int | None:
    """The day's partition. Rows of that day already in the default partition (a day
    created late) move into it, in this transaction. Returns how many moved; None when
    another process made the day first."""
    lo, hi = _bounds(day)
    name = partition_name(day)
    if _serialized(conn, name):
        return None
    # The default partition must hold none of the new day's rows when the day is made.
    conn.execute(text("CREATE TEMP TABLE _moving (LIKE runs) ON COMMIT DROP"))
    moved = conn.execute(
        text(
            f"""
            WITH gone AS (
                DELETE FROM {DEFAULT_PARTITION}
                WHERE run_id >= CAST(:lo AS uuid) AND run_id < CAST(:hi AS uuid)
                RETURNING *)
            INSERT INTO _moving SELECT * FROM gone
            """
        ),
        {"lo": lo, "hi": hi},
    ).rowcount
    conn.execute(
        text(f"CREATE TABLE {name} PARTITION OF runs FOR VALUES FROM ('{lo}') TO ('{hi}')")
    )
    crash_point("run_history.day_created")
    if moved:
        conn.execute(text("INSERT INTO runs SELECT * FROM _moving"))
    conn.execute(text("DROP TABLE _moving"))
    return moved


@dataclass(frozen=True)
class DroppedDay:
    day: date
    rows_estimate: int
    bytes: int
    kept: int  # runs the kit still needed, moved to the default partition


def drop_day_in(conn: Connection, day: date) -> DroppedDay | None:
    """Drop a day's partition, keeping (in the default partition) every run of it the
    kit still needs: live ones, found over the busy-runs partial index, and those with a
    dead letter, found from the dead letters. All in this transaction: a crash keeps
    the day whole. None: another process dropped it first."""
    name = partition_name(day)
    if not _serialized(conn, name):
        return None
    size = conn.execute(
        text(
            "SELECT reltuples::bigint AS rows, pg_total_relation_size(oid) AS bytes "
            "FROM pg_class WHERE oid = CAST(:name AS regclass)"
        ),
        {"name": name},
    ).one()
    conn.execute(text(f"ALTER TABLE runs DETACH PARTITION {name}"))
    crash_point("run_history.day_detached")
    kept = conn.execute(
        text(f"INSERT INTO runs SELECT * FROM {name} WHERE status IN {_LIVE}")
    ).rowcount
    kept += conn.execute(
        text(
            f"""
            INSERT INTO runs SELECT p.* FROM dead_letters d JOIN {name} p ON p.run_id = d.run_id
            WHERE p.status NOT IN {_LIVE}
            """
        )
    ).rowcount
    conn.execute(text(f"DROP TABLE {name}"))
    return DroppedDay(day, max(size.rows, 0), size.bytes, kept)


def prune_default_in(conn: Connection, cutoff: datetime, batch: int) -> int:
    """Delete up to `batch` runs of the default partition scheduled before `cutoff`
    that the kit no longer needs."""
    return conn.execute(
        text(
            f"""
            DELETE FROM {DEFAULT_PARTITION} WHERE run_id IN (
                SELECT r.run_id FROM {DEFAULT_PARTITION} r
                WHERE r.scheduled_at < :cutoff AND r.status NOT IN {_LIVE}
                  AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.run_id = r.run_id)
                LIMIT :batch FOR UPDATE SKIP LOCKED)
            """
        ),
        {"cutoff": cutoff, "batch": batch},
    ).rowcount


@dataclass
class RunHistoryPass:
    created: list[date] = field(default_factory=list)
    moved_into_created: int = 0
    dropped: list[DroppedDay] = field(default_factory=list)
    pruned_default: int = 0
    busy: list[str] = field(default_factory=list)  # days whose lock was not had in time


def maintain_run_history(
    engine: Engine,
    retention_s: int,
    ahead_days: int = DEFAULT_AHEAD_DAYS,
    *,
    now: datetime | None = None,
    batch: int = 5000,
    max_batches: int = 100,
) -> RunHistoryPass:
    """One pass (kit.core.retention.plan_run_days decides): create the days ahead, drop
    the days past the retention, prune the default partition. A transaction per day;
    a day whose lock is not had within LOCK_TIMEOUT is left for the next pass."""
    now, existing = _now_and_days(engine, now)
    now_ms = to_epoch_ms(now)
    plan = plan_run_days(now_ms, existing, ahead_days, retention_s)
    done = RunHistoryPass()
    for day in plan.create:
        moved = _one_day(engine, create_day_in, day, done.busy)
        if moved is not None:
            done.created.append(day)
            done.moved_into_created += moved
    for day in plan.drop:
        dropped = _one_day(engine, drop_day_in, day, done.busy)
        if dropped is not None:
            done.dropped.append(dropped)
    cutoff = from_epoch_ms(run_history_cutoff_ms(now_ms, retention_s))
    for _ in range(max_batches):
        with engine.begin() as conn:
            pruned = prune_default_in(conn, cutoff, batch)
        done.pruned_default += pruned
        if pruned < batch:
            break
    return done


def ensure_run_days(
    engine: Engine, ahead_days: int = DEFAULT_AHEAD_DAYS, now: datetime | None = None
) -> list[date]:
    """Only the creating half of a pass (no retention applies): `cronfleet db upgrade`
    and the maintenance's first pass make sure today and the days ahead exist."""
    now, existing = _now_and_days(engine, now)
    created: list[date] = []
    for day in run_days_wanted(to_epoch_ms(now), ahead_days):
        if day not in existing and _one_day(engine, create_day_in, day, []) is not None:
            created.append(day)
    return created


def _now_and_days(engine: Engine, now: datetime | None) -> tuple[datetime, list[date]]:
    """The instant that decides (the database's clock unless one is passed) and the
    days that have a partition."""
    with engine.connect() as conn:
        if now is None:
            now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        return now, [p.day for p in run_partitions(conn) if p.day is not None]


_T = TypeVar("_T")


def _one_day(
    engine: Engine, step: Callable[[Connection, date], _T | None], day: date, busy: list[str]
) -> _T | None:
    """One day's change in a transaction of its own; a lock not had within LOCK_TIMEOUT
    leaves the day (named in `busy`) for the next pass."""
    try:
        with engine.begin() as conn:
            return step(conn, day)
    except OperationalError as err:
        if "lock timeout" not in str(err):
            raise
        busy.append(partition_name(day))
        return None

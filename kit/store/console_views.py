"""What the console's views across jobs read, scoped to one tenant: the runs happening
now (claimed, running, retrying) and those that failed lately; the pull queues with
their depth and dead tasks (and a replay of those); the run history as series over
time for the charts.

Each read is bounded: the runs now by the tenant's jobs and the busy-runs index, the
failures by the dead letters' (tenant, created_at) index, the series by a range of run
ids (one or two days' partitions) and a cap on the rows read (`SERIES_MAX_ROWS`, said
on the page when reached).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from kit.core.ids import run_id_floor
from kit.core.queue_task import replay_task
from kit.core.timeutil import to_epoch_ms
from kit.core.trigger import QUEUED
from kit.store.db import NOW_SQL, db_now
from kit.store.queues import _lease_values, _task
from kit.store.runs import run_state_sql
from kit.store.vocab import (
    BUSY_SQL,
    COUNTED_SQL,
    KIND_SCHEDULE,
    LEASABLE_SQL,
    RUN_DEAD,
    RUN_PENDING,
    RUN_SKIPPED,
    TASK_DEAD,
    TASK_LEASED,
    TASK_QUEUED,
)

NOW_LIMIT = 200
FAILED_WINDOW = timedelta(hours=1)
SERIES_MAX_ROWS = 200_000
QUEUE_REPLAY_MAX = 1000


@dataclass(frozen=True)
class NowRun:
    run_id: str
    job_id: str
    job_name: str | None
    state: str
    priority: str
    scheduled_at: datetime
    attempt: int
    worker_id: str | None
    started_at: datetime | None
    retry_at: datetime | None
    finished_at: datetime | None
    error: str | None


@dataclass(frozen=True)
class NowView:
    now: datetime
    active: list[NowRun]  # claimed, running, retry_scheduled (at most NOW_LIMIT)
    failed: list[NowRun]  # dead in the last hour, newest first (at most NOW_LIMIT)


_ACTIVE = f"""
SELECT r.run_id::text, r.job_id::text, j.name AS job_name, {run_state_sql("r", NOW_SQL)} AS state,
    r.priority, r.scheduled_at, r.attempt, r.worker_id, r.started_at, r.retry_at,
    r.finished_at, r.error
FROM jobs j JOIN runs r ON r.job_id = j.job_id
WHERE j.tenant = :tenant AND r.tenant = :tenant AND r.status IN {BUSY_SQL}
  AND r.status <> {RUN_PENDING}
ORDER BY r.scheduled_at, r.run_id
LIMIT :limit
"""
_FAILED = f"""
SELECT r.run_id::text, r.job_id::text, j.name AS job_name, {run_state_sql("r", NOW_SQL)} AS state,
    r.priority, r.scheduled_at, r.attempt, r.worker_id, r.started_at, r.retry_at,
    r.finished_at, r.error
FROM dead_letters d JOIN runs r ON r.run_id = d.run_id
LEFT JOIN jobs j ON j.job_id = d.job_id
WHERE d.tenant = :tenant AND d.created_at >= :since AND r.status = {RUN_DEAD}
ORDER BY d.created_at DESC, d.run_id DESC
LIMIT :limit
"""


def now_view(
    engine: Engine, tenant: str, *, now: datetime | None = None, limit: int = NOW_LIMIT
) -> NowView:
    with engine.begin() as conn:
        at = db_now(conn, now)
        params = {"tenant": tenant, "limit": limit, "now": now}
        active = [NowRun(**r._mapping) for r in conn.execute(text(_ACTIVE), params)]
        failed = [
            NowRun(**r._mapping)
            for r in conn.execute(text(_FAILED), {**params, "since": at - FAILED_WINDOW})
        ]
    return NowView(at, active, failed)


# -- the pull queues -----------------------------------------------------------------


@dataclass(frozen=True)
class QueueOverview:
    queue: str
    queued: int
    leased: int
    dead: int
    oldest_age_s: float


_QUEUES = f"""
SELECT queue,
    count(*) FILTER (WHERE status = {TASK_QUEUED}
        OR (status = {TASK_LEASED} AND lease_expires_at <= {NOW_SQL})) AS queued,
    count(*) FILTER (WHERE status = {TASK_LEASED} AND lease_expires_at > {NOW_SQL}) AS leased,
    count(*) FILTER (WHERE status = {TASK_DEAD}) AS dead,
    min(visible_at) FILTER (WHERE status IN {LEASABLE_SQL} AND visible_at <= {NOW_SQL})
        AS oldest_visible_at,
    {NOW_SQL} AS db_now
FROM queue_tasks
WHERE tenant = :tenant AND status IN {COUNTED_SQL}
GROUP BY queue
ORDER BY queue
"""


def queues_overview(
    engine: Engine, tenant: str, now: datetime | None = None
) -> list[QueueOverview]:
    """Every queue of the tenant that holds a task not done (done ones are history)."""
    with engine.begin() as conn:
        rows = conn.execute(text(_QUEUES), {"tenant": tenant, "now": now}).all()
    return [
        QueueOverview(
            r.queue,
            r.queued,
            r.leased,
            r.dead,
            0.0
            if r.oldest_visible_at is None
            else max(0.0, (r.db_now - r.oldest_visible_at).total_seconds()),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class DeadTask:
    task_id: str
    attempt: int
    dead_reason: str | None
    last_error: str | None
    finished_at: datetime | None
    created_at: datetime


_DEAD_TASKS = f"""
SELECT task_id::text, attempt, dead_reason, errors -> -1 ->> 'error' AS last_error,
    finished_at, created_at FROM queue_tasks
WHERE tenant = :tenant AND queue = :queue AND status = {TASK_DEAD}
ORDER BY finished_at DESC NULLS LAST, task_id LIMIT :limit
"""


def queue_dead_tasks(engine: Engine, tenant: str, queue: str, limit: int = 50) -> list[DeadTask]:
    with engine.begin() as conn:
        rows = conn.execute(
            text(_DEAD_TASKS),
            {"tenant": tenant, "queue": queue, "limit": limit},
        ).all()
    return [DeadTask(**r._mapping) for r in rows]


_REPLAYABLE = f"""
SELECT *, {NOW_SQL} AS db_now FROM queue_tasks
WHERE tenant = :tenant AND queue = :queue AND status = {TASK_DEAD}
  AND (CAST(:task_ids AS uuid[]) IS NULL OR task_id = ANY(CAST(:task_ids AS uuid[])))
ORDER BY finished_at, task_id
LIMIT :limit
FOR UPDATE SKIP LOCKED
"""


def queue_replay(
    engine: Engine,
    tenant: str,
    queue: str,
    task_ids: list[str] | None = None,
    limit: int = QUEUE_REPLAY_MAX,
    now: datetime | None = None,
) -> int:
    """Put dead tasks of a queue back (these ids, or the oldest `limit`): each as
    kit.core.queue_task.replay_task decides. Returns how many."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(_REPLAYABLE),
            {"tenant": tenant, "queue": queue, "task_ids": task_ids, "limit": limit, "now": now},
        ).all()
        done = 0
        for row in rows:
            moved = replay_task(_task(row), to_epoch_ms(row.db_now))
            if not moved.accepted:
                continue
            conn.execute(
                text(
                    "UPDATE queue_tasks SET status = :status, attempt = :attempt,"
                    " visible_at = :visible_at, lease_token = :lease_token,"
                    " lease_expires_at = :lease_expires_at, deadline_at = :deadline_at,"
                    " worker_id = :worker_id, dead_reason = :dead_reason, finished_at = NULL,"
                    " result = NULL WHERE task_id = :task_id"
                ),
                {"task_id": row.task_id, **_lease_values(moved.task)},
            )
            done += 1
    return done


# -- the run history as series -----------------------------------------------------------


@dataclass(frozen=True)
class Series:
    start: datetime
    end: datetime
    step_s: int
    buckets: list[datetime]
    started: list[int]
    failed: list[int]  # failed attempts (a retry's and a dead run's)
    backlog: list[int]  # runs due and not started yet, at each bucket's end
    lag_p99_s: dict[str, list[float | None]]  # per tier: first attempts' start lag p99
    truncated: bool  # SERIES_MAX_ROWS runs were read: the series may be short
    tiers: list[str] = field(default_factory=list)


# The runs of the range (and the hour before it, for the backlog it begins with),
# found by their ids' range: a day's partition or two, never the whole history.
_SAMPLE = """
WITH r AS MATERIALIZED (
    SELECT priority, status, scheduled_at, started_at, finished_at, errors, skip_reason,
        created_at, attempt, trigger_kind
    FROM runs
    WHERE run_id >= CAST(:lo AS uuid) AND run_id < CAST(:hi AS uuid) AND tenant = :tenant
    LIMIT :cap
)"""
_BUCKET = "date_bin(make_interval(secs => :step), {col}, :start)"
_STARTS = (
    _SAMPLE
    + f"""
SELECT {_BUCKET.format(col="started_at")} AS b, priority, count(*) AS n,
    -- start lag as docs/life-of-a-run.md defines it: scheduled runs' first attempts
    -- (a run now, a backfill or a replay starts late on purpose)
    percentile_cont(0.99) WITHIN GROUP (
        ORDER BY extract(epoch FROM started_at - scheduled_at))
        FILTER (WHERE trigger_kind = {KIND_SCHEDULE} AND attempt = 1) AS p99
FROM r WHERE started_at >= :start AND started_at < :end
GROUP BY 1, 2
"""
)
_FAILS = (
    _SAMPLE
    + f"""
SELECT {_BUCKET.format(col="CAST(e ->> 'finished_at' AS timestamptz)")} AS b, count(*) AS n
FROM r CROSS JOIN LATERAL jsonb_array_elements(r.errors) AS e
WHERE e -> 'preempted' IS NULL  -- stopped for a paid run: not a failed attempt
  AND CAST(e ->> 'finished_at' AS timestamptz) >= :start
  AND CAST(e ->> 'finished_at' AS timestamptz) < :end
GROUP BY 1
"""
)
# Backlog: a run counts from when it was due (its scheduled time, or when it was made:
# a backfill or a run now made late) until it starts or ends unstarted (cancelled); a
# skipped run never waited, nor one that ended with no time recorded (a deleted job's).
# Counted as arrivals and departures per bucket.
_FLOW = (
    _SAMPLE
    + f"""
, f AS (
    SELECT greatest(scheduled_at, created_at) AS came, coalesce(started_at, finished_at) AS went
    FROM r WHERE status <> {RUN_SKIPPED} AND skip_reason IS DISTINCT FROM '{QUEUED}'
      AND (started_at IS NOT NULL OR finished_at IS NOT NULL
           OR status IN {BUSY_SQL})
      AND greatest(scheduled_at, created_at) <= now()  -- not due yet: not waiting
)
SELECT 'base' AS kind, NULL::timestamptz AS b, count(*) AS n FROM f
WHERE came < :start AND (went IS NULL OR went >= :start)
UNION ALL
SELECT 'came', {_BUCKET.format(col="came")}, count(*) FROM f
WHERE came >= :start AND came < :end GROUP BY 2
UNION ALL
SELECT 'went', {_BUCKET.format(col="went")}, count(*) FROM f
WHERE came < :end AND went >= :start AND went < :end GROUP BY 2
UNION ALL
SELECT 'read', NULL, count(*) FROM r
"""
)


def run_series(
    engine: Engine,
    tenant: str,
    start: datetime,
    end: datetime,
    step_s: int,
    tiers: list[str],
    lookback: timedelta = timedelta(hours=1),
) -> Series:
    """Per bucket of `step_s` in [start, end): runs started, attempts failed, the backlog
    at the bucket's end, and the start lag p99 of each tier."""
    n = max(1, int((end - start).total_seconds() // step_s))
    buckets = [start + timedelta(seconds=step_s * i) for i in range(n)]
    index = {b: i for i, b in enumerate(buckets)}
    params: dict[str, Any] = {
        "tenant": tenant,
        "lo": run_id_floor(to_epoch_ms(start - lookback)),
        "hi": run_id_floor(to_epoch_ms(end)),
        "cap": SERIES_MAX_ROWS,
        "step": float(step_s),
        "start": start,
        "end": end,
    }
    started = [0] * n
    failed = [0] * n
    lag: dict[str, list[float | None]] = {t: [None] * n for t in tiers}
    came = [0] * n
    went = [0] * n
    base = read = 0
    with engine.begin() as conn:
        for row in conn.execute(text(_STARTS), params):
            i = index.get(row.b)
            if i is None:
                continue
            started[i] += row.n
            if row.priority in lag and row.p99 is not None:
                lag[row.priority][i] = float(row.p99)
        for row in conn.execute(text(_FAILS), params):
            if (i := index.get(row.b)) is not None:
                failed[i] += row.n
        for row in conn.execute(text(_FLOW), params):
            if row.kind == "base":
                base = row.n
            elif row.kind == "read":
                read = row.n
            elif (i := index.get(row.b)) is not None:
                (came if row.kind == "came" else went)[i] += row.n
    backlog, level = [], base
    for i in range(n):
        level += came[i] - went[i]
        backlog.append(max(0, level))
    return Series(
        start, end, step_s, buckets, started, failed, backlog, lag, read >= SERIES_MAX_ROWS, tiers
    )

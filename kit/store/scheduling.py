"""The SQL of a scheduler node, kept together: membership, partition leases and the
fenced scan (the node publishes what a scan committed and writes nothing more for it).

Every statement is batched: partitions, triggers and runs travel as arrays
(`unnest`), so a scan is a handful of round trips whatever its size. The scan's big
arrays are sent as array literals built here (`pg_array`), times as integer epoch
milliseconds/microseconds: psycopg's generic list dumper and datetime objects cost
more per row than the database's work on it (a 50,000-run burst). Lease time is the
database's clock (`now()`) unless a caller passes `now` (the contract suite, which
drives the same explicit time through kit.core.leases); the scan's window may be an
explicit instant (tests, the model) via the caller.

The partition lease statements are kit.core.leases' partition functions in SQL:
`_ACQUIRE` is acquire_partition (a free or expired lease is taken with epoch + 1, a
node re-taking its own expired lease too; a live one of this node is renewed with its
epoch kept; a live one of another node is refused: no row returned), and a node's
renewal is that same upsert, kept exactly when renew_partition would grant it;
`_RELEASE` is release_partition, `_LOCK_OWN` is fenced_write_allowed.
tests/contract/test_partition_lease.py replays the same events through both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg.copy import QueuedLibpqWriter
from sqlalchemy import Connection, text

from kit.core.policies import OverlapPolicy
from kit.core.timeutil import EPOCH
from kit.core.trigger import TriggerKind
from kit.store.db import NOW_SQL
from kit.store.run_history import batch_bounds, in_batch
from kit.store.vocab import (
    BUSY_SQL,
    KIND_SCHEDULE,
    RUN_CANCELLED,
    RUN_PENDING,
    RUN_RETRY_SCHEDULED,
    RUN_SKIPPED,
)


def pg_array(values: Iterable[int | str]) -> str:
    """An array literal of values that need no quoting: integers, and ids this code
    made or read back from the database (UUIDs)."""
    return "{" + ",".join(map(str, values)) + "}"


def _quote(value: str | None) -> str:
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Quoted(dict[str | None, str]):
    """Quoted array elements by value, made on first use: a batch repeats a handful of
    values (statuses, tiers, tenants), so most elements are one lookup in C."""

    def __missing__(self, value: str | None) -> str:
        hit = _quote(value)
        if len(self) < 10_000:
            self[value] = hit
        return hit


_quoted = _Quoted()


def pg_bools(values: Iterable[bool]) -> str:
    """A boolean array literal."""
    return "{" + ",".join("t" if v else "f" for v in values) + "}"


def pg_text_array(values: Iterable[str | None]) -> str:
    """An array literal of any text (None -> NULL), each element quoted."""
    return "{" + ",".join(map(_quoted.__getitem__, values)) + "}"


def pg_tid_array(ctids: Sequence[str]) -> str:
    """An array literal of row addresses as PostgreSQL writes them, `(page,item)`: each
    quoted (its comma), none with a quote or backslash to escape."""
    return '{"' + '","'.join(ctids) + '"}' if ctids else "{}"


class _CopyText(dict[str, str]):
    """A value as COPY's text format writes it (backslash, tab, newline, carriage return
    escaped), by value, made on first use: tenants are a handful per batch."""

    def __missing__(self, value: str) -> str:
        hit = (
            value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r")
        )  # fmt: skip
        if len(self) < 10_000:
            self[value] = hit
        return hit


class _Seconds(dict[int, str]):
    """`YYYY-MM-DD HH:MM:SS` (UTC) of each whole epoch second, made on first use: a
    batch's fire times fall on few seconds."""

    def __missing__(self, second: int) -> str:
        hit = (EPOCH + timedelta(seconds=second)).strftime("%Y-%m-%d %H:%M:%S")
        if len(self) >= 100_000:
            self.clear()
        self[second] = hit
        return hit


_copy_text = _CopyText()
_seconds = _Seconds()


def copy_timestamp(ms: int) -> str:
    """An epoch-ms instant as COPY's text of a timestamptz, exact to the millisecond."""
    second, milli = divmod(ms, 1000)
    return f"{_seconds[second]}.{milli:03d}+00"


# -- membership ----------------------------------------------------------------------

_HEARTBEAT = text(
    f"""
    INSERT INTO scheduler_nodes (node_id, heartbeat_at, started_at)
    VALUES (:me, {NOW_SQL}, {NOW_SQL})
    ON CONFLICT (node_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at
    """
)
_LIVE_NODES = text(
    f"""
    SELECT node_id FROM scheduler_nodes
    WHERE heartbeat_at > {NOW_SQL} - make_interval(secs => :ttl_s) ORDER BY node_id
    """
)
_LEAVE = text("DELETE FROM scheduler_nodes WHERE node_id = :me")


def node_heartbeat(conn: Connection, node_id: str, *, now: datetime | None = None) -> None:
    conn.execute(_HEARTBEAT, {"me": node_id, "now": now})


def nodes_live(conn: Connection, ttl_ms: int, *, now: datetime | None = None) -> list[str]:
    """Nodes whose heartbeat is younger than the lease TTL at `now` (database time by
    default): live at heartbeat + ttl - 1 ms, gone at heartbeat + ttl."""
    return list(conn.execute(_LIVE_NODES, {"ttl_s": ttl_ms / 1000, "now": now}).scalars())


def node_leave(conn: Connection, node_id: str) -> None:
    conn.execute(_LEAVE, {"me": node_id})


# -- partition leases -------------------------------------------------------------------

# The database's clock decides, unless a caller (the contract suite) passes `now`.
_NOW = "coalesce(CAST(:now AS timestamptz), now())"

_OWNERS = text(
    f"""
    SELECT partition_id, owner FROM partition_leases
    WHERE owner IS NOT NULL AND expires_at > {_NOW}
    """
)
_ACQUIRE = text(
    f"""
    INSERT INTO partition_leases AS l (partition_id, owner, epoch, expires_at)
    SELECT p, :me, 1, {_NOW} + make_interval(secs => :ttl_s)
    FROM unnest(CAST(:parts AS smallint[])) AS p ORDER BY p
    ON CONFLICT (partition_id) DO UPDATE
    SET owner = EXCLUDED.owner,
        epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > {_NOW}
                     THEN l.epoch ELSE l.epoch + 1 END,
        expires_at = EXCLUDED.expires_at
    WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= {_NOW}
    RETURNING partition_id, epoch
    """
)
_RELEASE = text(
    f"""
    UPDATE partition_leases AS l SET owner = NULL, expires_at = {_NOW}
    FROM unnest(CAST(:parts AS smallint[]), CAST(:epochs AS bigint[])) AS r(p, e)
    WHERE l.partition_id = r.p AND l.epoch = r.e AND l.owner = :me
    RETURNING l.partition_id
    """
)


def lease_owners(conn: Connection, now: datetime | None = None) -> dict[int, str]:
    """Current live owner of each held partition."""
    return {int(p): o for p, o in conn.execute(_OWNERS, {"now": now}).all()}


def leases_acquire(
    conn: Connection,
    node_id: str,
    partitions: Iterable[int],
    ttl_ms: int,
    now: datetime | None = None,
) -> dict[int, int]:
    """Take or renew `partitions` (sorted, so concurrent nodes lock rows in one order);
    returns partition -> epoch for those granted."""
    parts = sorted(set(partitions))
    if not parts:
        return {}
    params = {"me": node_id, "parts": parts, "ttl_s": ttl_ms / 1000, "now": now}
    rows = conn.execute(_ACQUIRE, params)
    return {int(p): int(e) for p, e in rows.all()}


def leases_release(
    conn: Connection, node_id: str, epochs: Mapping[int, int], now: datetime | None = None
) -> list[int]:
    """Give partitions up (epoch kept; the next acquire bumps it). Only the owner at
    the given epoch can."""
    if not epochs:
        return []
    parts = sorted(epochs)
    params = {"me": node_id, "parts": parts, "epochs": [epochs[p] for p in parts], "now": now}
    rows = conn.execute(_RELEASE, params)
    return sorted(int(p) for p in rows.scalars())


# -- the fenced scan ---------------------------------------------------------------------

_LOCK_OWN = text(
    f"""
    SELECT l.partition_id FROM partition_leases AS l
    JOIN unnest(CAST(:parts AS smallint[]), CAST(:epochs AS bigint[])) AS w(p, e)
      ON l.partition_id = w.p AND l.epoch = w.e
    WHERE l.owner = :me AND l.expires_at > {_NOW}
    ORDER BY l.partition_id
    FOR SHARE OF l
    """
)
# Raw DBAPI cursor (tuples, no SQLAlchemy rows): the scan's one per-row fetch, which the
# scan turns into columns at once (zip). Times come as integer epoch milliseconds
# (floored, as kit.core.timeutil.to_epoch_ms), the job's creation in microseconds (an
# interval without an anchor counts from it), `ctid` names the locked row for the
# advance or delete. Column order is DUE_COLUMNS.
#
# The two OR clauses leave out what kit.core.trigger.held_back says the scan would not
# take yet: a schedule trigger of a job that limits overlap, due after `overlap_hi_ms`
# (its fire is judged on the runs active then), so the LIMIT counts only rows the scan
# takes. Before, a batch's worth of such triggers a few seconds ahead filled every
# batch: the scan took none of them yet reported itself full, the node scanned again at
# once, over and over, and later triggers of other jobs waited for their second.
# The first clause names the trigger alone (`limits_overlap`, written with it for the
# job's version, migration 0014), so it is applied as the triggers are read and such a
# trigger costs no look at its job. It also holds back, until `overlap_hi_ms`, a
# trigger of such a job paused or edited meanwhile, which the scan would have taken
# now to park or drop: a second or so later makes no difference to either. The second
# clause is held_back itself, by the job, for a trigger written before the flag
# (NULL); it is NULL-safe for a job that is gone (`j.job_id IS NULL`), and it names
# both sides of the join, so no partial index of jobs (ix_jobs_list_paused) can stand
# in for the key lookup (the lesson of kit.store.claims._CLAIM).
#
# The job is looked up by its key for each trigger: the triggers' fire times move every
# second, so the planner's estimate of how many are due is often far off, and on a high
# one it hashed the whole jobs table (a sequential scan of 1 GB for 2,000 triggers at a
# million schedules: 1.8 s, benchmarks/trigger_index.py). So the scan's transaction plans
# without hash and merge joins (_NESTED_LOOPS; every statement of a scan joins by key).
# A LATERAL subquery fenced by OFFSET 0 would force the same plan at 2.4 us a row more.
# Times as epoch milliseconds by numeric arithmetic (exact; date_part's double is off by a
# microsecond past the year 2200).
#
# `active`: the job's busy runs (kit.core.leases.BUSY), counted only where the decision
# judges overlap with them (a schedule trigger of its job's version, the job limiting
# overlap and not paused; kit.core.trigger_batch.DueBatch), in the same statement rather
# than a second one with the jobs' ids sent back.
_MS = "floor(extract(epoch FROM {}) * 1000)::bigint"
_US = "(extract(epoch FROM {}) * 1000000)::bigint"
_NESTED_LOOPS = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
_DUE = f"""
    SELECT t.ctid::text, t.partition_id, {_MS.format("t.fire_at")},
           t.job_id::text, t.job_version, t.kind, t.attempt, {_MS.format("t.run_scheduled_at")},
           j.version, j.tenant, j.schedule::text, j.overlap, j.misfire::text,
           j.priority, j.jitter_s, j.paused, {_US.format("j.created_at")},
           CASE WHEN t.kind = '{TriggerKind.schedule.value}' AND j.version = t.job_version
                     AND j.overlap <> '{OverlapPolicy.allow.value}' AND NOT j.paused
                THEN (SELECT count(*) FROM runs AS r
                      WHERE r.job_id = t.job_id AND r.status IN {BUSY_SQL})
                ELSE 0 END
    FROM triggers AS t LEFT JOIN jobs AS j ON j.job_id = t.job_id
    WHERE t.partition_id = ANY(CAST(%(parts)s AS smallint[]))
      AND t.fire_at <= timestamptz 'epoch' + %(hi_ms)s * interval '1 millisecond'
      AND (t.fire_at <= timestamptz 'epoch' + %(overlap_hi_ms)s * interval '1 millisecond'
           OR t.kind <> '{TriggerKind.schedule.value}' OR t.limits_overlap IS NOT TRUE)
      AND (t.limits_overlap IS NOT NULL
           OR t.fire_at <= timestamptz 'epoch' + %(overlap_hi_ms)s * interval '1 millisecond'
           OR t.kind <> '{TriggerKind.schedule.value}' OR j.job_id IS NULL
           OR j.version <> t.job_version OR j.overlap = '{OverlapPolicy.allow.value}'
           OR j.paused)
    ORDER BY t.fire_at
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
"""
DUE_COLUMNS = [
    "ctid",
    "partition_id",
    "fire_at_ms",
    "job_id",
    "job_version",
    "kind",
    "attempt",
    "run_scheduled_at_ms",
    "version",
    "tenant",
    "schedule",
    "overlap",
    "misfire",
    "priority",
    "jitter_s",
    "paused",
    "created_at_us",
    "active",
]
_ACTIVE = text(
    f"""
    SELECT job_id::text, count(*) FROM runs
    WHERE job_id = ANY(CAST(:jobs AS uuid[])) AND status IN {BUSY_SQL}
    GROUP BY job_id
    """
)
_CANCEL_ACTIVE = text(
    f"""
    UPDATE runs SET status = {RUN_CANCELLED}, lease_token = NULL, lease_expires_at = NULL,
        retry_at = NULL, finished_at = now(), error = 'replaced by a newer run (overlap: replace)'
    WHERE job_id = ANY(CAST(:jobs AS uuid[])) AND status IN {BUSY_SQL}
    RETURNING run_id::text
    """
)
_INSERT_RUNS = text(
    f"""
    INSERT INTO runs (run_id, job_id, tenant, job_version, priority, scheduled_at, attempt,
                      status, trigger_kind, skip_reason, finished_at)
    SELECT r.run_id, r.job_id, r.tenant, r.v, r.prio,
           timestamptz 'epoch' + r.at_ms * interval '1 millisecond', 1, r.status, r.kind,
           r.reason, CASE WHEN r.status = {RUN_SKIPPED} THEN now() END
    FROM unnest(CAST(:ids AS uuid[]), CAST(:jobs AS uuid[]), CAST(:tenants AS text[]),
                CAST(:versions AS int[]), CAST(:prios AS text[]), CAST(:ats AS bigint[]),
                CAST(:statuses AS text[]), CAST(:kinds AS text[]), CAST(:reasons AS text[]))
         AS r(run_id, job_id, tenant, v, prio, at_ms, status, kind, reason)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING run_id::text
    """
)
# The runs a scan fired as the common case (kit.core.trigger_batch): pending, of a
# schedule, first attempt, sent by COPY. COPY inserts rows in bulk (a WAL record per page
# of them, no executor per row, no array to parse): 40 % less of the database's time
# than INSERT ... SELECT FROM unnest on the partitioned table. It takes no ON CONFLICT,
# and a run of the same id existing already is rare (an edit that put back a fire
# already made, a backfill of a fire the scheduler was late for): the scan writes under
# a savepoint and, on the unique violation, writes the batch again by the general
# statements (kit.scheduler.scan).
_COPY_FIRED = (
    "COPY runs (run_id, job_id, tenant, job_version, priority, scheduled_at, attempt, status,"
    " trigger_kind) FROM STDIN"
)
# A trigger that fired is deleted by the row address the scan locked and its next one
# copied in (a delete and a COPY cost the database a third of an UPDATE of the row,
# which writes every index anew as well). Its slot taken (a schedule trigger of the job
# already there) raises a unique violation: the scan falls back as for _COPY_FIRED.
_COPY_TRIGGERS = (
    "COPY triggers (partition_id, fire_at, job_id, job_version, kind, attempt, limits_overlap)"
    " FROM STDIN"
)


# A paused job's trigger that came due waits for its resume (kit.core.trigger): out of
# every scan's range (fire_at 'infinity'), the fire it owed kept, moved in place (an
# edit waiting on its lock follows it). A job that has a trigger parked already keeps that
# one; this one is deleted (_DELETE_TRIGGERS finds only the rows not moved: a row this
# transaction updated is not visible to its later statements).
# The check for a parked trigger is one primary-key probe per row, kept a subplan by its
# OFFSET 0: as a join, statistics from before the first parking (no 'infinity' rows)
# made the planner materialise the parked rows and compare every pair, 20,000 x 20,000 in
# a scan's second batch (60 s; tests/integration/test_park_plan.py holds the plan).
_PARK_TRIGGERS = text(
    """
    UPDATE triggers AS t SET parked_fire_at = t.fire_at, fire_at = 'infinity'
    WHERE t.ctid = ANY(CAST(:ctids AS tid[]))
      AND NOT EXISTS (
          SELECT FROM triggers AS p
          WHERE p.partition_id = t.partition_id AND p.fire_at = 'infinity'
            AND p.job_id = t.job_id AND p.kind = t.kind
          OFFSET 0)
    """
)


# Retrying runs by key, their status checked above the fence (OFFSET 0): beside the key,
# `status = 'retry_scheduled'` lets stale statistics send the planner through the whole
# partial index of busy runs per batch (kit.store.claims._CLAIM says more).
# The batch is also bounded by its lowest and highest id, which the planner prunes the
# run history's days with (kit.store.run_history.in_batch); the ids come sorted and each
# row is locked as it is looked up, so rows are locked in run id order.
_RETRYING = f"""
    SELECT found.run_id, found.status, u.arg
    FROM unnest(CAST(:ids AS uuid[]), CAST(:args AS {{arg}}[])) AS u(id, arg)
    CROSS JOIN LATERAL (
        SELECT r.run_id, r.status FROM runs r
        WHERE r.run_id = u.id AND {in_batch("r")}
        FOR UPDATE OF r
        OFFSET 0
    ) AS found
"""
_REARM = text(
    f"""
    UPDATE runs SET status = {RUN_PENDING}, attempt = k.arg, dispatched_at = NULL,
        skip_reason = NULL
    FROM ({_RETRYING.format(arg="int")}) AS k
    WHERE runs.run_id = k.run_id AND k.status = {RUN_RETRY_SCHEDULED} AND {in_batch("runs")}
    RETURNING runs.run_id::text
    """
)
_CANCEL_RETRIES = text(
    f"""
    UPDATE runs SET status = {RUN_CANCELLED}, retry_at = NULL, finished_at = now(),
        error = 'retry not run: ' || k.arg
    FROM ({_RETRYING.format(arg="text")}) AS k
    WHERE runs.run_id = k.run_id AND k.status = {RUN_RETRY_SCHEDULED} AND {in_batch("runs")}
    """
)
# By row address: the scan locked these rows (FOR UPDATE), so their ctids are stable
# until it commits. A TID scan, no index probe per row.
_DELETE_TRIGGERS = text("DELETE FROM triggers WHERE ctid = ANY(CAST(:ctids AS tid[]))")
_NEXT = """
    FROM unnest(CAST(:parts AS smallint[]), CAST(:ats AS bigint[]),
                CAST(:jobs AS uuid[]), CAST(:versions AS int[]), CAST(:limits AS boolean[]))
         AS n(p, f, j, v, l)
"""
_INSERT_TRIGGERS = text(
    f"""
    INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, attempt,
                          limits_overlap)
    SELECT n.p, timestamptz 'epoch' + n.f * interval '1 millisecond', n.j, n.v, {KIND_SCHEDULE}, 1,
           n.l
    """
    + _NEXT
    + " ON CONFLICT DO NOTHING"
)
# The rare slot already taken: a schedule trigger of an older version (an edit raced
# this scan and left the next fire under the old version) takes the newer version, or
# the scheduler would drop it as stale and the job would never fire again. (A retry
# trigger never takes a schedule slot: the kind is in the key.)
_UPSERT_TRIGGERS = text(
    f"""
    INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, attempt,
                          limits_overlap)
    SELECT n.p, timestamptz 'epoch' + n.f * interval '1 millisecond', n.j, n.v, {KIND_SCHEDULE}, 1,
           n.l
    """
    + _NEXT
    + f"""
    ON CONFLICT (partition_id, fire_at, job_id, kind) DO UPDATE
        SET job_version = greatest(triggers.job_version, EXCLUDED.job_version),
            limits_overlap = EXCLUDED.limits_overlap
        WHERE triggers.kind = {KIND_SCHEDULE} AND triggers.job_version < EXCLUDED.job_version
    """
)


def partitions_lock_own(
    conn: Connection, node_id: str, epochs: Mapping[int, int], now: datetime | None = None
) -> set[int]:
    """Lock (FOR SHARE) this node's lease rows still held at the epoch it believes, and
    unexpired (kit.core.leases.fenced_write_allowed); the scan processes only these. A
    takeover waits for this transaction."""
    if not epochs:
        return set()
    parts = sorted(epochs)
    params = {
        "me": node_id,
        "parts": pg_array(parts),
        "epochs": pg_array([epochs[p] for p in parts]),
        "now": now,
    }
    rows = conn.execute(_LOCK_OWN, params)
    return {int(p) for p in rows.scalars()}


def triggers_due(
    conn: Connection,
    partitions: Collection[int],
    hi_ms: int,
    limit: int,
    *,
    overlap_hi_ms: int,
) -> list[tuple[Any, ...]]:
    """Due triggers of `partitions` (fire_at <= hi_ms), oldest first, joined with their
    job (NULL columns when the job is gone), locked; ones locked elsewhere are skipped.
    A trigger the scan would hold back (kit.core.trigger.held_back: its job limits
    overlap, and it fires after `overlap_hi_ms`, kit.core.trigger.overlap_limit_ms) is
    not read, so it neither counts toward `limit` nor is locked.
    Plain tuples in DUE_COLUMNS order; schedule and misfire come as JSON text (the
    caller parses each distinct text once). From here to its end the transaction plans
    without hash or merge joins (_NESTED_LOOPS)."""
    if not partitions:
        return []
    params = {
        "parts": pg_array(sorted(partitions)),
        "hi_ms": hi_ms,
        "overlap_hi_ms": overlap_hi_ms,
        "limit": limit,
    }
    cur = conn.connection.cursor()
    try:
        cur.execute(_NESTED_LOOPS)
        cur.execute(_DUE, params)
        return cur.fetchall()
    finally:
        cur.close()


def runs_active_counts(conn: Connection, job_ids: Collection[str]) -> dict[str, int]:
    if not job_ids:
        return {}
    return {j: int(n) for j, n in conn.execute(_ACTIVE, {"jobs": sorted(job_ids)}).all()}


def runs_cancel_active(conn: Connection, job_ids: Collection[str]) -> list[str]:
    """Overlap 'replace': the jobs' unfinished runs become 'cancelled' with their lease
    cleared, so the worker's heartbeat and finish are refused."""
    if not job_ids:
        return []
    return list(conn.execute(_CANCEL_ACTIVE, {"jobs": sorted(job_ids)}).scalars())


@dataclass
class RunRows:
    """Runs to insert, column by column (the scan appends; no object per row)."""

    run_ids: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    priorities: list[str] = field(default_factory=list)
    scheduled_at_ms: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    skip_reasons: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.run_ids)


def runs_insert(conn: Connection, rows: RunRows) -> set[str]:
    """Insert runs; an existing run id is left as it is. Returns the ids inserted."""
    if not rows:
        return set()
    params = {
        "ids": pg_array(rows.run_ids),
        "jobs": pg_array(rows.job_ids),
        "tenants": pg_text_array(rows.tenants),
        "versions": pg_array(rows.versions),
        "prios": pg_text_array(rows.priorities),
        "ats": pg_array(rows.scheduled_at_ms),
        "statuses": pg_text_array(rows.statuses),
        "kinds": pg_text_array(rows.kinds),
        "reasons": pg_text_array(rows.skip_reasons),
    }
    return set(conn.execute(_INSERT_RUNS, params).scalars())


@dataclass
class FiredRows:
    """Runs fired as the common case, column by column: pending, 'schedule', attempt 1."""

    run_ids: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    priorities: list[str] = field(default_factory=list)
    scheduled_at_ms: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.run_ids)


def runs_insert_fired(
    conn: Connection, rows: FiredRows, meanwhile: Callable[[], None] | None = None
) -> None:
    """Insert runs fired as the common case, every one new, by COPY: a run id that
    exists already raises a unique violation (call under a savepoint; runs_insert takes
    the rest). `meanwhile`: the caller's own work, done while the database inserts (the
    data goes out from psycopg's writer thread), so the scan's Python and the database
    use a core each; it must not use the connection."""
    if not rows:
        return
    text_of, at = _copy_text.__getitem__, copy_timestamp
    data = "".join(
        [
            f"{r}\t{j}\t{text_of(t)}\t{v}\t{p}\t{at(ms)}\t1\tpending\tschedule\n"
            for r, j, t, v, p, ms in zip(
                rows.run_ids,
                rows.job_ids,
                rows.tenants,
                rows.versions,
                rows.priorities,
                rows.scheduled_at_ms,
                strict=True,
            )
        ]
    )
    _copy(conn, _COPY_FIRED, data, meanwhile)


def triggers_advance(
    conn: Connection, ctids: Sequence[str], rows: Sequence[tuple[int, int, str, int, bool]]
) -> None:
    """Replace triggers this transaction read and locked (`ctids`) by their next ones
    (partition, fire_at epoch ms, job, version, whether the job limits overlap), by COPY.
    A slot already taken raises a unique violation (call under a savepoint;
    triggers_delete and triggers_insert take the rest)."""
    triggers_delete(conn, ctids)
    if not rows:
        return
    at = copy_timestamp
    data = "".join(
        [
            f"{p}\t{at(f)}\t{j}\t{v}\tschedule\t1\t{'t' if lim else 'f'}\n"
            for p, f, j, v, lim in rows
        ]
    )
    _copy(conn, _COPY_TRIGGERS, data)


def _copy(
    conn: Connection, statement: str, data: str, meanwhile: Callable[[], None] | None = None
) -> None:
    """COPY text rows in on the transaction's own connection; `meanwhile` runs while
    the database takes them."""
    raw = conn.connection.dbapi_connection
    assert raw is not None
    with raw.cursor() as cur:
        writer = None if meanwhile is None else QueuedLibpqWriter(cur)
        with cur.copy(statement, writer=writer) as copy:
            copy.write(data)
            if meanwhile is not None:
                meanwhile()


def runs_rearm(conn: Connection, attempts: Mapping[str, int]) -> set[str]:
    """Retry triggers came due: retry_scheduled -> pending at the new attempt."""
    if not attempts:
        return set()
    ids = sorted(attempts)
    params = {"ids": ids, "args": [attempts[i] for i in ids], **batch_bounds(ids)}
    return set(conn.execute(_REARM, params).scalars())


def runs_cancel_retries(conn: Connection, why_by_run: Mapping[str, str]) -> None:
    if not why_by_run:
        return
    ids = sorted(why_by_run)
    conn.execute(
        _CANCEL_RETRIES,
        {"ids": ids, "args": [why_by_run[i] for i in ids], **batch_bounds(ids)},
    )


def triggers_delete(conn: Connection, ctids: Sequence[str]) -> int:
    """Delete triggers this transaction read and locked, by row address."""
    if not ctids:
        return 0
    return conn.execute(_DELETE_TRIGGERS, {"ctids": pg_tid_array(ctids)}).rowcount


def triggers_park(conn: Connection, ctids: Sequence[str]) -> None:
    """Park triggers this transaction read and locked (paused jobs' schedule triggers,
    one per job), or delete those whose job has one parked already."""
    if not ctids:
        return
    conn.execute(_PARK_TRIGGERS, {"ctids": pg_tid_array(ctids)})
    conn.execute(_DELETE_TRIGGERS, {"ctids": pg_tid_array(ctids)})


def triggers_insert(conn: Connection, rows: Sequence[tuple[int, int, str, int, bool]]) -> None:
    """Insert next schedule triggers (partition, fire_at epoch ms, job, version, whether
    the job limits overlap); a slot already taken by an older version is resolved so
    that the job keeps firing."""
    if not rows:
        return
    params = {
        "parts": pg_array([r[0] for r in rows]),
        "ats": pg_array([r[1] for r in rows]),
        "jobs": pg_array([r[2] for r in rows]),
        "versions": pg_array([r[3] for r in rows]),
        "limits": pg_bools([r[4] for r in rows]),
    }
    if conn.execute(_INSERT_TRIGGERS, params).rowcount == len(rows):
        return  # the common case: every slot was free
    conn.execute(_UPSERT_TRIGGERS, params)

"""A worker's writes to a run: claim, heartbeat, finish. Every write after the claim is
conditional on the lease token, so a worker whose lease expired (and whose run the
reaper handed to another worker) cannot overwrite anything: its write finds no row.

Claims lock their rows in run id order, so two workers claiming overlapping batches
(a rebalance redelivers) cannot deadlock; a claim waits on a row the reaper holds while
it publishes, then takes it. A worker claims a run ahead of its second (the scheduler
publishes it as soon as it is committed) and starts it then.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

from kit.core.durations import LeaseBounds
from kit.core.outcome import DeadLetter, RetryAt, after_failure, should_pause
from kit.core.output import OUTPUT_CAP_BYTES, Output, excerpt
from kit.core.partitions import PARTITION_COUNT, partition_of
from kit.core.policies import may_hold_queued_runs
from kit.core.retry import RetryPolicy
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import QUEUED
from kit.crash import crash_point
from kit.store.db import NOW_SQL
from kit.store.dead_letters import ATTEMPT_BASE_SQL, dead_letter_in
from kit.store.run_history import batch_bounds, in_batch
from kit.store.scheduling import pg_array, pg_text_array
from kit.store.switches import held_sql
from kit.store.vocab import (
    KIND_RETRY,
    RUN_CANCELLED,
    RUN_DEAD,
    RUN_PENDING,
    RUN_RETRY_SCHEDULED,
    RUN_RUNNING,
    RUN_SUCCEEDED,
)

MAX_ERROR_CHARS = 4000
# The database's clock decides, unless a caller (a test, the contract suite) passes `now`.
NOW = NOW_SQL
_TTL = "make_interval(secs => CAST(:ttl_ms AS double precision) / 1000.0)"
# a run's own lease length (its job's sized lease, kit.core.durations), column ttl_ms
_RUN_TTL = "make_interval(secs => CAST(l.ttl_ms AS double precision) / 1000.0)"


def storable_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Text a task produced, made fit for a PostgreSQL text column: NUL (which the column
    cannot hold, and which made the whole finish fail) is written as the two characters
    backslash-zero; bounded in length."""
    return text.replace("\x00", "\\0")[:limit]


@dataclass(frozen=True)
class Claim:
    """What a queue message asks for: this run at this attempt."""

    run_id: str
    attempt: int


@dataclass(frozen=True)
class ClaimedRun:
    run_id: str
    job_id: str
    tenant: str
    attempt: int
    lease_token: str
    priority: str
    scheduled_at: datetime
    claimed_at: datetime  # the claim's database time (the task starts later, at its second)
    task_spec: dict[str, Any] | None  # None: the job was deleted after the run was made
    timeout_s: int | None
    due_at: datetime | None = None  # not to start before (scheduled time, or retry time)
    lease_ttl_ms: int | None = None  # its lease's length (its job's sized lease); None: default
    preemptions: int = 0  # times it was preempted for a paid run (its history's entries)


@dataclass(frozen=True)
class RunPointer:
    """Enough to publish a run to its queue again."""

    run_id: str
    job_id: str
    attempt: int
    scheduled_at: datetime
    priority: str

    # what its queue message names (kit.transport.message.QueuedRun)
    @property
    def scheduled_at_ms(self) -> int:
        return to_epoch_ms(self.scheduled_at)

    @property
    def tier(self) -> str:
        return self.priority


@dataclass(frozen=True)
class FinishResult:
    accepted: bool  # False: stale (the lease token is no longer this worker's)
    status: str | None = None  # succeeded | retry_scheduled | dead | cancelled
    retry_at: datetime | None = None
    next_attempt: int | None = None
    job_paused: bool = False  # this dead letter reached the job's pause_after_dead
    queued_next: RunPointer | None = None  # overlap 'queue': the run to publish now


# Rules of the batch statements below (tests/integration/test_plans_stale_stats.py holds
# the plans they give with statistics taken while no run was pending):
# - each wanted run is found by its key alone (OFFSET 0 keeps the lookup per row) and its
#   status checked once locked, above that fence; a join through the pending runs by
#   status reads all of them per batch or per run;
# - the wanted ids come sorted, so rows are locked in run id order (no deadlock);
# - every batch is bounded by its lowest and highest id (IN_BATCH): run ids begin with
#   their scheduled instant and `runs` is partitioned by day on them, so the planner
#   keeps the one or two days the batch falls in instead of every day of the retention
#   (docs/run-history.md). The bound is a range, O(1) per row, never the batch's list;
# - runs are looked up by key in a MATERIALIZED CTE, so the range never drives a scan
#   that repeats the lookups; the job's columns are read by key per run.
IN_BATCH = in_batch("r")
# How often a run was preempted, on any worker: the entries `runs_preempt` added to its
# history (which nothing trims). The preemption bound is judged on it
# (kit.core.preemption, tests/integration/test_worker_preemption.py).
_PREEMPTIONS = (
    "jsonb_array_length(jsonb_path_query_array(r.errors, '$[*] ? (@.preempted == true)'))"
)
_CLAIM = f"""
WITH locked AS MATERIALIZED (
    SELECT c.run_id, j.task_spec, j.timeout_s, c.due_at,
        coalesce(least(:max_ms, greatest(:min_ms, j.lease_ttl_ms)), :ttl_ms) AS ttl_ms
    FROM unnest(CAST(:run_ids AS uuid[]), CAST(:attempts AS int[])) AS w(run_id, attempt)
    CROSS JOIN LATERAL (
        SELECT r.run_id, r.job_id, r.tenant, r.priority, r.status,
            greatest(r.scheduled_at, r.retry_at) AS due_at
        FROM runs r
        WHERE r.run_id = w.run_id AND r.attempt = w.attempt AND {IN_BATCH}
        FOR UPDATE OF r
        OFFSET 0
    ) AS c
    LEFT JOIN LATERAL (
        SELECT task_spec, timeout_s, lease_ttl_ms FROM jobs WHERE job_id = c.job_id OFFSET 0
    ) AS j ON true
    WHERE c.status = {RUN_PENDING} AND NOT {held_sql("c", "j.task_spec->>'type'")}
)
UPDATE runs r SET status = {RUN_RUNNING}, lease_token = gen_random_uuid()::text,
    lease_expires_at = greatest({NOW}, l.due_at) + {_RUN_TTL}, worker_id = :worker_id,
    finished_at = NULL, claimed_at = {NOW}, attempt_started_at = NULL
FROM locked l
WHERE r.run_id = l.run_id AND {IN_BATCH}
RETURNING r.run_id, r.job_id, r.tenant, r.attempt, r.lease_token, r.priority,
    r.scheduled_at, {NOW} AS claimed_at, l.task_spec, l.timeout_s, l.due_at, l.ttl_ms,
    {_PREEMPTIONS} AS preemptions
"""


def runs_claim(
    engine: Engine,
    claims: Sequence[Claim],
    worker_id: str,
    ttl_ms: int,
    now: datetime | None = None,
    bounds: LeaseBounds | None = None,
) -> list[ClaimedRun]:
    """One conditional update for a batch: only runs still claimable at the message's
    attempt are taken, each with a fresh token and an expiry by the database clock, its
    lease after the later of now and the run's due time (kit.core.leases.claim_run). The
    lease is the run's job's sized lease (kit.core.durations) within `bounds`, or `ttl_ms`
    while the job has none. A message that claims nothing is a duplicate delivery, or
    names a run an operator's kill switch holds (kit.store.switches): that run stays
    pending, and the reaper publishes it again once the switch is lifted."""
    if not claims:
        return []
    wanted = sorted({(c.run_id, c.attempt) for c in claims})  # a duplicate claims once
    bounds = bounds or LeaseBounds(ttl_ms, ttl_ms)
    params = {
        "run_ids": pg_text_array(r for r, _ in wanted),
        "attempts": pg_array(a for _, a in wanted),
        "worker_id": worker_id,
        "ttl_ms": ttl_ms,
        "min_ms": bounds.min_ms,
        "max_ms": bounds.max_ms,
        "now": now,
        **batch_bounds(r for r, _ in wanted),
    }
    with engine.begin() as conn:
        rows = conn.execute(text(_CLAIM), params).all()
    return [
        ClaimedRun(
            run_id=str(row.run_id),
            job_id=str(row.job_id),
            tenant=row.tenant,
            attempt=row.attempt,
            lease_token=row.lease_token,
            priority=row.priority,
            scheduled_at=row.scheduled_at,
            claimed_at=row.claimed_at,
            task_spec=row.task_spec,
            timeout_s=row.timeout_s,
            due_at=row.due_at,
            lease_ttl_ms=row.ttl_ms,
            preemptions=row.preemptions,
        )
        for row in rows
    ]


def db_clock(engine: Engine) -> datetime:
    """The database's clock right now (clock_timestamp(), not the transaction's start)."""
    with engine.connect() as conn:
        return conn.execute(text("SELECT clock_timestamp()")).scalar_one()


def started_array(run_ids: Iterable[str], started_ms: Mapping[str, int] | None) -> str:
    """The start instants (epoch ms, NULL when not started) of `run_ids`, as an array."""
    started = started_ms or {}
    return pg_text_array(None if (ms := started.get(r)) is None else str(ms) for r in run_ids)


# A run's start is the moment its task began on the worker (measured there, on its
# estimate of the database's clock), written by the next heartbeat or the finish; the
# first attempt's start is kept.
_STARTED = "coalesce(r.started_at, timestamptz 'epoch' + {ms} * interval '1 millisecond')"
# The current attempt's own start (reset by each claim): a run is `claimed`, not
# `running`, while this is unknown and its second has not come (kit.core.run_state).
_ATTEMPT_STARTED = (
    "coalesce(r.attempt_started_at, timestamptz 'epoch' + {ms} * interval '1 millisecond')"
)


def runs_heartbeat(
    engine: Engine,
    leases: Sequence[tuple[str, str]],
    ttl_ms: int,
    now: datetime | None = None,
    started_ms: Mapping[str, int] | None = None,
    ttls_ms: Mapping[str, int] | None = None,
) -> tuple[set[str], set[str]]:
    """Extend every (run_id, token) lease in one statement (recording the start of the
    runs in `started_ms`). Returns (kept, lost): a lost run was reaped, cancelled
    (overlap 'replace'), finished elsewhere, or its lease had already expired
    (kit.core.leases.heartbeat_run: an expired lease is not revived, the reaper may be
    handing the run to another worker), so its task should stop."""
    if not leases:
        return set(), set()
    # Rows locked in run id order (the leases sorted, each locked as it is looked up by
    # key, as the claim does): in any other order a heartbeat deadlocks with the same
    # worker's batch of finishes.
    leases = sorted(leases)
    sql = f"""
    WITH l AS MATERIALIZED (
        SELECT k.run_id, h.started_ms, coalesce(h.ttl_ms, :ttl_ms) AS ttl_ms
        FROM unnest(CAST(:run_ids AS uuid[]), CAST(:tokens AS text[]),
                    CAST(:started AS bigint[]), CAST(:ttls AS int[]))
            AS h(run_id, token, started_ms, ttl_ms)
        CROSS JOIN LATERAL (
            SELECT r.run_id FROM runs r
            WHERE r.run_id = h.run_id AND r.lease_token = h.token
              AND r.lease_expires_at > {NOW} AND {IN_BATCH}
            FOR UPDATE OF r
            OFFSET 0
        ) AS k
    )
    UPDATE runs r SET lease_expires_at = greatest(r.lease_expires_at, {NOW} + {_RUN_TTL}),
        started_at = {_STARTED.format(ms="l.started_ms")},
        attempt_started_at = {_ATTEMPT_STARTED.format(ms="l.started_ms")}
    FROM l
    WHERE r.run_id = l.run_id AND {IN_BATCH}
    RETURNING r.run_id
    """
    params = {
        "run_ids": pg_text_array(r for r, _ in leases),
        "tokens": pg_text_array(t for _, t in leases),
        "started": started_array((r for r, _ in leases), started_ms),
        "ttls": pg_text_array(
            None if (ms := (ttls_ms or {}).get(r)) is None else str(ms) for r, _ in leases
        ),
        "ttl_ms": ttl_ms,
        "now": now,
        **batch_bounds(r for r, _ in leases),
    }
    with engine.begin() as conn:
        kept = {str(row.run_id) for row in conn.execute(text(sql), params)}
    return kept, {r for r, _ in leases} - kept


def release_queued_in(conn: Connection, job_id: str) -> RunPointer | None:
    """Overlap 'queue': a run of the job ended, so its oldest run held back by the
    scheduler (marker `skip_reason = 'queued'`, kit.core.trigger.QUEUED) loses the marker
    and is returned for the caller to publish after commit: the run
    kit.core.policies.queued_to_release names (tests/contract/test_overlap_queue.py).
    Should that publish never happen, the run is now an ordinary undispatched run: the
    reaper publishes it.
    Only a job that may queue is looked for: the lookup by job reads every day of the run
    history (a run is found by id in its day; a job's runs are in all of them)."""
    overlap = conn.execute(
        text("SELECT overlap FROM jobs WHERE job_id = :job_id"), {"job_id": job_id}
    ).scalar()
    if not may_hold_queued_runs(overlap):
        return None
    row = conn.execute(
        text(
            f"""
            UPDATE runs SET skip_reason = NULL
            WHERE run_id = (
                SELECT run_id FROM runs
                WHERE job_id = :job_id AND status = {RUN_PENDING} AND dispatched_at IS NULL
                  AND skip_reason = '{QUEUED}'
                ORDER BY scheduled_at, run_id LIMIT 1
                FOR UPDATE SKIP LOCKED)
            RETURNING run_id, job_id, attempt, scheduled_at, priority
            """
        ),
        {"job_id": job_id},
    ).first()
    return pointer_of(row) if row is not None else None


def pointer_of(row: Any) -> RunPointer:
    return RunPointer(str(row.run_id), str(row.job_id), row.attempt, row.scheduled_at, row.priority)


def run_finish_ok(
    engine: Engine,
    run_id: str,
    token: str,
    now: datetime | None = None,
    started_ms: int | None = None,
    output: Output | None = None,
) -> FinishResult:
    """Success, only while this worker holds the lease; resets the job's dead streak
    and keeps the attempt's output. The batch's statements for one run
    (`runs_finish_ok`, what the worker sends): one way to finish a run, so a test of
    either is a test of both."""
    accepted, queued = runs_finish_ok(
        engine,
        [(run_id, token)],
        now,
        None if started_ms is None else {run_id: started_ms},
        None if output is None else {run_id: output},
    )
    if run_id not in accepted:
        return FinishResult(False)
    return FinishResult(True, "succeeded", queued_next=queued[0] if queued else None)


_FINISH_OK_BATCH = f"""
WITH done AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:tokens AS text[]),
                         CAST(:started AS bigint[])) AS d(run_id, token, started_ms)
), locked AS MATERIALIZED (
    SELECT k.run_id, d.started_ms
    FROM done d
    CROSS JOIN LATERAL (
        SELECT r.run_id FROM runs r
        WHERE r.run_id = d.run_id AND r.lease_token = d.token AND {IN_BATCH}
        FOR UPDATE OF r
        OFFSET 0
    ) AS k
)
UPDATE runs r SET status = {RUN_SUCCEEDED}, finished_at = {NOW}, error = NULL,
    lease_token = NULL, lease_expires_at = NULL,
    started_at = {_STARTED.format(ms="l.started_ms")},
    attempt_started_at = {_ATTEMPT_STARTED.format(ms="l.started_ms")}
FROM locked l
WHERE r.run_id = l.run_id AND {IN_BATCH}
RETURNING r.run_id::text, r.job_id::text, r.attempt,
    (SELECT j.overlap FROM jobs j WHERE j.job_id = r.job_id) AS overlap
"""
# release_queued_in for many jobs: up to n queued runs of each (one per run finished).
# The marker is a literal, not a parameter: psycopg prepares a statement after a few
# runs, and a generic plan cannot prove the predicate of ix_runs_queued from `= $3`
# (it read every undispatched run instead: 1.7 s per batch in a burst).
_RELEASE_QUEUED_BATCH = f"""
UPDATE runs SET skip_reason = NULL
WHERE run_id IN (
    SELECT q.run_id
    FROM unnest(CAST(:jobs AS uuid[]), CAST(:counts AS int[])) AS j(job_id, n)
    CROSS JOIN LATERAL (
        SELECT run_id FROM runs
        WHERE job_id = j.job_id AND status = {RUN_PENDING} AND dispatched_at IS NULL
          AND skip_reason = '{QUEUED}'
        ORDER BY scheduled_at, run_id LIMIT j.n
        FOR UPDATE SKIP LOCKED) AS q)
RETURNING run_id, job_id, attempt, scheduled_at, priority
"""


def runs_finish_ok(
    engine: Engine,
    leases: Sequence[tuple[str, str]],
    now: datetime | None = None,
    started_ms: Mapping[str, int] | None = None,
    outputs: Mapping[str, Output] | None = None,
) -> tuple[set[str], list[RunPointer]]:
    """`run_finish_ok` for a batch of (run_id, token) in one transaction: each run
    succeeds only while its token holds (rows locked in run id order, as claims do),
    the jobs' dead streaks reset, the accepted runs' outputs are kept, and for each run
    accepted one queued run of its job is released. Returns (run ids accepted, queued
    runs for the caller to publish)."""
    if not leases:
        return set(), []
    leases = sorted(leases)  # rows are locked in this order (see runs_heartbeat)
    params = {
        "run_ids": pg_array(r for r, _ in leases),
        "tokens": pg_text_array(t for _, t in leases),
        "started": started_array((r for r, _ in leases), started_ms),
        "now": now,
        **batch_bounds(r for r, _ in leases),
    }
    with engine.begin() as conn:
        rows = conn.execute(text(_FINISH_OK_BATCH), params).all()
        if not rows:
            return set(), []
        crash_point("finish.runs_written")
        if outputs:
            kept = [(r.run_id, r.attempt, outputs[r.run_id]) for r in rows if outputs.get(r.run_id)]
            outputs_insert_in(conn, kept, now)
        jobs = sorted({row.job_id for row in rows})
        conn.execute(
            text(
                "UPDATE jobs SET dead_streak = 0 "
                "WHERE job_id = ANY(CAST(:jobs AS uuid[])) AND dead_streak <> 0"
            ),
            {"jobs": pg_array(jobs)},
        )
        per_job: dict[str, int] = {}
        for row in rows:
            if may_hold_queued_runs(row.overlap):
                per_job[row.job_id] = per_job.get(row.job_id, 0) + 1
        queued = []
        if per_job:
            queuing = sorted(per_job)
            queued = conn.execute(
                text(_RELEASE_QUEUED_BATCH),
                {"jobs": pg_array(queuing), "counts": pg_array(per_job[j] for j in queuing)},
            ).all()
            crash_point("finish.queued_released", queued)
    return {row.run_id for row in rows}, [pointer_of(q) for q in queued]


def run_finish_cancelled(
    engine: Engine, run_id: str, token: str, reason: str, *, now: datetime | None = None
) -> FinishResult:
    """A run that cannot execute (its job was deleted): cancelled, with the reason."""
    with engine.begin() as conn:
        row = conn.execute(
            text(
                f"""
                UPDATE runs SET status = {RUN_CANCELLED}, finished_at = {NOW}, error = :reason,
                    lease_token = NULL, lease_expires_at = NULL
                WHERE run_id = :run_id AND lease_token = :token
                RETURNING job_id
                """
            ),
            {"run_id": run_id, "token": token, "reason": storable_text(reason), "now": now},
        ).first()
        if row is None:
            return FinishResult(False)
        queued = release_queued_in(conn, str(row.job_id))
    return FinishResult(True, "cancelled", queued_next=queued)


_APPEND_ERROR = f"""errors = errors || jsonb_build_array(jsonb_build_object(
    'attempt', attempt, 'error', CAST(:error AS text), 'finished_at', {NOW},
    'claimed_at', claimed_at, 'started_at', attempt_started_at, 'worker_id', worker_id,
    'due_at', greatest(scheduled_at, retry_at)))"""


def run_finish_failed(
    engine: Engine,
    run_id: str,
    token: str,
    error: str,
    rng: random.Random,
    partitions: int = PARTITION_COUNT,
    now: datetime | None = None,
    started_ms: int | None = None,
    output: Output | None = None,
    pause_after_dead_default: int | None = None,
) -> FinishResult:
    """A failed attempt, only while this worker holds the lease: in one transaction,
    either a retry (run retry_scheduled + a retry trigger at the backoff time, decided
    by the core from the database clock) or a dead letter (+ the job's dead streak, and
    the auto-pause when it reaches its pause_after_dead, or the operator's default for a
    job that names none: `pause_after_dead_default`); the attempt's output is kept."""
    error = storable_text(error)
    with engine.begin() as conn:
        run = conn.execute(
            text(
                f"""
                SELECT r.run_id, r.job_id, r.attempt, r.scheduled_at, r.started_at,
                    (extract(epoch FROM {NOW}) * 1000)::bigint AS now_ms,
                    j.retry_policy, j.version, {ATTEMPT_BASE_SQL} AS attempt_base
                FROM runs r LEFT JOIN jobs j ON j.job_id = r.job_id
                WHERE r.run_id = :run_id AND r.lease_token = :token
                FOR UPDATE OF r
                """
            ),
            {"run_id": run_id, "token": token, "now": now},
        ).first()
        if run is None:
            return FinishResult(False)
        if started_ms is not None:
            conn.execute(
                text(
                    f"""UPDATE runs r SET
                        started_at = {_STARTED.format(ms="CAST(:ms AS bigint)")},
                        attempt_started_at = {_ATTEMPT_STARTED.format(ms="CAST(:ms AS bigint)")}
                    WHERE run_id = :run_id"""
                ),
                {"ms": started_ms, "run_id": run_id},
            )
        if output:
            outputs_insert_in(conn, [(run_id, run.attempt, output)], now)
        job_id = str(run.job_id)
        if run.retry_policy is None:  # the job was deleted: nothing to retry against
            decision: RetryAt | DeadLetter = DeadLetter(run.attempt - run.attempt_base)
        else:
            policy = RetryPolicy.parse(run.retry_policy)
            decision = after_failure(policy, run.attempt, run.attempt_base, run.now_ms, rng)
        if isinstance(decision, RetryAt):
            # The job stays busy until the retry ends: a queued run waits for that.
            retry_at = _retry_in(conn, run, decision, error, partitions, now)
            return FinishResult(
                True, "retry_scheduled", retry_at=retry_at, next_attempt=decision.next_attempt
            )
        queued = release_queued_in(conn, job_id)
        conn.execute(
            text(
                f"""
                UPDATE runs SET status = {RUN_DEAD}, finished_at = {NOW}, error = :error,
                    lease_token = NULL, lease_expires_at = NULL, retry_at = NULL, {_APPEND_ERROR}
                WHERE run_id = :run_id
                """
            ),
            {"run_id": run_id, "error": error, "now": now},
        )
        crash_point("finish_failed.dead_written")
        dead_letter_in(conn, run_id, now)
        crash_point("finish_failed.dead_lettered")
        paused = job_dead_streak_in(conn, job_id, now, pause_after_dead_default)
    return FinishResult(True, "dead", job_paused=paused, queued_next=queued)


def _retry_in(
    conn: Connection,
    run: Any,
    decision: RetryAt,
    error: str,
    partitions: int,
    now: datetime | None = None,
) -> datetime:
    """Run -> retry_scheduled at the attempt it will retry with (kit.core.leases:
    finish_retry moves the attempt on; the error history keeps the one that failed), and
    its retry trigger. The trigger's key is (partition, fire_at, job, kind): if another
    retry of the job holds that instant, take the next ms."""
    fire_at = from_epoch_ms(decision.fire_at_ms)
    conn.execute(
        text(
            f"""
            UPDATE runs SET status = {RUN_RETRY_SCHEDULED}, retry_at = :retry_at,
                attempt = :next_attempt, finished_at = {NOW}, error = :error, lease_token = NULL,
                lease_expires_at = NULL, {_APPEND_ERROR}
            WHERE run_id = :run_id
            """
        ),
        {
            "run_id": str(run.run_id),
            "retry_at": fire_at,
            "next_attempt": decision.next_attempt,
            "error": error,
            "now": now,
        },
    )
    crash_point("finish_failed.retry_written")
    for _ in range(1000):
        inserted = conn.execute(
            text(
                f"""
                INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind,
                    attempt, run_scheduled_at)
                VALUES (:partition_id, :fire_at, :job_id, :job_version, {KIND_RETRY},
                    :attempt, :run_scheduled_at)
                ON CONFLICT DO NOTHING RETURNING fire_at
                """
            ),
            {
                "partition_id": partition_of(str(run.job_id), partitions),
                "fire_at": fire_at,
                "job_id": str(run.job_id),
                "job_version": run.version,
                "attempt": decision.next_attempt,
                "run_scheduled_at": run.scheduled_at,
            },
        ).first()
        if inserted is not None:
            break
        fire_at += timedelta(milliseconds=1)
    else:  # pragma: no cover - a thousand triggers of one job in one second
        raise RuntimeError(f"no free trigger slot for job {run.job_id} near {fire_at}")
    if to_epoch_ms(fire_at) != decision.fire_at_ms:
        conn.execute(
            text("UPDATE runs SET retry_at = :at WHERE run_id = :run_id"),
            {"at": fire_at, "run_id": str(run.run_id)},
        )
    return fire_at


def job_dead_streak_in(
    conn: Connection, job_id: str, now: datetime | None = None, default: int | None = None
) -> bool:
    """One more dead letter for the job; pause it when the streak reaches its
    pause_after_dead (`default` for a job that names none: the operator's). Returns
    whether this call paused it."""
    job = conn.execute(
        text(
            """
            UPDATE jobs SET dead_streak = dead_streak + 1 WHERE job_id = :job_id
            RETURNING dead_streak, pause_after_dead, paused
            """
        ),
        {"job_id": job_id},
    ).first()
    if job is None or job.paused:
        return False
    if not should_pause(job.dead_streak, job.pause_after_dead, default):
        return False
    conn.execute(
        text(f"UPDATE jobs SET paused = true, updated_at = {NOW} WHERE job_id = :job_id"),
        {"job_id": job_id, "now": now},
    )
    return True


def runs_mark_published(engine: Engine, run_ids: Sequence[str]) -> None:
    """After a publish outside the scheduler's own path (a released queued run)."""
    if not run_ids:
        return
    with engine.begin() as conn:
        runs_mark_published_in(conn, run_ids)


def runs_mark_published_in(
    conn: Connection, run_ids: Sequence[str], now: datetime | None = None
) -> None:
    """`dispatched_at`: when the run was last published by the reaper or a worker (the
    scheduler's publish of a new run writes nothing). The reaper counts a lost message
    from it, so it is not published again before the workers read past it. Runs are
    found by key and their status checked above the fence (see _CLAIM)."""
    conn.execute(
        text(
            f"""
            WITH k AS MATERIALIZED (
                SELECT run_id, status FROM runs r
                WHERE run_id = ANY(CAST(:run_ids AS uuid[])) AND {IN_BATCH}
                ORDER BY run_id FOR UPDATE)
            UPDATE runs r SET dispatched_at = {NOW}
            FROM k
            WHERE r.run_id = k.run_id AND k.status = {RUN_PENDING} AND {IN_BATCH}
            """
        ),
        {"run_ids": list(run_ids), "now": now, **batch_bounds(run_ids)},
    )


def runs_return(
    engine: Engine, leases: Sequence[tuple[str, str]], now: datetime | None = None
) -> list[RunPointer]:
    """Give back runs claimed ahead of their second whose task never started
    (kit.core.leases.return_run): pending again at the same attempt, no error recorded,
    marked published (the caller publishes them again after this commits; should it
    not, the reaper does once the workers have read past). Returns what was given back."""
    if not leases:
        return []
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                f"""
                UPDATE runs r SET status = {RUN_PENDING}, lease_token = NULL,
                    lease_expires_at = NULL, worker_id = NULL, dispatched_at = {NOW},
                    claimed_at = NULL
                FROM unnest(CAST(:run_ids AS uuid[]), CAST(:tokens AS text[])) AS h(run_id, token)
                WHERE r.run_id = h.run_id AND r.lease_token = h.token
                  AND r.started_at IS NULL AND {IN_BATCH}
                RETURNING r.run_id, r.job_id, r.attempt, r.scheduled_at, r.priority
                """
            ),
            {
                "run_ids": [r for r, _ in leases],
                "tokens": [t for _, t in leases],
                "now": now,
                **batch_bounds(r for r, _ in leases),
            },
        ).all()
    return [pointer_of(row) for row in rows]


# A token is held only by a running run (every end clears it): matching it is the
# status check, with no status named for the planner to pick a partial index by
# (tests/integration/test_plans_stale_stats.py).
_PREEMPT = f"""
UPDATE runs r SET status = {RUN_PENDING}, lease_token = NULL, lease_expires_at = NULL,
    worker_id = NULL, dispatched_at = {NOW}, claimed_at = NULL, attempt_started_at = NULL,
    started_at = CASE WHEN r.attempt = 1 THEN NULL ELSE r.started_at END,
    error = CAST(:error AS text),
    errors = r.errors || jsonb_build_array(jsonb_build_object(
        'attempt', r.attempt, 'preempted', true, 'error', CAST(:error AS text),
        'finished_at', {NOW}, 'claimed_at', r.claimed_at,
        'started_at', {_ATTEMPT_STARTED.format(ms="h.started_ms")},
        'worker_id', r.worker_id, 'due_at', greatest(r.scheduled_at, r.retry_at)))
FROM unnest(CAST(:run_ids AS uuid[]), CAST(:tokens AS text[]), CAST(:started AS bigint[]))
    AS h(run_id, token, started_ms)
WHERE r.run_id = h.run_id AND r.lease_token = h.token AND {IN_BATCH}
RETURNING r.run_id, r.job_id, r.attempt, r.scheduled_at, r.priority
"""


def runs_preempt(
    engine: Engine,
    leases: Sequence[tuple[str, str]],
    error: str,
    started_ms: Mapping[str, int] | None = None,
    now: datetime | None = None,
) -> list[RunPointer]:
    """Give back runs whose task the worker stopped for a paid tenant's run
    (kit.core.leases.preempt_run): pending again at the same attempt (no retry, no
    backoff, no dead letter), marked published for the caller to publish again (or the
    reaper). `error` says why on the run and in its history, as an entry marked
    `preempted` that is not a failed attempt (kit.store.run_detail). A first attempt's
    start is cleared: the run's start, and its lag, are those of the attempt that runs to
    its end. Returns what was given back."""
    if not leases:
        return []
    run_ids = [r for r, _ in leases]
    with engine.begin() as conn:
        rows = conn.execute(
            text(_PREEMPT),
            {
                "run_ids": run_ids,
                "tokens": [t for _, t in leases],
                "started": started_array(run_ids, started_ms),
                "error": storable_text(error),
                "now": now,
                **batch_bounds(run_ids),
            },
        ).all()
    return [pointer_of(row) for row in rows]


def runs_release(
    engine: Engine, leases: Sequence[tuple[str, str]], now: datetime | None = None
) -> int:
    """A worker shutting down gives up runs it could not finish: their leases expire
    now, so the reaper's next pass re-queues them (or dead-letters a last attempt)."""
    if not leases:
        return 0
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                f"""
                UPDATE runs r SET lease_expires_at = {NOW} - interval '1 millisecond'
                FROM unnest(CAST(:run_ids AS uuid[]), CAST(:tokens AS text[])) AS h(run_id, token)
                WHERE r.run_id = h.run_id AND r.lease_token = h.token AND {IN_BATCH}
                RETURNING r.run_id
                """
            ),
            {
                "run_ids": [r for r, _ in leases],
                "tokens": [t for _, t in leases],
                "now": now,
                **batch_bounds(r for r, _ in leases),
            },
        ).all()
    return len(rows)


_OUTPUTS_INSERT = f"""
INSERT INTO run_outputs (run_id, attempt, finished_at, output, stderr)
SELECT o.run_id, o.attempt, {NOW}, o.output, o.stderr
FROM unnest(CAST(:run_ids AS uuid[]), CAST(:attempts AS int[]), CAST(:texts AS text[]),
            CAST(:stderrs AS text[])) AS o(run_id, attempt, output, stderr)
ON CONFLICT (run_id, attempt) DO UPDATE
    SET output = EXCLUDED.output, stderr = EXCLUDED.stderr, finished_at = EXCLUDED.finished_at
"""


def outputs_insert_in(
    conn: Connection, outputs: Sequence[tuple[str, int, Output]], now: datetime | None = None
) -> None:
    """Keep attempts' outputs (run id, attempt, output), in the finish's transaction.
    Bounded again here whatever the caller did (the table's CHECK is the same cap)."""
    if not outputs:
        return
    ordered = sorted(outputs, key=lambda o: (o[0], o[1]))
    conn.execute(
        text(_OUTPUTS_INSERT),
        {
            "run_ids": [r for r, _, _ in ordered],
            "attempts": [a for _, a, _ in ordered],
            "texts": [excerpt(o.text, (), OUTPUT_CAP_BYTES) for _, _, o in ordered],
            "stderrs": [excerpt(o.stderr, (), OUTPUT_CAP_BYTES) for _, _, o in ordered],
            "now": now,
        },
    )

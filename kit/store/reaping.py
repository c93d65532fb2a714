"""The reaper's queries: runs whose worker vanished, and runs nobody claimed.

Both lock their rows FOR UPDATE SKIP LOCKED, so any number of reapers share the work,
and publish *inside* the transaction, before it records `dispatched_at` (when the reaper
last published the run) and commits: a failed publish rolls everything back (the next
pass tries again), and a worker that receives the message before the commit waits on the
row lock, then sees it claimable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from kit.core.outcome import expiry_exhausts
from kit.core.retry import RetryPolicy
from kit.core.trigger import QUEUED
from kit.crash import crash_point
from kit.store.claims import (
    NOW,
    RunPointer,
    job_dead_streak_in,
    pointer_of,
    release_queued_in,
    runs_mark_published_in,
)
from kit.store.dead_letters import ATTEMPT_BASE_SQL, dead_letter_in
from kit.store.switches import held_sql
from kit.store.vocab import (
    BUSY_SQL,
    PUBLISHED_BY_REAPER_SQL,
    RUN_DEAD,
    RUN_PENDING,
    RUN_RUNNING,
)

Publish = Callable[[Sequence[RunPointer]], None]
DEFAULT_BATCH = 1000


@dataclass(frozen=True)
class ExpiredReaped:
    requeued: list[RunPointer]
    dead: list[str]
    paused_jobs: list[str]


_APPEND_EXPIRY = f"""errors = errors || jsonb_build_array(jsonb_build_object(
    'attempt', attempt, 'error', 'lease expired (worker ' || coalesce(worker_id, '?') || ')',
    'finished_at', {NOW}, 'claimed_at', claimed_at, 'started_at', attempt_started_at,
    'worker_id', worker_id, 'due_at', greatest(scheduled_at, retry_at)))"""


def runs_reap_expired(
    engine: Engine,
    publish: Publish,
    limit: int = DEFAULT_BATCH,
    now: datetime | None = None,
    pause_after_dead_default: int | None = None,
) -> ExpiredReaped:
    """Running runs whose lease expired: back to pending with the next attempt and
    re-published, or dead (with a dead letter) when that was the budget's last attempt
    (a job that names no pause_after_dead pauses at `pause_after_dead_default`)."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                f"""
                SELECT r.run_id, r.job_id, r.attempt, j.retry_policy,
                    {ATTEMPT_BASE_SQL} AS attempt_base
                FROM runs r LEFT JOIN jobs j ON j.job_id = r.job_id
                WHERE r.status = {RUN_RUNNING} AND r.lease_expires_at <= {NOW}
                ORDER BY r.lease_expires_at
                LIMIT :limit
                FOR UPDATE OF r SKIP LOCKED
                """
            ),
            {"limit": limit, "now": now},
        ).all()
        requeue: list[str] = []
        dead: list[tuple[str, str]] = []
        for row in rows:
            policy = RetryPolicy.parse(row.retry_policy) if row.retry_policy else None
            if policy is None or expiry_exhausts(policy, row.attempt, row.attempt_base):
                dead.append((str(row.run_id), str(row.job_id)))
            else:
                requeue.append(str(row.run_id))
        paused: list[str] = []
        pointers: list[RunPointer] = []
        if dead:
            conn.execute(
                text(
                    f"""
                    UPDATE runs SET status = {RUN_DEAD}, finished_at = {NOW},
                        error = 'lease expired (worker ' || coalesce(worker_id, '?') || ')',
                        lease_token = NULL, lease_expires_at = NULL, {_APPEND_EXPIRY}
                    WHERE run_id = ANY(CAST(:run_ids AS uuid[]))
                    """
                ),
                {"run_ids": [r for r, _ in dead], "now": now},
            )
            for run_id, job_id in dead:
                dead_letter_in(conn, run_id, now)
                if job_dead_streak_in(conn, job_id, now, pause_after_dead_default):
                    paused.append(job_id)
                released = release_queued_in(conn, job_id)
                if released is not None:
                    pointers.append(released)
            crash_point("reap.dead_written")
        if requeue:
            updated = conn.execute(
                text(
                    f"""
                    UPDATE runs SET status = {RUN_PENDING}, attempt = attempt + 1,
                        error = 'lease expired (worker ' || coalesce(worker_id, '?') || ')',
                        {_APPEND_EXPIRY},
                        lease_token = NULL, lease_expires_at = NULL, worker_id = NULL,
                        claimed_at = NULL, attempt_started_at = NULL
                    WHERE run_id = ANY(CAST(:run_ids AS uuid[]))
                    RETURNING run_id, job_id, attempt, scheduled_at, priority
                    """
                ),
                {"run_ids": requeue, "now": now},
            ).all()
            pointers += [pointer_of(row) for row in updated]
            crash_point("reap.requeued", updated)
        if pointers:
            publish(pointers)
            crash_point("reap.published")
            runs_mark_published_in(conn, [p.run_id for p in pointers], now)
    return ExpiredReaped(pointers, [r for r, _ in dead], paused)


# Overlap 'queue' safety net: a finish that committed just before the scan that queued
# a run saw nothing to release, and nothing else would. The oldest queued run of a job
# with nothing else busy loses its marker after the grace and is published below like
# any unclaimed run (kit.core.policies.orphaned_queued_to_release; the contract suite
# holds the two equal). (The marker is a literal so the partial index on queued runs
# serves it. OFFSET 0 keeps the busy check a lookup by job per queued run: joined
# instead, statistics that call the busy runs few let the planner read all of them
# per queued run, 1.6 s a pass at 500 queued and 18k busy; test_plans_stale_stats.)
_RELEASE_ORPHANED_QUEUED = text(
    f"""
    UPDATE runs SET skip_reason = NULL
    WHERE run_id IN (
        SELECT DISTINCT ON (r.job_id) r.run_id FROM runs r
        WHERE r.status = {RUN_PENDING} AND r.skip_reason = '{QUEUED}'
          AND r.created_at < {NOW} - make_interval(
                secs => CAST(:grace_ms AS double precision) / 1000.0)
          AND NOT EXISTS (
              SELECT 1 FROM runs a
              WHERE a.job_id = r.job_id AND a.status IN {BUSY_SQL}
                AND a.skip_reason IS DISTINCT FROM '{QUEUED}'
              OFFSET 0)
        ORDER BY r.job_id, r.scheduled_at, r.run_id
    )
    """
)

# When a pending run's message went out, at the latest: its commit, its re-arm (a retry
# is published when re-armed, at most its scan-ahead before retry_at), or the reaper's
# own last publish of it.
_PUBLISHED_BY = "greatest(r.created_at, r.retry_at, r.dispatched_at)"

# A run a kill switch holds is left pending: no worker would claim it (kit.store.switches);
# once the switch is lifted it counts as lost by the rule below and goes out again.
HELD = held_sql("r")
_UNCLAIMED = f"""
    SELECT r.run_id, r.job_id, r.attempt, r.scheduled_at, r.priority,
        r.dispatched_at IS NULL AND (r.trigger_kind IN {PUBLISHED_BY_REAPER_SQL}
            OR EXISTS (SELECT 1 FROM dead_letters d
                       WHERE d.run_id = r.run_id AND d.replayed_at IS NOT NULL)) AS first
    FROM runs r
    LEFT JOIN unnest(CAST(:tiers AS text[]), CAST(:cutoffs AS timestamptz[]))
        AS c(tier, lost_before) ON r.priority = c.tier
    WHERE r.status = {RUN_PENDING} AND r.skip_reason IS DISTINCT FROM '{QUEUED}'
      AND NOT {HELD}
      AND (
        -- nobody else publishes these: at once (a retry of one at its retry_at)
        (r.dispatched_at IS NULL AND (r.retry_at IS NULL OR r.retry_at <= {{now}})
         AND (r.trigger_kind IN {PUBLISHED_BY_REAPER_SQL}
              OR EXISTS (SELECT 1 FROM dead_letters d
                         WHERE d.run_id = r.run_id AND d.replayed_at IS NOT NULL)))
        -- lost: published before the instant the workers have provably read past
        OR {_PUBLISHED_BY} < {{lost_before}}
      )
    ORDER BY r.scheduled_at
    LIMIT :limit
    FOR UPDATE OF r SKIP LOCKED
"""
_GRACE = "make_interval(secs => CAST(:grace_ms AS double precision) / 1000.0)"


@dataclass(frozen=True)
class Unclaimed:
    first: list[RunPointer]  # manual runs and replays, published for the first time
    lost: list[RunPointer]  # their message was lost (or never sent): published again

    @property
    def all(self) -> list[RunPointer]:
        return self.first + self.lost


def runs_publish_unclaimed(
    engine: Engine,
    grace_ms: int,
    publish: Publish,
    limit: int = DEFAULT_BATCH,
    now: datetime | None = None,
    lost_before: Mapping[str, datetime] | None = None,
) -> Unclaimed:
    """Pending runs that need the reaper to publish them, published and marked:

    - manual runs ("run now": the API has no producer), backfilled runs and replayed dead
      letters, at once (a re-armed retry of one waits for its retry_at);
    - runs whose message is lost: published before their tier's `lost_before` instant
      (kit.core.recovery.unclaimed_cutoff: the workers have provably read past it) and
      still unclaimed. A node that died between commit and publish is the same case.
      Without `lost_before` (no view of the workers' progress), a run still unclaimed
      `grace_ms` after it went out counts as lost; behind a backlog that can duplicate a
      message, which claims nothing.

    A run held back by the overlap policy 'queue' is not one of them: the worker that
    finishes its job's busy run releases it; only a queued run left with nothing ahead of
    it is released here (see above)."""
    if lost_before is None:
        before = f"{NOW} - {_GRACE}"
        tiers: list[str] = []
    else:
        before = "c.lost_before"
        tiers = sorted(lost_before)
    sql = _UNCLAIMED.format(now=NOW, lost_before=before)
    params = {
        "grace_ms": grace_ms,
        "limit": limit,
        "now": now,
        "tiers": tiers,
        "cutoffs": [lost_before[t] for t in tiers] if lost_before else [],
    }
    with engine.begin() as conn:
        conn.execute(_RELEASE_ORPHANED_QUEUED, {"grace_ms": grace_ms, "now": now})
        crash_point("republish.orphans_released")
        # The oldest pending runs of every day's partition, merged in order: with
        # statistics that say no run is pending, the planner would rather read them all
        # and sort (12,500 rows for a batch of 64, test_plans_stale_stats), which no
        # estimate can argue it out of; without a sort it can only merge the partial
        # indexes' ordered scans, and stops at the batch.
        conn.execute(text("SET LOCAL enable_sort = off"))
        rows = conn.execute(text(sql), params).all()
        conn.execute(text("SET LOCAL enable_sort = on"))
        found = Unclaimed(
            [pointer_of(row) for row in rows if row.first],
            [pointer_of(row) for row in rows if not row.first],
        )
        if rows:
            publish(found.all)
            crash_point("republish.published")
            runs_mark_published_in(conn, [p.run_id for p in found.all], now)
    return found

"""The reaper's queries: runs whose worker vanished, and runs never published.

Both lock their rows FOR UPDATE SKIP LOCKED, so any number of reapers share the work,
and publish *inside* the transaction, before it marks the runs dispatched and commits:
a failed publish rolls everything back (the next pass tries again), and a worker that
receives the message before the commit waits on the row lock, then sees it claimable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from kit.core.outcome import expiry_exhausts
from kit.core.retry import RetryPolicy
from kit.core.trigger import QUEUED
from kit.store.claims import (
    NOW,
    RunPointer,
    job_dead_streak_in,
    pointer_of,
    release_queued_in,
    runs_mark_dispatched_in,
)
from kit.store.dead_letters import ATTEMPT_BASE_SQL, dead_letter_in
from kit.store.scheduling import BUSY_SQL

Publish = Callable[[Sequence[RunPointer]], None]
DEFAULT_BATCH = 1000


@dataclass(frozen=True)
class ExpiredReaped:
    requeued: list[RunPointer]
    dead: list[str]
    paused_jobs: list[str]


_APPEND_EXPIRY = f"""errors = errors || jsonb_build_array(jsonb_build_object(
    'attempt', attempt, 'error', 'lease expired (worker ' || coalesce(worker_id, '?') || ')',
    'finished_at', {NOW}))"""


def runs_reap_expired(
    engine: Engine, publish: Publish, limit: int = DEFAULT_BATCH, now: datetime | None = None
) -> ExpiredReaped:
    """Running runs whose lease expired: back to pending with the next attempt and
    re-published, or dead (with a dead letter) when that was the budget's last attempt."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                f"""
                SELECT r.run_id, r.job_id, r.attempt, j.retry_policy,
                    {ATTEMPT_BASE_SQL} AS attempt_base
                FROM runs r LEFT JOIN jobs j ON j.job_id = r.job_id
                WHERE r.status = 'running' AND r.lease_expires_at <= {NOW}
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
                    UPDATE runs SET status = 'dead', finished_at = {NOW},
                        error = 'lease expired (worker ' || coalesce(worker_id, '?') || ')',
                        lease_token = NULL, lease_expires_at = NULL, {_APPEND_EXPIRY}
                    WHERE run_id = ANY(CAST(:run_ids AS uuid[]))
                    """
                ),
                {"run_ids": [r for r, _ in dead], "now": now},
            )
            for run_id, job_id in dead:
                dead_letter_in(conn, run_id)
                if job_dead_streak_in(conn, job_id):
                    paused.append(job_id)
                released = release_queued_in(conn, job_id)
                if released is not None:
                    pointers.append(released)
        if requeue:
            updated = conn.execute(
                text(
                    f"""
                    UPDATE runs SET status = 'pending', attempt = attempt + 1,
                        error = 'lease expired (worker ' || coalesce(worker_id, '?') || ')',
                        {_APPEND_EXPIRY},
                        lease_token = NULL, lease_expires_at = NULL, worker_id = NULL,
                        dispatched_at = NULL
                    WHERE run_id = ANY(CAST(:run_ids AS uuid[]))
                    RETURNING run_id, job_id, attempt, scheduled_at, priority
                    """
                ),
                {"run_ids": requeue, "now": now},
            ).all()
            pointers += [pointer_of(row) for row in updated]
        if pointers:
            publish(pointers)
            runs_mark_dispatched_in(conn, [p.run_id for p in pointers])
    return ExpiredReaped(pointers, [r for r, _ in dead], paused)


# Overlap 'queue' safety net: a finish that committed just before the scan that queued
# a run saw nothing to release, and nothing else would. The oldest queued run of a job
# with nothing else pending, dispatched or running loses its marker after the grace and
# is published below like any undispatched run. (The marker is a literal so the
# partial index on queued runs serves it.)
_RELEASE_ORPHANED_QUEUED = text(
    f"""
    UPDATE runs SET skip_reason = NULL
    WHERE run_id IN (
        SELECT DISTINCT ON (r.job_id) r.run_id FROM runs r
        WHERE r.status = 'pending' AND r.dispatched_at IS NULL AND r.skip_reason = '{QUEUED}'
          AND r.created_at < {NOW} - make_interval(
                secs => CAST(:grace_ms AS double precision) / 1000.0)
          AND NOT EXISTS (
              SELECT 1 FROM runs a
              WHERE a.job_id = r.job_id AND a.status IN {BUSY_SQL}
                AND a.skip_reason IS DISTINCT FROM '{QUEUED}')
        ORDER BY r.job_id, r.scheduled_at, r.run_id
    )
    """
)


def runs_republish_undispatched(
    engine: Engine,
    grace_ms: int,
    publish: Publish,
    limit: int = DEFAULT_BATCH,
    now: datetime | None = None,
) -> list[RunPointer]:
    """Pending runs never published `grace_ms` after they were committed (a scheduler
    died between commit and publish), and manual runs ("run now", written by the API,
    which has no producer) and replayed dead letters at once: publish them
    and mark them dispatched. A re-armed retry (the scan re-arms it up to its scan-ahead
    early and holds it until its retry_at) is never published before its retry_at: an
    ordinary one counts its grace from then, a manual or replayed one goes at once.

    A run held back by the overlap policy 'queue' (skip_reason 'queued') is not one of
    them: the worker that finishes its job's running run releases and publishes it; only
    a queued run left with nothing ahead of it is released here (see above)."""
    with engine.begin() as conn:
        conn.execute(_RELEASE_ORPHANED_QUEUED, {"grace_ms": grace_ms, "now": now})
        rows = conn.execute(
            text(
                f"""
                SELECT r.run_id, r.job_id, r.attempt, r.scheduled_at, r.priority
                FROM runs r
                WHERE r.status = 'pending' AND r.dispatched_at IS NULL
                  AND (greatest(r.created_at, r.retry_at) < {NOW} - make_interval(
                          secs => CAST(:grace_ms AS double precision) / 1000.0)
                       OR ((r.trigger_kind = 'manual'
                            OR EXISTS (SELECT 1 FROM dead_letters d
                                       WHERE d.run_id = r.run_id AND d.replayed_at IS NOT NULL))
                           AND (r.retry_at IS NULL OR r.retry_at <= {NOW})))
                  AND r.skip_reason IS DISTINCT FROM :queued
                ORDER BY r.scheduled_at
                LIMIT :limit
                FOR UPDATE OF r SKIP LOCKED
                """
            ),
            {"grace_ms": grace_ms, "limit": limit, "queued": QUEUED, "now": now},
        ).all()
        pointers = [pointer_of(row) for row in rows]
        if pointers:
            publish(pointers)
            runs_mark_dispatched_in(conn, [p.run_id for p in pointers])
    return pointers


def runs_republish_lost(
    engine: Engine,
    cutoffs: Mapping[str, datetime],
    publish: Publish,
    limit: int = DEFAULT_BATCH,
    now: datetime | None = None,
) -> list[RunPointer]:
    """Runs marked dispatched before their tier's cutoff and still not claimed: the
    workers' group has read past every message published before the cutoff (see
    kit.core.recovery), so their message is lost. Published again, and their
    dispatched_at moves to now, so only a later cutoff can pick them again."""
    if not cutoffs:
        return []
    tiers = sorted(cutoffs)
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                """
                SELECT r.run_id, r.job_id, r.attempt, r.scheduled_at, r.priority
                FROM runs r
                JOIN unnest(CAST(:tiers AS text[]), CAST(:cutoffs AS timestamptz[]))
                    AS c(tier, cutoff) ON r.priority = c.tier
                WHERE r.status = 'dispatched' AND r.dispatched_at < c.cutoff
                ORDER BY r.dispatched_at
                LIMIT :limit
                FOR UPDATE OF r SKIP LOCKED
                """
            ),
            {"tiers": tiers, "cutoffs": [cutoffs[t] for t in tiers], "limit": limit},
        ).all()
        pointers = [pointer_of(row) for row in rows]
        if pointers:
            publish(pointers)
            conn.execute(
                text(
                    f"UPDATE runs SET dispatched_at = {NOW} "
                    "WHERE run_id = ANY(CAST(:ids AS uuid[])) AND status = 'dispatched'"
                ),
                {"ids": [p.run_id for p in pointers], "now": now},
            )
    return pointers

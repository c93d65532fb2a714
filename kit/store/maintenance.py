"""The maintenance service's deletes: rows the kit no longer needs, by the rules of
kit.core.retention, in bounded batches.

Each statement picks at most `batch` rows over an index of its own (migration 0008),
locked FOR UPDATE SKIP LOCKED, so several maintenance processes share the work and a
row another transaction is using right now (a replay, an ack) is left for the next
pass. Time is the database's clock unless a caller passes `now` (tests).

- a dead letter whose run is live again after a replay is never picked: its run's
  attempt budget is read from it (kit.store.dead_letters.ATTEMPT_BASE_SQL);
- a queue task that is queued or leased is never picked, however old;
- deleting a finished queue task frees its Idempotency-Key (a retry after the task's
  retention enqueues anew), as an expired job-create key does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine, text

from kit.core.leases import BUSY
from kit.core.notify import FINISHED_NOTIFICATIONS
from kit.core.queue_task import FINISHED
from kit.core.retention import Retention
from kit.store.db import NOW_SQL
from kit.store.vocab import sql_statuses

DEFAULT_BATCH = 5000
MAX_BATCHES = 100  # per table per pass: a pass stays bounded, the next one goes on
STALE_WORKER_S = 86_400  # a worker row not refreshed for a day is a worker long gone

_NOW = NOW_SQL


def _older(column: str, param: str) -> str:
    return f"{column} <= {_NOW} - make_interval(secs => CAST(:{param} AS double precision))"


# Sorted by value, as kit.core.retention lists them (these statements' text).
_FINISHED_TASKS = sql_statuses(sorted(FINISHED))
_LIVE_RUNS = sql_statuses(sorted(BUSY))
_FINISHED_NOTIFICATIONS = sql_statuses(sorted(FINISHED_NOTIFICATIONS))


STATEMENTS: dict[str, str] = {
    "idempotency_keys": f"""
        DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM idempotency_keys WHERE {_older("created_at", "idempotency_key_s")}
            LIMIT :batch FOR UPDATE SKIP LOCKED))
    """,
    "queue_tasks": f"""
        DELETE FROM queue_tasks WHERE task_id IN (
            SELECT task_id FROM queue_tasks
            WHERE status IN {_FINISHED_TASKS}
              AND {_older("finished_at", "queue_task_s")}
            LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
    "dead_letters": f"""
        DELETE FROM dead_letters WHERE run_id IN (
            SELECT run_id FROM dead_letters
            WHERE replayed_at IS NULL AND {_older("created_at", "dead_letter_s")}
            LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
    "replayed_dead_letters": f"""
        DELETE FROM dead_letters WHERE run_id IN (
            SELECT d.run_id FROM dead_letters d LEFT JOIN runs r ON r.run_id = d.run_id
            WHERE d.replayed_at IS NOT NULL AND {_older("d.replayed_at", "replayed_dead_letter_s")}
              AND (r.status IS NULL OR r.status NOT IN {_LIVE_RUNS})
            LIMIT :batch FOR UPDATE OF d SKIP LOCKED)
    """,
    "job_audit": f"""
        DELETE FROM job_audit WHERE audit_id IN (
            SELECT audit_id FROM job_audit WHERE {_older("at", "audit_s")}
            LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
    "run_outputs": f"""
        DELETE FROM run_outputs WHERE (run_id, attempt) IN (
            SELECT run_id, attempt FROM run_outputs WHERE {_older("finished_at", "run_output_s")}
            LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
    "notifications": f"""
        DELETE FROM notifications WHERE notification_id IN (
            SELECT notification_id FROM notifications
            WHERE status IN {_FINISHED_NOTIFICATIONS}
              AND {_older("created_at", "notification_s")}
            LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
    "console_sessions": f"""
        DELETE FROM console_sessions WHERE session_hash IN (
            SELECT session_hash FROM console_sessions WHERE expires_at <= {_NOW}
            LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
    "workers": f"""
        DELETE FROM workers WHERE worker_id IN (
            SELECT worker_id FROM workers WHERE {_older("heartbeat_at", "stale_worker_s")}
            LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
}


@dataclass
class Expired:
    """Rows deleted, per statement (STATEMENTS' keys)."""

    rows: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _params(retention: Retention, batch: int, now: datetime | None) -> dict[str, object]:
    return {
        "now": now,
        "batch": batch,
        "idempotency_key_s": retention.idempotency_key_s,
        "queue_task_s": retention.queue_task_s,
        "dead_letter_s": retention.dead_letter_s,
        "replayed_dead_letter_s": retention.replayed_dead_letter_s,
        "audit_s": retention.audit_s,
        "run_output_s": retention.run_output_s,
        "notification_s": retention.notification_s,
        "stale_worker_s": STALE_WORKER_S,
    }


def expire_one_batch(conn: Connection, name: str, params: dict[str, object]) -> int:
    return conn.execute(text(STATEMENTS[name]), params).rowcount


def expire(
    engine: Engine,
    retention: Retention,
    *,
    batch: int = DEFAULT_BATCH,
    now: datetime | None = None,
    max_batches: int = MAX_BATCHES,
) -> Expired:
    """One pass: every statement, a transaction per batch, until a batch comes back
    short (or max_batches)."""
    params = _params(retention, batch, now)
    expired = Expired()
    for name in STATEMENTS:
        total = 0
        for _ in range(max_batches):
            with engine.begin() as conn:
                deleted = expire_one_batch(conn, name, params)
            total += deleted
            if deleted < batch:
                break
        expired.rows[name] = total
    return expired

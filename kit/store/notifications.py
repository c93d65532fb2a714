"""The failure notifications' outbox (kit.core.notify): take the ones due, record each
try's outcome. Any number of senders share it: a take locks its rows SKIP LOCKED and
leases them for SEND_LEASE_S (a sender that dies mid-try leaves them to the next)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from kit.core.notify import ERROR_CHARS, SEND_LEASE_S
from kit.store.db import NOW_SQL
from kit.store.vocab import NOTIFICATION_FAILED, NOTIFICATION_PENDING, NOTIFICATION_SENT


@dataclass(frozen=True)
class DueNotification:
    notification_id: int
    tenant: str
    job_id: str
    job_name: str
    run_id: str
    attempt: int
    scheduled_at: datetime
    error: str | None
    target: dict[str, Any]
    tries: int  # including the one about to be made
    created_at: datetime
    now_ms: int  # the database's clock at the take


_TAKE = f"""
UPDATE notifications n SET tries = n.tries + 1,
    next_at = {NOW_SQL} + make_interval(secs => :lease_s)
WHERE n.notification_id IN (
    SELECT notification_id FROM notifications
    WHERE status = {NOTIFICATION_PENDING} AND next_at <= {NOW_SQL}
    ORDER BY next_at LIMIT :limit FOR UPDATE SKIP LOCKED)
RETURNING n.notification_id, n.tenant, n.job_id::text, n.job_name, n.run_id::text,
    n.attempt, n.scheduled_at, n.error, n.target, n.tries, n.created_at,
    (extract(epoch FROM {NOW_SQL}) * 1000)::bigint AS now_ms
"""


def notifications_take(
    engine: Engine, limit: int, now: datetime | None = None
) -> list[DueNotification]:
    """Lease up to `limit` notifications due now (oldest due first), counting the try."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(_TAKE), {"limit": limit, "lease_s": SEND_LEASE_S, "now": now}
        ).all()
    return [DueNotification(**row._mapping) for row in rows]


_SENT = f"""
UPDATE notifications SET status = {NOTIFICATION_SENT}, sent_at = {NOW_SQL}, last_error = NULL
WHERE notification_id = :id AND status = {NOTIFICATION_PENDING}
"""
# A failed try: due again at :retry_at, or given up (:retry_at NULL).
_FAILED = f"""
UPDATE notifications SET last_error = :error,
    status = CASE WHEN CAST(:retry_at AS timestamptz) IS NULL
        THEN {NOTIFICATION_FAILED} ELSE {NOTIFICATION_PENDING} END,
    next_at = coalesce(CAST(:retry_at AS timestamptz), next_at)
WHERE notification_id = :id AND status = {NOTIFICATION_PENDING}
"""


def notification_sent(engine: Engine, notification_id: int, now: datetime | None = None) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(_SENT),
            {"id": notification_id, "now": now},
        )


def notification_failed(
    engine: Engine, notification_id: int, error: str, retry_at: datetime | None
) -> None:
    """A try failed: try again at `retry_at`, or give up (None)."""
    with engine.begin() as conn:
        conn.execute(
            text(_FAILED),
            {"id": notification_id, "error": error[:ERROR_CHARS], "retry_at": retry_at},
        )


@dataclass(frozen=True)
class NotificationView:
    run_id: str
    attempt: int
    status: str
    tries: int
    sent_at: datetime | None
    last_error: str | None
    created_at: datetime


def notifications_of_run(engine: Engine, run_id: str) -> Sequence[NotificationView]:
    """A run's failure notifications (one per dead letter), for its page."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT run_id::text, attempt, status, tries, sent_at, last_error, created_at "
                "FROM notifications WHERE run_id = :run_id ORDER BY attempt"
            ),
            {"run_id": run_id},
        ).all()
    return [NotificationView(**row._mapping) for row in rows]

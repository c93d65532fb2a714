"""Failure notifications: a job may name a webhook that is told of each of its dead
letters, once per dead letter, with the run's summary and key.

The dead letter's own transaction writes the notification to an outbox (nothing is sent
on the run path: a slow or dead webhook never holds a worker); the maintenance service
sends what is due (kit.maintenance.notifier) and this module decides: what is sent, how
long to wait after a failed send, and when to give up. Every try of one notification
carries the same `Idempotency-Key`, so a receiver that saw it already can tell.
"""

from __future__ import annotations

import random
from enum import StrEnum
from typing import Any

from kit.core.retry import RetryPolicy, next_retry_at_ms


class NotificationStatus(StrEnum):
    pending = "pending"  # not sent yet: due at its next_at
    sent = "sent"  # the webhook answered 2xx
    failed = "failed"  # every try failed; kept, with the last error, until its retention


FINISHED_NOTIFICATIONS = frozenset({NotificationStatus.sent, NotificationStatus.failed})
# Tries of one notification: the first and up to 7 retries over about 20 minutes.
SEND_POLICY = RetryPolicy(max_attempts=8, base_s=5.0, cap_s=600.0, jitter="full")
SEND_TIMEOUT_S = 10.0
# A try in progress holds its notification this long: a sender that died mid-try leaves
# it to be tried again after that (at least once, under the same key).
SEND_LEASE_S = 60.0
ERROR_CHARS = 500


def after_failed_send(tries: int, now_ms: int, rng: random.Random) -> int | None:
    """When to try again after try number `tries` failed, or None: give up."""
    if tries < 1:
        raise ValueError("tries must be at least 1")
    return next_retry_at_ms(now_ms, SEND_POLICY, tries, rng)


def notification_key(run_id: str, attempt: int) -> str:
    """The `Idempotency-Key` of a dead letter's notification: one per dead letter (a run
    that dies again after a replay is another dead letter, at a later attempt)."""
    return f"{run_id}:{attempt}"


def dead_letter_summary(
    *,
    tenant: str,
    job_id: str,
    job_name: str,
    run_id: str,
    attempt: int,
    scheduled_at: str,
    error: str | None,
    died_at: str,
) -> dict[str, Any]:
    """The webhook's JSON body. `idempotency_key` is the run's (its id, which every
    attempt's task was given), not the notification's."""
    return {
        "event": "run.dead",
        "tenant": tenant,
        "job": {"job_id": job_id, "name": job_name},
        "run": {
            "run_id": run_id,
            "idempotency_key": run_id,
            "attempt": attempt,
            "scheduled_at": scheduled_at,
            "died_at": died_at,
            "error": None if error is None else error[:ERROR_CHARS],
        },
    }

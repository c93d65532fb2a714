"""What happens after an attempt fails: retry at a time, or dead letter; and whether a
job's streak of dead letters pauses it.

Attempts are counted within a budget: a replayed dead letter keeps its run id (and so
its growing `attempt`, which guards stale queue messages) but gets a fresh budget, so
the policy sees `attempt - attempt_base` (base = the attempt at the last replay).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kit.core.retry import RetryPolicy, next_retry_at_ms


@dataclass(frozen=True)
class RetryAt:
    """Schedule attempt `next_attempt` at `fire_at_ms` (a retry trigger)."""

    fire_at_ms: int
    next_attempt: int


@dataclass(frozen=True)
class DeadLetter:
    """Attempts are exhausted: the run is dead and goes to the dead letters."""

    attempts_used: int


def budget_attempt(attempt: int, attempt_base: int) -> int:
    """The 1-based attempt number within the current budget."""
    if attempt_base < 0 or attempt <= attempt_base:
        raise ValueError(f"attempt {attempt} is not after the budget base {attempt_base}")
    return attempt - attempt_base


def after_failure(
    policy: RetryPolicy, attempt: int, attempt_base: int, now_ms: int, rng: random.Random
) -> RetryAt | DeadLetter:
    """Attempt `attempt` failed at `now_ms`: retry with backoff and jitter, or give up."""
    used = budget_attempt(attempt, attempt_base)
    at = next_retry_at_ms(now_ms, policy, used, rng)
    if at is None:
        return DeadLetter(used)
    return RetryAt(at, attempt + 1)


def expiry_exhausts(policy: RetryPolicy, attempt: int, attempt_base: int) -> bool:
    """A lease expired during `attempt` (the worker died): was that the last one allowed?"""
    return budget_attempt(attempt, attempt_base) >= policy.max_attempts


# The operator's default when a job names none (CRONFLEET_PAUSE_AFTER_DEAD).
DEFAULT_PAUSE_AFTER_DEAD = 5


def should_pause(
    dead_streak: int, pause_after_dead: int | None, default: int | None = None
) -> bool:
    """Auto-pause: a job whose last `pause_after_dead` runs all went dead stops firing.
    A job that names none (None) takes the operator's `default`; 0 (the job's, or the
    default) never pauses: a job opts out with `pause_after_dead: 0`."""
    limit = default if pause_after_dead is None else pause_after_dead
    if limit is None or limit == 0:
        return False
    if limit < 0:
        raise ValueError("pause_after_dead must be 0 (never) or more")
    return dead_streak >= limit

"""A task of a pull-based queue, as explicit transitions with reasons.

Outside workers lease tasks over HTTP, so a worker may vanish at any point: every
transition that a worker asks for (ack, nack, heartbeat) carries the lease token it was
given, and is refused with a reason when the token is not the current one or the lease
has expired. An expired lease is not swept by a reaper: the next lease request finds the
task visible again and either leases it (the attempt counts) or, when that was the last
attempt, moves it to the dead letters.

Time is the caller's (the database clock in production). A lease is live while
now_ms < lease_expires_at_ms. `attempt` is the number of leases granted so far, so the
first lease is attempt 1, matching kit.core.retry's 1-based attempts.

An attempt never outlives `timeout_ms` from the moment it was leased: the lease and every
heartbeat are capped at that deadline, so a worker stuck in a heartbeat loop cannot keep
a task forever.
"""

from __future__ import annotations

import hmac
import random
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from kit.core.retry import RetryPolicy, next_retry_at_ms
from kit.core.timeutil import from_epoch_ms

MAX_ATTEMPTS = 100
# Nack backoff: full jitter under min(cap, base * 2**(attempt-1)), as for runs.
NACK_BASE_S = 1.0
NACK_CAP_S = 300.0


class TaskStatus(StrEnum):
    queued = "queued"
    leased = "leased"
    done = "done"
    dead = "dead"


# A finished task never changes again and is what retention may expire.
FINISHED = frozenset({TaskStatus.done, TaskStatus.dead})
# What a lease request considers, once visible: a queued task, or a leased one whose lease
# expired (its visible_at is its lease expiry). The store's lease scan selects these
# (kit.store.queues._LEASE_CANDIDATES, and the partial index it reads, keep this order).
LEASABLE = (TaskStatus.queued, TaskStatus.leased)
# What a queue's counts cover (its depth, its leases, its dead letters): every task but a
# done one, which is history. The stats and the console's overview of the queues read
# these (kit.store.queues.STATS_SQL, kit.store.console_views), in this order.
COUNTED = (*LEASABLE, TaskStatus.dead)


@dataclass(frozen=True)
class QueueTask:
    task_id: str
    status: TaskStatus
    attempt: int  # leases granted so far
    max_attempts: int
    timeout_ms: int
    visible_at_ms: int  # when a lease may take it (for a leased task: its lease expiry)
    lease_token: str | None = None
    lease_expires_at_ms: int | None = None
    deadline_ms: int | None = None  # leased: leased_at + timeout_ms, the attempt's end
    worker_id: str | None = None
    dead_reason: str | None = None


@dataclass(frozen=True)
class TaskTransition:
    accepted: bool
    task: QueueTask
    reason: str | None = None
    event: str | None = None  # the TASK_TRANSITIONS event applied (None when refused)


@dataclass(frozen=True)
class TaskRule:
    source: TaskStatus
    event: str
    target: TaskStatus
    guard: str


_S = TaskStatus
TASK_TRANSITIONS: tuple[TaskRule, ...] = (
    TaskRule(_S.queued, "lease", _S.leased, "visible_at <= now; attempt + 1; new token"),
    TaskRule(_S.leased, "lease", _S.leased, "lease expired; attempts left; attempt + 1"),
    TaskRule(_S.leased, "expire_dead", _S.dead, "lease expired on the last attempt"),
    TaskRule(_S.leased, "heartbeat", _S.leased, "token matches; lease live; capped at deadline"),
    TaskRule(_S.leased, "ack", _S.done, "token matches; lease live"),
    TaskRule(_S.done, "ack_replay", _S.done, "token of the ack that finished it (idempotent)"),
    TaskRule(_S.leased, "nack_retry", _S.queued, "token matches; retryable; attempts left"),
    TaskRule(_S.leased, "nack_dead", _S.dead, "token matches; not retryable or no attempts left"),
    TaskRule(_S.dead, "replay", _S.queued, "a person replays it: visible now, a fresh budget"),
)
_RULES = {(r.source, r.event): r.target for r in TASK_TRANSITIONS}


def _move(task: QueueTask, event: str, **changes: Any) -> TaskTransition:
    target = _RULES.get((task.status, event))
    if target is None:
        return TaskTransition(False, task, f"cannot {event} a {task.status.value} task")
    return TaskTransition(True, replace(task, status=target, **changes), None, event)


def _no(task: QueueTask, reason: str) -> TaskTransition:
    return TaskTransition(False, task, reason)


def _iso(ms: int) -> str:
    return from_epoch_ms(ms).isoformat().replace("+00:00", "Z")


def _token_matches(task: QueueTask, token: str) -> bool:
    return task.lease_token is not None and hmac.compare_digest(
        task.lease_token.encode(), token.encode()
    )


def leasable(task: QueueTask, now_ms: int) -> bool:
    """Would a lease request now consider this task (visible, not finished)?"""
    return task.status in LEASABLE and task.visible_at_ms <= now_ms


def lease_order(task: QueueTask) -> tuple[int, str]:
    """The order a lease request takes visible tasks in: the longest visible first, ties
    by id (the store's `ORDER BY visible_at, task_id`)."""
    return (task.visible_at_ms, task.task_id)


def lease_task(
    task: QueueTask, worker_id: str, token: str, now_ms: int, lease_ms: int
) -> TaskTransition:
    """Lease a visible task: a queued one, or one whose earlier lease expired.

    The lease lasts `lease_ms`, but never past the attempt's deadline (`timeout_ms`
    after now). An expired lease on the last attempt goes to the dead letters instead.
    """
    if lease_ms <= 0:
        raise ValueError("lease_ms must be positive")
    if task.status not in LEASABLE:
        return _no(task, f"not leasable: status is {task.status.value}")
    if now_ms < task.visible_at_ms:
        return _no(task, f"not visible until {_iso(task.visible_at_ms)}")
    if task.status is TaskStatus.leased and task.attempt >= task.max_attempts:
        expired_at = task.lease_expires_at_ms or task.visible_at_ms
        return _move(
            task,
            "expire_dead",
            lease_token=None,
            lease_expires_at_ms=None,
            deadline_ms=None,
            dead_reason=(
                f"lease expired at {_iso(expired_at)} on attempt {task.attempt} "
                f"of {task.max_attempts}"
            ),
        )
    deadline_ms = now_ms + task.timeout_ms
    expires_ms = min(now_ms + lease_ms, deadline_ms)
    return _move(
        task,
        "lease",
        attempt=task.attempt + 1,
        lease_token=token,
        lease_expires_at_ms=expires_ms,
        visible_at_ms=expires_ms,
        deadline_ms=deadline_ms,
        worker_id=worker_id,
    )


def _check_lease(task: QueueTask, token: str, now_ms: int) -> str | None:
    """Why `token` may not act on the task now, or None when it may."""
    if task.status is not TaskStatus.leased:
        return f"task is not leased: status is {task.status.value}"
    if not _token_matches(task, token):
        return "lease token does not match"
    expires = task.lease_expires_at_ms
    if expires is not None and now_ms >= expires:
        return f"lease expired at {_iso(expires)}"
    return None


def heartbeat_task(task: QueueTask, token: str, now_ms: int, extend_ms: int) -> TaskTransition:
    """Extend a live lease to now + extend_ms, capped at the attempt's deadline."""
    if extend_ms <= 0:
        raise ValueError("extend_ms must be positive")
    refusal = _check_lease(task, token, now_ms)
    if refusal is not None:
        return _no(task, refusal)
    expires_ms = now_ms + extend_ms
    if task.deadline_ms is not None:
        expires_ms = min(expires_ms, task.deadline_ms)
    return _move(task, "heartbeat", lease_expires_at_ms=expires_ms, visible_at_ms=expires_ms)


def ack_task(task: QueueTask, token: str, now_ms: int) -> TaskTransition:
    """Done. A repeated ack with the token that finished the task is accepted again, so a
    worker that lost the first answer can retry safely; the token stays on the row."""
    if task.status is TaskStatus.done and _token_matches(task, token):
        return _move(task, "ack_replay")
    refusal = _check_lease(task, token, now_ms)
    if refusal is not None:
        return _no(task, refusal)
    return _move(task, "ack", lease_expires_at_ms=None, deadline_ms=None)


def nack_policy(max_attempts: int) -> RetryPolicy:
    return RetryPolicy(max_attempts=max_attempts, base_s=NACK_BASE_S, cap_s=NACK_CAP_S)


def nack_task(
    task: QueueTask, token: str, retryable: bool, now_ms: int, rng: random.Random
) -> TaskTransition:
    """A failed attempt: visible again after full-jitter backoff, or dead when the worker
    says it is not retryable or this was the last attempt."""
    refusal = _check_lease(task, token, now_ms)
    if refusal is not None:
        return _no(task, refusal)
    released = {"lease_token": None, "lease_expires_at_ms": None, "deadline_ms": None}
    if not retryable:
        return _move(task, "nack_dead", dead_reason="not retryable", **released)
    retry_at = next_retry_at_ms(now_ms, nack_policy(task.max_attempts), task.attempt, rng)
    if retry_at is None:
        reason = f"attempts exhausted ({task.attempt} of {task.max_attempts})"
        return _move(task, "nack_dead", dead_reason=reason, **released)
    return _move(task, "nack_retry", visible_at_ms=retry_at, worker_id=None, **released)


def replay_task(task: QueueTask, now_ms: int) -> TaskTransition:
    """A dead task put back in its queue by a person (the console, POST
    /v1/queues/{queue}/dead:replay): visible at once with a fresh attempt budget (its
    error history is kept); only a dead one."""
    return _move(
        task,
        "replay",
        attempt=0,
        visible_at_ms=now_ms,
        dead_reason=None,
        worker_id=None,
        lease_token=None,
        lease_expires_at_ms=None,
        deadline_ms=None,
    )

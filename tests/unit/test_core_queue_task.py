"""Queue-task transitions: lease, heartbeat, ack, nack, expiry, each refusal with its reason."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from kit.core.queue_task import (
    NACK_BASE_S,
    TASK_TRANSITIONS,
    QueueTask,
    TaskStatus,
    ack_task,
    heartbeat_task,
    leasable,
    lease_order,
    lease_task,
    nack_task,
    replay_task,
)

T0 = 1_700_000_000_000


def queued(**changes: object) -> QueueTask:
    task = QueueTask(
        task_id="t1",
        status=TaskStatus.queued,
        attempt=0,
        max_attempts=3,
        timeout_ms=300_000,
        visible_at_ms=T0,
    )
    return replace(task, **changes)


def leased(now_ms: int = T0, lease_ms: int = 30_000, **changes: object) -> QueueTask:
    result = lease_task(queued(**changes), "w1", "tok", now_ms, lease_ms)
    assert result.accepted
    return result.task


def test_lease_sets_token_attempt_and_expiry() -> None:
    result = lease_task(queued(), "w1", "tok", T0 + 5, 30_000)
    assert result.accepted and result.event == "lease"
    task = result.task
    assert task.status is TaskStatus.leased
    assert (task.attempt, task.lease_token, task.worker_id) == (1, "tok", "w1")
    assert task.lease_expires_at_ms == task.visible_at_ms == T0 + 5 + 30_000
    assert task.deadline_ms == T0 + 5 + 300_000


def test_lease_is_capped_by_the_task_timeout() -> None:
    task = leased(lease_ms=600_000, timeout_ms=60_000)
    assert task.lease_expires_at_ms == T0 + 60_000


def test_delayed_task_is_not_leased_before_visible() -> None:
    task = queued(visible_at_ms=T0 + 1000)
    assert not leasable(task, T0 + 999)
    result = lease_task(task, "w1", "tok", T0 + 999, 1000)
    assert not result.accepted and result.reason is not None
    assert result.reason.startswith("not visible until ")
    assert lease_task(task, "w1", "tok", T0 + 1000, 1000).accepted


def test_live_lease_is_not_leased_again_expired_one_is_with_next_attempt() -> None:
    task = leased()
    assert not lease_task(task, "w2", "tok2", T0 + 29_999, 1000).accepted
    again = lease_task(task, "w2", "tok2", T0 + 30_000, 1000)
    assert again.accepted and again.event == "lease"
    assert (again.task.attempt, again.task.lease_token, again.task.worker_id) == (2, "tok2", "w2")


def test_expired_lease_on_last_attempt_goes_dead() -> None:
    task = leased(max_attempts=1)
    result = lease_task(task, "w2", "tok2", T0 + 30_000, 1000)
    assert result.accepted and result.event == "expire_dead"
    assert result.task.status is TaskStatus.dead and result.task.lease_token is None
    assert result.task.dead_reason is not None
    assert (
        "lease expired at" in result.task.dead_reason
        and "attempt 1 of 1" in result.task.dead_reason
    )


def test_done_and_dead_tasks_are_not_leasable() -> None:
    for status in (TaskStatus.done, TaskStatus.dead):
        task = queued(status=status)
        assert not leasable(task, T0 + 10**9)
        assert not lease_task(task, "w", "t", T0 + 10**9, 1000).accepted


def test_ack_with_token_then_replay_then_refusals() -> None:
    task = leased()
    done = ack_task(task, "tok", T0 + 1)
    assert done.accepted and done.task.status is TaskStatus.done
    replay = ack_task(done.task, "tok", T0 + 2)
    assert replay.accepted and replay.event == "ack_replay" and replay.task == done.task
    other = ack_task(done.task, "nope", T0 + 2)
    assert not other.accepted and other.reason == "task is not leased: status is done"


@pytest.mark.parametrize("act", ["ack", "nack", "heartbeat"])
def test_wrong_token_and_expired_lease_are_refused_with_reasons(act: str) -> None:
    task = leased()
    rng = random.Random(1)

    def call(token: str, now_ms: int):
        if act == "ack":
            return ack_task(task, token, now_ms)
        if act == "nack":
            return nack_task(task, token, True, now_ms, rng)
        return heartbeat_task(task, token, now_ms, 1000)

    wrong = call("other", T0 + 1)
    assert not wrong.accepted and wrong.reason == "lease token does not match"
    assert wrong.task == task
    expired = call("tok", T0 + 30_000)
    assert not expired.accepted
    assert expired.reason == "lease expired at 2023-11-14T22:13:50Z"


def test_heartbeat_extends_but_not_past_deadline() -> None:
    task = leased(timeout_ms=60_000)
    beat = heartbeat_task(task, "tok", T0 + 20_000, 30_000)
    assert beat.accepted and beat.task.lease_expires_at_ms == T0 + 50_000
    assert beat.task.visible_at_ms == T0 + 50_000
    capped = heartbeat_task(beat.task, "tok", T0 + 40_000, 30_000)
    assert capped.accepted and capped.task.lease_expires_at_ms == T0 + 60_000


def test_nack_retryable_requeues_after_full_jitter_backoff() -> None:
    task = leased()
    result = nack_task(task, "tok", True, T0 + 100, random.Random(7))
    assert result.accepted and result.event == "nack_retry"
    after = result.task
    assert after.status is TaskStatus.queued and after.lease_token is None
    assert after.attempt == 1  # the next lease makes it 2
    assert T0 + 100 <= after.visible_at_ms <= T0 + 100 + NACK_BASE_S * 1000
    # the same seed draws the same delay
    assert nack_task(task, "tok", True, T0 + 100, random.Random(7)).task == after


def test_nack_not_retryable_or_exhausted_goes_dead() -> None:
    not_retryable = nack_task(leased(), "tok", False, T0 + 1, random.Random(1))
    assert not_retryable.task.status is TaskStatus.dead
    assert not_retryable.task.dead_reason == "not retryable"
    last = leased(max_attempts=1)
    exhausted = nack_task(last, "tok", True, T0 + 1, random.Random(1))
    assert exhausted.event == "nack_dead"
    assert exhausted.task.dead_reason == "attempts exhausted (1 of 1)"


def test_every_accepted_event_is_in_the_table() -> None:
    events = {(r.source, r.event, r.target) for r in TASK_TRANSITIONS}
    task = leased()
    moves = [
        (queued(), lease_task(queued(), "w", "t", T0, 1000)),
        (task, heartbeat_task(task, "tok", T0 + 1, 1000)),
        (task, ack_task(task, "tok", T0 + 1)),
        (task, nack_task(task, "tok", True, T0 + 1, random.Random(0))),
        (task, nack_task(task, "tok", False, T0 + 1, random.Random(0))),
        (
            dead := nack_task(task, "tok", False, T0 + 1, random.Random(0)).task,
            replay_task(dead, T0),
        ),
    ]
    for before, result in moves:
        assert result.accepted
        assert (before.status, result.event, result.task.status) in events


def test_lease_order_takes_longest_visible_first_ties_by_task_id() -> None:
    # the store's ORDER BY visible_at, task_id: the earlier visible task goes first even
    # when its id sorts later; equal visible times fall back to the id
    tasks = [
        queued(task_id="a", visible_at_ms=T0 + 2),
        queued(task_id="z", visible_at_ms=T0),
        queued(task_id="b", visible_at_ms=T0 + 2),
        queued(task_id="m", visible_at_ms=T0 + 1),
    ]
    assert [t.task_id for t in sorted(tasks, key=lease_order)] == ["z", "m", "a", "b"]
    assert lease_order(queued(task_id="q", visible_at_ms=T0 + 5)) == (T0 + 5, "q")


def test_a_dead_task_replayed_is_visible_now_with_a_fresh_budget() -> None:
    dead = nack_task(leased(max_attempts=1), "tok", True, T0 + 1, random.Random(1)).task
    assert dead.status == "dead"
    again = replay_task(dead, T0 + 5)
    assert again.accepted and again.event == "replay"
    assert (again.task.status, again.task.attempt, again.task.visible_at_ms) == (
        "queued",
        0,
        T0 + 5,
    )
    assert again.task.dead_reason is None
    assert not replay_task(again.task, T0 + 6).accepted  # only a dead one

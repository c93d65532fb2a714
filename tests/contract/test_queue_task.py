"""The pull queue's task, side by side: every step goes to kit.core.queue_task (the
transitions the docs describe) and to the PostgreSQL store (kit.store.queues, the
statements the HTTP API runs), with the same explicit time, and the two must agree after
every step, refusal reasons included. The store is driven both ways it can run: its sync
functions on an Engine, and its `*_async` functions on the async pool (what the HTTP API
runs), so neither driver can drift from the core.

The store decides each transition with the core on the row it locked, so what this
holds is everything around that call: which tasks the lease scan's SQL selects and in
what order (kit.core.queue_task.leasable and lease_order), how a row maps to the core's
state and back, the dead-lettering of an expired last attempt inside a lease request,
and the counts the stats report.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import Engine, select

from kit.core import queue_task as core
from kit.core.queue_task import QueueTask, TaskStatus, TaskTransition
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.store import queues as store
from kit.store.pg_async import AsyncPool, conninfo_of
from kit.store.queues import AckItem, LeaseRefused, TaskEnqueue, TaskLease
from kit.store.schema import queue_tasks
from tests.contract.replay import replay

pytestmark = pytest.mark.integration

TENANT = "acme"
WORKERS = ("w1", "w2")
_base = iter(range(10**6))

# What the suite reached, by step and the core's event or refusal (numbers and instants
# masked): a suite that never reaches a branch cannot notice when one side changes it.
REACHED: Counter[str] = Counter()
MUST_REACH = {  # by the random walk, dozens of times in every run seen (the rest: WALK)
    "lease: lease",
    "heartbeat: task is not leased: status is queued",
    "ack: task is not leased: status is queued",
    "nack: task is not leased: status is queued",
}


def reached(step: str, t: TaskTransition) -> None:
    what = t.event if t.accepted else t.reason or ""
    if t.event == "nack_dead":
        what += f" ({t.task.dead_reason})"
    REACHED[f"{step}: " + re.sub(r"\d[\d:T.+-]*Z?", "N", what)] += 1


def _ms(at: datetime | None) -> int | None:
    return None if at is None else to_epoch_ms(at)


def row_state(row: Any) -> QueueTask:
    """A stored row as the core's state (written here, not borrowed from the store)."""
    return QueueTask(
        task_id=str(row.task_id),
        status=TaskStatus(row.status),
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        timeout_ms=row.timeout_s * 1000,
        visible_at_ms=to_epoch_ms(row.visible_at),
        lease_token=row.lease_token,
        lease_expires_at_ms=_ms(row.lease_expires_at),
        deadline_ms=_ms(row.deadline_at),
        worker_id=row.worker_id,
        dead_reason=row.dead_reason,
    )


class AsyncStore:
    """The store's `*_async` functions behind the sync ones' signatures (the engine
    argument ignored), run to completion on one event loop and one pool."""

    def __init__(self, engine: Engine) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = AsyncPool(conninfo_of(engine.url), size=2)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(store, f"{name}_async")

        def call(_engine: Engine, *args: Any, **kwargs: Any) -> Any:
            return self.loop.run_until_complete(fn(self.pool, *args, **kwargs))

        return call

    def close(self) -> None:
        self.loop.run_until_complete(self.pool.close())
        self.loop.close()


def queue_task_machine(engine: Engine, ops: Any = store) -> type[RuleBasedStateMachine]:
    class QueueTaskContract(RuleBasedStateMachine):
        @initialize()
        def an_empty_queue(self) -> None:
            n = next(_base)
            self.now_ms = to_epoch_ms(datetime(2031, 1, 1, tzinfo=UTC)) + n * 86_400_000
            self.queue = f"contract-{n}"
            self.core: dict[str, QueueTask] = {}
            self.order: list[str] = []  # task ids in enqueue order, for picking
            self.tokens: list[str] = ["not-a-token"]

        @property
        def now(self) -> datetime:
            return from_epoch_ms(self.now_ms)

        def _task(self, pick: int) -> str:
            return self.order[pick % len(self.order)]

        def _token(self, pick: int) -> str:
            return self.tokens[pick % len(self.tokens)]

        def _holding(self, status: TaskStatus) -> list[str]:
            return [t for t in self.order if self.core[t].status is status]

        def _new(self, task_id: str, delay_s: int, max_attempts: int, timeout_s: int) -> None:
            self.core[task_id] = QueueTask(
                task_id,
                TaskStatus.queued,
                0,
                max_attempts,
                timeout_s * 1000,
                self.now_ms + delay_s * 1000,
            )
            self.order.append(task_id)

        @rule(ms=st.integers(0, 20_000))
        def time_passes(self, ms: int) -> None:
            self.now_ms += ms

        @rule(task=st.integers(0, 50), edge=st.integers(0, 2), delta=st.sampled_from([-1, 0, 1]))
        def until_edge(self, task: int, edge: int, delta: int) -> None:
            """Time runs to just before, at or just after a task's visibility, lease expiry
            or deadline: the edges."""
            if not self.order:
                return
            t = self.core[self._task(task)]
            at = [t.visible_at_ms, t.lease_expires_at_ms, t.deadline_ms][edge]
            if at is not None:
                self.now_ms = max(self.now_ms, at + delta)

        @rule(
            delay_s=st.integers(0, 5),
            max_attempts=st.sampled_from([1, 2, 3]),
            timeout_s=st.integers(1, 30),
            many=st.integers(0, 2),
        )
        def enqueue(self, delay_s: int, max_attempts: int, timeout_s: int, many: int) -> None:
            item = TaskEnqueue(
                TENANT,
                self.queue,
                {"n": len(self.order)},
                delay_s=delay_s,
                max_attempts=max_attempts,
                timeout_s=timeout_s,
                now=self.now,
            )
            if many:
                made = ops.task_enqueue_many(engine, TENANT, self.queue, [item] * (many + 1))
            else:
                made = [ops.task_enqueue(engine, item)]
            for m in made:
                assert m.status == TaskStatus.queued.value
                self._new(m.task_id, delay_s, max_attempts, timeout_s)

        @rule(
            worker=st.sampled_from(WORKERS),
            max_tasks=st.integers(1, 3),
            lease_s=st.integers(1, 20),
        )
        def lease(self, worker: str, max_tasks: int, lease_s: int) -> None:
            got = ops.task_lease(
                engine,
                TaskLease(TENANT, self.queue, worker, max_tasks, lease_s, now=self.now),
            )
            tokens = {t.task_id: t.lease_token for t in got}
            # the core's lease request: visible tasks in lease_order, a round of
            # `want` at a time; an expired last attempt goes dead and the search goes on
            leased: list[str] = []
            for _ in range(store._LEASE_ROUNDS):
                want = max_tasks - len(leased)
                visible = sorted(
                    (t for t in self.core.values() if core.leasable(t, self.now_ms)),
                    key=core.lease_order,
                )[:want]
                if not visible:
                    break
                dead = 0
                for task in visible:
                    token = tokens.get(task.task_id, "never-issued")
                    t = core.lease_task(task, worker, token, self.now_ms, lease_s * 1000)
                    assert t.accepted, t.reason
                    reached("lease", t)
                    self.core[task.task_id] = t.task
                    if t.event == "expire_dead":
                        dead += 1
                    else:
                        leased.append(task.task_id)
                if len(visible) < want or not dead:
                    break
            assert [t.task_id for t in got] == leased
            for t in got:
                c = self.core[t.task_id]
                assert (t.attempt, _ms(t.lease_expires_at)) == (c.attempt, c.lease_expires_at_ms)
            self.tokens += [t.lease_token for t in got]

        @rule(task=st.integers(0, 50), token=st.integers(0, 50), extend_s=st.integers(1, 40))
        def heartbeat(self, task: int, token: int, extend_s: int) -> None:
            if self.order:
                self._heartbeat(self._task(task), self._token(token), extend_s)

        @rule(
            task=st.integers(0, 50),
            action=st.sampled_from(["heartbeat", "ack", "nack", "ack again"]),
            late_ms=st.sampled_from([None, -1, 0, 1]),
            extend_s=st.integers(1, 40),
            retryable=st.booleans(),
            seed=st.integers(0, 2**16),
        )
        def holder_acts(
            self,
            task: int,
            action: str,
            late_ms: int | None,
            extend_s: int,
            retryable: bool,
            seed: int,
        ) -> None:
            """As a worker does: the holder of a leased task acts with its own token,
            in time or (`late_ms`) at its lease's end; or one that lost the answer to its
            ack acks a done task again with the token that finished it (a replay)."""
            held = self._holding(TaskStatus.done if action == "ack again" else TaskStatus.leased)
            if not held:
                return
            task_id = held[task % len(held)]
            state = self.core[task_id]
            if late_ms is not None and state.lease_expires_at_ms is not None:
                self.now_ms = max(self.now_ms, state.lease_expires_at_ms + late_ms)
            token = state.lease_token or ""
            if action == "heartbeat":
                self._heartbeat(task_id, token, extend_s)
            elif action == "nack":
                self._nack(task_id, token, retryable, seed)
            else:
                self._ack([(task_id, token)])

        def _heartbeat(self, task_id: str, lease_token: str, extend_s: int) -> None:
            t = core.heartbeat_task(self.core[task_id], lease_token, self.now_ms, extend_s * 1000)
            reached("heartbeat", t)
            try:
                expires = ops.task_heartbeat(
                    engine, TENANT, task_id, lease_token, extend_s, self.now
                )
            except LeaseRefused as refused:
                assert not t.accepted
                assert refused.reason == t.reason
                return
            assert t.accepted, t.reason
            assert to_epoch_ms(expires) == t.task.lease_expires_at_ms
            self.core[task_id] = t.task

        @rule(
            picks=st.lists(
                st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=3
            )
        )
        def ack(self, picks: list[tuple[int, int]]) -> None:
            if self.order:
                self._ack([(self._task(a), self._token(b)) for a, b in picks])

        def _ack(self, picks: list[tuple[str, str]]) -> None:
            items = [AckItem(task_id, token, {"ok": True}) for task_id, token in picks]
            outcomes = ops.task_ack_many(engine, TENANT, items, self.now)
            for item, outcome in zip(items, outcomes, strict=True):
                t = core.ack_task(self.core[item.task_id], item.lease_token, self.now_ms)
                reached("ack", t)
                assert (outcome.status is not None) == t.accepted, (outcome, t.reason)
                if t.accepted:
                    assert outcome.status == t.task.status.value
                else:
                    assert (outcome.refusal, outcome.reason) == ("lease_refused", t.reason)
                self.core[item.task_id] = t.task

        @rule(
            task=st.integers(0, 50),
            token=st.integers(0, 50),
            retryable=st.booleans(),
            seed=st.integers(0, 2**16),
        )
        def nack(self, task: int, token: int, retryable: bool, seed: int) -> None:
            if self.order:
                self._nack(self._task(task), self._token(token), retryable, seed)

        def _nack(self, task_id: str, lease_token: str, retryable: bool, seed: int) -> None:
            t = core.nack_task(
                self.core[task_id], lease_token, retryable, self.now_ms, random.Random(seed)
            )
            reached("nack", t)
            try:
                nacked = ops.task_nack(
                    engine,
                    TENANT,
                    task_id,
                    lease_token,
                    retryable,
                    "boom",
                    self.now,
                    random.Random(seed),
                )
            except LeaseRefused as refused:
                assert not t.accepted
                assert refused.reason == t.reason
                return
            assert t.accepted, t.reason
            assert (nacked.status, nacked.attempt) == (t.task.status.value, t.task.attempt)
            assert nacked.dead_reason == t.task.dead_reason
            if t.task.status is TaskStatus.queued:
                assert _ms(nacked.visible_at) == t.task.visible_at_ms
            self.core[task_id] = t.task

        @rule()
        def stats(self) -> None:
            got = ops.queue_stats(engine, TENANT, self.queue, self.now)
            tasks = list(self.core.values())
            live = [
                t
                for t in tasks
                if t.status is TaskStatus.leased
                and t.lease_expires_at_ms is not None
                and self.now_ms < t.lease_expires_at_ms
            ]
            waiting = [
                t
                for t in tasks
                if t.status is TaskStatus.queued
                or (t.status is TaskStatus.leased and t not in live)
            ]
            visible = [t.visible_at_ms for t in tasks if core.leasable(t, self.now_ms)]
            oldest = (self.now_ms - min(visible)) / 1000 if visible else 0.0
            dead = sum(t.status is TaskStatus.dead for t in tasks)
            assert (got.queued, got.leased, got.dlq) == (len(waiting), len(live), dead)
            assert got.oldest_age_s == pytest.approx(oldest)

        @invariant()
        def store_equals_core(self) -> None:
            if not hasattr(self, "core"):
                return
            with engine.begin() as conn:
                rows = conn.execute(
                    select(queue_tasks).where(
                        queue_tasks.c.tenant == TENANT, queue_tasks.c.queue == self.queue
                    )
                ).all()
            assert {str(r.task_id): row_state(r) for r in rows} == self.core

    return QueueTaskContract


@pytest.fixture(params=["sync", "async"])
def ops(request: pytest.FixtureRequest, engine: Engine) -> Iterator[Any]:
    if request.param == "sync":
        yield store
        return
    async_store = AsyncStore(engine)
    yield async_store
    async_store.close()


def test_queue_task_store_equals_core(engine: Engine, ops: Any) -> None:
    REACHED.clear()
    replay(queue_task_machine(engine, ops), examples=150, steps=30)
    missed = MUST_REACH - set(REACHED)
    assert not missed, f"the suite never reached {sorted(missed)}; it reached {dict(REACHED)}"


# The branches the random walk takes a few times a run or not at all (hypothesis draws few
# holders acting on live leases), walked on purpose through the same rules and checks.
HOLDER = {"task": 0, "late_ms": None, "extend_s": 10, "retryable": True, "seed": 1}
NACK = {**HOLDER, "action": "nack"}
EXHAUSTED = "nack: nack_dead (attempts exhausted (N of N))"
QUEUED = "task is not leased: status is queued"
WALK: list[tuple[str, dict[str, Any], str | None]] = [
    ("enqueue", {"delay_s": 0, "max_attempts": 2, "timeout_s": 30, "many": 0}, None),
    ("lease", {"worker": "w1", "max_tasks": 1, "lease_s": 5}, "lease: lease"),
    ("holder_acts", {**HOLDER, "action": "heartbeat"}, "heartbeat: heartbeat"),
    ("holder_acts", NACK, "nack: nack_retry"),
    ("until_edge", {"task": 0, "edge": 0, "delta": 0}, None),
    ("lease", {"worker": "w2", "max_tasks": 1, "lease_s": 5}, "lease: lease"),
    ("holder_acts", NACK, EXHAUSTED),
    ("enqueue", {"delay_s": 0, "max_attempts": 1, "timeout_s": 30, "many": 0}, None),
    ("lease", {"worker": "w1", "max_tasks": 1, "lease_s": 5}, "lease: lease"),
    ("holder_acts", {**NACK, "late_ms": 0}, "nack: lease expired at N"),
    ("lease", {"worker": "w2", "max_tasks": 1, "lease_s": 5}, "lease: expire_dead"),
    ("enqueue", {"delay_s": 0, "max_attempts": 3, "timeout_s": 30, "many": 0}, None),
    ("lease", {"worker": "w1", "max_tasks": 1, "lease_s": 5}, "lease: lease"),
    ("holder_acts", {**HOLDER, "action": "ack"}, "ack: ack"),
    ("holder_acts", {**HOLDER, "action": "ack again"}, "ack: ack_replay"),
    ("ack", {"picks": [(2, 0)]}, "ack: task is not leased: status is done"),
    ("enqueue", {"delay_s": 0, "max_attempts": 3, "timeout_s": 30, "many": 0}, None),
    ("lease", {"worker": "w2", "max_tasks": 1, "lease_s": 5}, "lease: lease"),
    ("holder_acts", {**NACK, "retryable": False}, "nack: nack_dead (not retryable)"),
    # task 4: refusals of a live lease, then of one run out
    ("enqueue", {"delay_s": 0, "max_attempts": 3, "timeout_s": 30, "many": 0}, None),
    ("lease", {"worker": "w1", "max_tasks": 1, "lease_s": 5}, "lease: lease"),
    ("heartbeat", {"task": 4, "token": 0, "extend_s": 5}, "heartbeat: lease token does not match"),
    ("ack", {"picks": [(4, 0)]}, "ack: lease token does not match"),
    ("nack", {"task": 4, "token": 0, "retryable": True, "seed": 1},
     "nack: lease token does not match"),
    ("holder_acts", {**HOLDER, "action": "heartbeat", "late_ms": 1},
     "heartbeat: lease expired at N"),
    ("holder_acts", {**HOLDER, "action": "ack", "late_ms": 1}, "ack: lease expired at N"),
    # task 5: not leased yet
    ("enqueue", {"delay_s": 0, "max_attempts": 3, "timeout_s": 30, "many": 0}, None),
    ("heartbeat", {"task": 5, "token": 0, "extend_s": 5}, f"heartbeat: {QUEUED}"),
    ("stats", {}, None),
]  # fmt: skip


def test_queue_task_walk_through_the_rare_branches(engine: Engine, ops: Any) -> None:
    """Each step must reach exactly the branch it names, the store agreeing with the core
    after it as in the random walk."""
    machine = queue_task_machine(engine, ops)()
    machine.an_empty_queue()
    for step, kwargs, expect in WALK:
        REACHED.clear()
        getattr(machine, step)(**kwargs)
        machine.store_equals_core()
        got = set(REACHED)
        assert got == ({expect} if expect else set()), (step, kwargs, dict(REACHED))

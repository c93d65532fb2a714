"""The run lease, side by side: every step goes to kit.core.leases (the table the docs are
generated from) and to the PostgreSQL store (the statements workers and reapers run),
with the same explicit time, and the two must agree after every step.

A disagreement is a bug in one of them: the store once renewed a lease that had already
expired (and that a reaper may be handing to another worker), which the core refuses.

The suite must reach the lease's edges, not only its outcomes: the time left on a
running lease at each reap, heartbeat and finish is recorded (LEFT), and the test asserts
it was drawn across the whole lease: just claimed, mid-way, a millisecond before, at and
after its expiry. (A reaper that took leases 5 s early passed an earlier version of this
suite, whose reaps all fell on leases with at least 9.5 s of 10 left.) Every finish path
the worker uses gets stale tokens: the batched success (alone, and beside the current
token in one batch), the failure, the cancellation.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import Engine, text

from kit.core import leases as core
from kit.core.defaults import SCAN_AHEAD_MS
from kit.core.leases import RunLease, RunStatus
from kit.core.outcome import expiry_exhausts
from kit.core.retry import RetryPolicy
from kit.core.run_state import RunState, due_ms, run_state
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.store.claims import (
    Claim,
    run_finish_cancelled,
    run_finish_failed,
    run_finish_ok,
    runs_claim,
    runs_finish_ok,
    runs_heartbeat,
    runs_release,
    runs_return,
)
from kit.store.reaping import runs_reap_expired
from kit.store.runs import run_state_sql
from kit.store.scheduling import runs_rearm
from tests.contract.replay import replay
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration

TTL_MS = 10_000
RETRY = {"max_attempts": 3, "base_s": 1.0, "cap_s": 10.0, "jitter": "none"}
WORKERS = ("w1", "w2")
_base = iter(range(10**6))

# What the suite reached, by step and outcome ("heartbeat: lease expired at N"): a
# suite that never reaches a branch cannot notice when one side changes it (the first
# version beat a running run's lease about once in 60 examples, and never an expired one).
REACHED: Counter[str] = Counter()
MUST_REACH = {
    "claim: accepted",
    "claim: not claimable: status is running",
    "heartbeat: accepted",
    "heartbeat: lease expired at N",
    "heartbeat: stale token",
    "finish: accepted",
    "finish: stale token",
    "release: accepted",
    "give back: accepted",
    "reap: accepted",
    "reap: lease live until N",
    "retry due: accepted",
    # the state shown (kit.core.run_state): a run held for its second is never `running`
    "state: claimed",
    "state: running",
}


MUST_REACH |= {
    "batch finish: accepted",
    "batch finish: stale token",
    "cancelled finish: accepted",
    "cancelled finish: stale token",
}

# The lease time left (ms) on a running lease at each step that judges it, by step.
LEFT: defaultdict[str, list[int]] = defaultdict(list)
# What each example did, rule by rule, in terms that do not depend on when it ran: two
# runs of the suite in one session explore the same cases or this differs.
TRACE: list[tuple[object, ...]] = []
# Lease time left drawn by the edge rules: just claimed, mid-way, 1 ms before, at and
# after the expiry (two draws in three), or anywhere across the lease and as far past it.
_EDGE_VALUES = st.sampled_from([TTL_MS, TTL_MS // 2, 1, 0, -1])
EDGES = st.one_of(_EDGE_VALUES, _EDGE_VALUES, st.integers(-TTL_MS, TTL_MS))


def reached(step: str, accepted: bool, reason: str | None) -> None:
    REACHED[f"{step}: " + ("accepted" if accepted else re.sub(r"\d+", "N", reason or ""))] += 1
    TRACE.append((step, accepted, re.sub(r"\d+", "N", reason or "")))


def edges_reached(left: list[int]) -> dict[str, bool]:
    """Which parts of the lease a step saw, by the time left it saw."""
    return {
        "just claimed": any(v >= TTL_MS - 100 for v in left),
        "mid-way": any(TTL_MS // 4 <= v <= 3 * TTL_MS // 4 for v in left),
        "1 ms before expiry": 1 in left,
        "at expiry": 0 in left,
        "1 ms after expiry": -1 in left,
        "long after expiry": any(v < -TTL_MS // 2 for v in left),
    }


def run_lease_machine(engine: Engine) -> type[RuleBasedStateMachine]:
    job = make_job(engine, retry=RETRY, name=f"contract-{next(_base)}")  # every example's

    class RunLeaseContract(RuleBasedStateMachine):
        @initialize(claimed=st.booleans(), ahead_ms=st.sampled_from([-1000, 0, 5000]))
        def a_pending_run(self, claimed: bool, ahead_ms: int) -> None:
            # each example: its own run, its own stretch of (explicit) time; the run due
            # a second ago, now, or 5 s ahead (claimed ahead of its second)
            n = next(_base)
            self.now_ms = to_epoch_ms(datetime(2031, 1, 1, tzinfo=UTC)) + n * 86_400_000
            self.job = job
            at = from_epoch_ms(self.now_ms + ahead_ms)
            self.run_id = make_run(engine, self.job, scheduled_at=at)
            self.core = RunLease(self.run_id, 1, RunStatus.pending)
            self.tokens: list[str] = ["not-a-token"]
            self.policy = RetryPolicy.parse(RETRY)
            if claimed:  # half the examples start from a claimed run: rule subsets that
                self.claim("w1", 0)  # leave out claim still reach a running lease

        @property
        def now(self) -> datetime:
            return from_epoch_ms(self.now_ms)

        def _token(self, pick: int) -> str:
            return self.tokens[pick % len(self.tokens)]

        def _left(self, step: str) -> None:
            """The running lease's time left, for LEFT (and the trace)."""
            c = self.core
            if c.status is RunStatus.running and c.expires_at_ms is not None:
                LEFT[step].append(c.expires_at_ms - self.now_ms)
                TRACE.append((step, "left", c.expires_at_ms - self.now_ms))

        def _to_left(self, left: int) -> bool:
            """Time runs on until the running lease has `left` ms (never back); a pending
            run is claimed first, so every example's edge steps meet a lease."""
            if self.core.status is RunStatus.pending:
                self.claim(WORKERS[0], 0)
            c = self.core
            if c.status is not RunStatus.running or c.expires_at_ms is None:
                return False
            target = c.expires_at_ms - left
            if target < self.now_ms:
                return False
            self.now_ms = target
            return True

        @rule(left=EDGES)
        def lease_left_then_reap(self, left: int) -> None:
            if self._to_left(left):
                self.reap()

        @rule(left=EDGES, pick=st.integers(0, 50))
        def lease_left_then_heartbeat(self, left: int, pick: int) -> None:
            if self._to_left(left):
                self.heartbeat(pick)

        @rule(left=EDGES, pick=st.integers(0, 50), how=st.sampled_from(["ok", "failed", "batch"]))
        def lease_left_then_finish(self, left: int, pick: int, how: str) -> None:
            if not self._to_left(left):
                return
            if how == "batch":
                self.finish_batch(pick, current_too=False)
            else:
                self.finish(pick, how == "ok")

        @rule(ms=st.integers(0, 2 * TTL_MS) | st.sampled_from([TTL_MS - 1, TTL_MS, TTL_MS + 1]))
        def time_passes(self, ms: int) -> None:
            self.now_ms += ms

        @rule(ms=st.integers(0, 2 * TTL_MS), pick=st.integers(0, 50))
        def time_passes_then_heartbeat(self, ms: int, pick: int) -> None:
            self.now_ms += ms
            self.heartbeat(pick)

        @rule(worker=st.sampled_from(WORKERS), skew=st.sampled_from([0, 0, 0, -1, 1]))
        def claim(self, worker: str, skew: int) -> None:
            attempt = max(1, self.core.attempt + skew)
            got = runs_claim(engine, [Claim(self.run_id, attempt)], worker, TTL_MS, self.now)
            token = got[0].lease_token if got else "never-issued"
            due = to_epoch_ms(got[0].due_at) if got and got[0].due_at else None
            t = core.claim_run(self.core, worker, token, attempt, self.now_ms, TTL_MS, due)
            assert bool(got) == t.accepted, (got, t.reason)
            reached("claim", t.accepted, t.reason)
            if got:
                self.tokens.append(token)
            self.core = t.run

        @rule(pick=st.integers(0, 50))
        def heartbeat(self, pick: int) -> None:
            token = self._token(pick)
            self._left("heartbeat")
            kept, _lost = runs_heartbeat(engine, [(self.run_id, token)], TTL_MS, self.now)
            t = core.heartbeat_run(self.core, token, self.now_ms, TTL_MS)
            assert (self.run_id in kept) == t.accepted, t.reason
            reached("heartbeat", t.accepted, t.reason)
            self.core = t.run

        @rule(pick=st.integers(0, 50), ok=st.booleans())
        def finish(self, pick: int, ok: bool) -> None:
            token = self._token(pick)
            self._left("finish")
            if ok:
                result = run_finish_ok(engine, self.run_id, token, self.now)
                t = core.finish_run(self.core, token, True, self.now_ms, None)
            else:
                rng = random.Random(0)
                result = run_finish_failed(engine, self.run_id, token, "boom", rng, now=self.now)
                retry_at = to_epoch_ms(result.retry_at) if result.retry_at else None
                t = core.finish_run(self.core, token, False, self.now_ms, retry_at)
            assert result.accepted == t.accepted, t.reason
            reached("finish", t.accepted, t.reason)
            self.core = t.run

        @rule(pick=st.integers(0, 50), current_too=st.booleans())
        def finish_batch(self, pick: int, current_too: bool) -> None:
            """The worker's batched success: the picked token, and with `current_too` the
            current one beside it in the same batch (one stale entry must neither block
            the batch nor finish the run twice)."""
            token = self._token(pick)
            self._left("batch finish")
            leases = [(self.run_id, token)]
            if current_too and self.core.token is not None and self.core.token != token:
                leases.append((self.run_id, self.core.token))
                token = self.core.token
            accepted, _queued = runs_finish_ok(engine, leases, self.now)
            t = core.finish_run(self.core, token, True, self.now_ms, None)
            assert (self.run_id in accepted) == t.accepted, t.reason
            reached("batch finish", t.accepted, t.reason)
            self.core = t.run

        @rule(pick=st.integers(0, 50))
        def finish_cancelled(self, pick: int) -> None:
            """The worker's finish of a run whose job was deleted: the finish's guards,
            then the run is cancelled."""
            token = self._token(pick)
            self._left("cancelled finish")
            result = run_finish_cancelled(engine, self.run_id, token, "job deleted", now=self.now)
            t = core.finish_run(self.core, token, True, self.now_ms, None)
            assert result.accepted == t.accepted, t.reason
            reached("cancelled finish", t.accepted, t.reason)
            if t.accepted:
                self.core = core.cancel_run(self.core).run

        @rule(pick=st.integers(0, 50))
        def release(self, pick: int) -> None:
            token = self._token(pick)
            released = runs_release(engine, [(self.run_id, token)], self.now)
            t = core.release_run(self.core, token, self.now_ms)
            assert (released == 1) == t.accepted, t.reason
            reached("release", t.accepted, t.reason)
            self.core = t.run

        @rule(pick=st.integers(0, 50))
        def give_back_unstarted(self, pick: int) -> None:
            token = self._token(pick)
            returned = runs_return(engine, [(self.run_id, token)], self.now)
            t = core.return_run(self.core, token, started=False)
            assert bool(returned) == t.accepted, t.reason
            reached("give back", t.accepted, t.reason)
            self.core = t.run

        @rule()
        def reap(self) -> None:
            self._left("reap")
            published: list = []
            reaped = runs_reap_expired(engine, published.extend, now=self.now)
            mine = [p for p in reaped.requeued if p.run_id == self.run_id]
            dead = self.run_id in reaped.dead
            max_attempts = (
                self.core.attempt
                if self.core.status is RunStatus.running
                and expiry_exhausts(self.policy, self.core.attempt, 0)
                else None
            )
            t = core.expire_run(self.core, self.now_ms, max_attempts)
            assert (bool(mine) or dead) == t.accepted, t.reason
            reached("reap", t.accepted, t.reason)
            self.core = t.run

        @rule()
        def time_until_the_retry_fires(self) -> None:
            """Time runs on until a waiting retry's trigger enters the scan window."""
            c = self.core
            if c.status is RunStatus.retry_scheduled and c.retry_at_ms is not None:
                self.now_ms = max(self.now_ms, c.retry_at_ms - SCAN_AHEAD_MS)
                self.retry_trigger_fires()

        @rule()
        def retry_trigger_fires(self) -> None:
            # The scan re-arms a retry when its trigger enters the scan-ahead window and
            # holds the run until its time: the core is asked at the window's end.
            c = self.core
            if c.status is not RunStatus.retry_scheduled or c.retry_at_ms is None:
                return
            if self.now_ms + SCAN_AHEAD_MS < c.retry_at_ms:
                return
            with engine.begin() as conn:
                rearmed = runs_rearm(conn, {self.run_id: c.attempt})
            t = core.retry_due_run(c, self.now_ms + SCAN_AHEAD_MS)
            assert (self.run_id in rearmed) == t.accepted, t.reason
            reached("retry due", t.accepted, t.reason)
            self.core = t.run

        @invariant()
        def store_equals_core(self) -> None:
            if not hasattr(self, "core"):
                return
            row = run_row(engine, self.run_id)
            c = self.core
            assert (row.status, row.attempt) == (c.status.value, c.attempt)
            assert row.lease_token == c.token
            expires = to_epoch_ms(row.lease_expires_at) if row.lease_expires_at else None
            assert expires == c.expires_at_ms
            if c.status is RunStatus.running:
                assert row.worker_id == c.worker
            if c.status is RunStatus.retry_scheduled:
                assert to_epoch_ms(row.retry_at) == c.retry_at_ms

        @invariant()
        def the_state_shown_equals_the_cores(self) -> None:
            if not hasattr(self, "core"):
                return
            with engine.connect() as conn:
                shown = conn.execute(
                    text(
                        f"SELECT {run_state_sql(now='CAST(:now AS timestamptz)')} AS state, "
                        "attempt_started_at, scheduled_at, retry_at FROM runs "
                        "WHERE run_id = :run_id"
                    ),
                    {"now": self.now, "run_id": self.run_id},
                ).one()
            due = due_ms(
                to_epoch_ms(shown.scheduled_at),
                to_epoch_ms(shown.retry_at) if shown.retry_at else None,
            )
            started = shown.attempt_started_at is not None
            expected = run_state(self.core.status, started, due, self.now_ms)
            assert shown.state == expected.value
            if expected in (RunState.claimed, RunState.running):
                REACHED[f"state: {expected.value}"] += 1

    return RunLeaseContract


def explore(engine: Engine, examples: int, steps: int) -> list[tuple[object, ...]]:
    """Run the suite; what it did (TRACE) and reached (REACHED, LEFT) from scratch."""
    REACHED.clear()
    LEFT.clear()
    TRACE.clear()
    replay(run_lease_machine(engine), examples=examples, steps=steps)
    return list(TRACE)


def sweep_edges(engine: Engine) -> None:
    """Every step that judges a lease, at every edge of it, with the current token and a
    stale one: each on a fresh claimed run, checked against the core as the walk is. The
    walk draws the edges too, but a derandomised draw can miss one for good (it never
    beat a lease at 0 ms left); this visits each for certain."""
    machine = run_lease_machine(engine)
    steps = {
        "reap": lambda m, pick: m.reap(),
        "heartbeat": lambda m, pick: m.heartbeat(pick),
        "finish": lambda m, pick: m.finish(pick, True),
        "failure": lambda m, pick: m.finish(pick, False),
        "batch finish": lambda m, pick: m.finish_batch(pick, current_too=True),
        "cancelled finish": lambda m, pick: m.finish_cancelled(pick),
    }
    for do in steps.values():
        for left in (TTL_MS, TTL_MS // 2, 1, 0, -1, -TTL_MS):
            for pick in (1, 0):  # the token the claim issued; "not-a-token"
                m = machine()
                m.a_pending_run(claimed=True, ahead_ms=-1000)
                assert m._to_left(left)
                do(m, pick)
                m.store_equals_core()


def test_run_lease_store_equals_core(engine: Engine) -> None:
    explore(engine, examples=150, steps=30)
    sweep_edges(engine)
    missed = MUST_REACH - set(REACHED)
    assert not missed, f"the suite never reached {sorted(missed)}; it reached {dict(REACHED)}"
    # the lease's edges, by the time left each step saw (not only by its outcome)
    for step in ("reap", "heartbeat", "finish", "batch finish"):
        seen = edges_reached(LEFT[step])
        assert all(seen.values()), (step, seen, sorted(set(LEFT[step]))[:40])


def test_the_suite_explores_the_same_whatever_ran_before_it(engine: Engine) -> None:
    """The reach checks above are claims about one exploration: the suite explores the
    same cases alone as after another stateful suite and another hypothesis test in the
    same session (derandomised, no example database: tests/contract/replay.py)."""
    from hypothesis import given, settings

    from tests.contract.test_partition_lease import partition_lease_machine

    alone = explore(engine, examples=12, steps=15)

    @settings(max_examples=30, derandomize=False, database=None)
    @given(st.integers())
    def another_test(n: int) -> None:
        assert isinstance(n, int)

    another_test()
    replay(partition_lease_machine(engine), examples=5, steps=10)
    after_others = explore(engine, examples=12, steps=15)
    assert len(alone) > 100
    assert after_others == alone

"""The run lease, side by side: every step goes to kit.core.leases (the table the docs are
generated from) and to the PostgreSQL store (the statements workers and reapers run),
with the same explicit time, and the two must agree after every step.

A disagreement is a bug in one of them: the store once renewed a lease that had already
expired (and that a reaper may be handing to another worker), which the core refuses.
"""

from __future__ import annotations

import random
import re
from collections import Counter
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
    run_finish_failed,
    run_finish_ok,
    runs_claim,
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


def reached(step: str, accepted: bool, reason: str | None) -> None:
    REACHED[f"{step}: " + ("accepted" if accepted else re.sub(r"\d+", "N", reason or ""))] += 1


def run_lease_machine(engine: Engine) -> type[RuleBasedStateMachine]:
    class RunLeaseContract(RuleBasedStateMachine):
        @initialize(claimed=st.booleans(), ahead_ms=st.sampled_from([-1000, 0, 5000]))
        def a_pending_run(self, claimed: bool, ahead_ms: int) -> None:
            # each example: its own job and run, its own stretch of (explicit) time; the
            # run due a second ago, now, or 5 s ahead (claimed ahead of its second)
            n = next(_base)
            self.now_ms = to_epoch_ms(datetime(2031, 1, 1, tzinfo=UTC)) + n * 86_400_000
            self.job = make_job(engine, retry=RETRY, name=f"contract-{n}")
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
            kept, _lost = runs_heartbeat(engine, [(self.run_id, token)], TTL_MS, self.now)
            t = core.heartbeat_run(self.core, token, self.now_ms, TTL_MS)
            assert (self.run_id in kept) == t.accepted, t.reason
            reached("heartbeat", t.accepted, t.reason)
            self.core = t.run

        @rule(pick=st.integers(0, 50), ok=st.booleans())
        def finish(self, pick: int, ok: bool) -> None:
            token = self._token(pick)
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


def test_run_lease_store_equals_core(engine: Engine) -> None:
    REACHED.clear()
    replay(run_lease_machine(engine), examples=150, steps=30)
    missed = MUST_REACH - set(REACHED)
    assert not missed, f"the suite never reached {sorted(missed)}; it reached {dict(REACHED)}"

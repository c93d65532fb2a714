"""runs_finish_ok (the worker's batched success write) against the real PostgreSQL:
each run succeeds only under its own lease token, a stale one in the same batch is
rejected, dead streaks reset, and each accepted run of a job with overlap 'queue'
releases one of its queued runs, oldest first."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, select, text

from kit.store.claims import Claim, runs_claim, runs_finish_ok
from kit.store.schema import jobs
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration
TTL_MS = 30_000


def test_a_batch_succeeds_each_run_under_its_own_token(engine: Engine) -> None:
    a, b = make_job(engine, name="a"), make_job(engine, name="b")
    ra = make_run(engine, a)
    base = run_row(engine, ra).scheduled_at
    rb = make_run(engine, b, scheduled_at=base)
    stale = make_run(engine, a, scheduled_at=base + timedelta(minutes=5))
    claimed = {
        c.run_id: c for c in runs_claim(engine, [Claim(r, 1) for r in (ra, rb, stale)], "w", TTL_MS)
    }
    with engine.begin() as conn:  # the reaper took `stale` over: its token is gone
        conn.execute(text("UPDATE runs SET lease_token = 'other' WHERE run_id = :r"), {"r": stale})
        conn.execute(text("UPDATE jobs SET dead_streak = 2 WHERE job_id = :j"), {"j": a})
    leases = sorted((r, claimed[r].lease_token) for r in (ra, rb, stale))
    accepted, queued = runs_finish_ok(engine, leases)
    assert accepted == {ra, rb} and queued == []
    assert run_row(engine, ra).status == run_row(engine, rb).status == "succeeded"
    assert run_row(engine, ra).lease_token is None and run_row(engine, ra).finished_at is not None
    assert run_row(engine, stale).status == "running"
    with engine.begin() as conn:
        assert conn.execute(select(jobs.c.dead_streak).where(jobs.c.job_id == a)).scalar() == 0
    # a second write of the same batch is stale throughout
    assert runs_finish_ok(engine, leases) == (set(), [])


def test_each_accepted_run_releases_one_queued_run_of_its_job(engine: Engine) -> None:
    job = make_job(engine, overlap="queue")
    first = make_run(engine, job)
    base = run_row(engine, first).scheduled_at
    second = make_run(engine, job, scheduled_at=base + timedelta(minutes=1))
    q1 = make_run(engine, job, scheduled_at=base + timedelta(minutes=2), skip_reason="queued")
    q2 = make_run(engine, job, scheduled_at=base + timedelta(minutes=3), skip_reason="queued")
    q3 = make_run(engine, job, scheduled_at=base + timedelta(minutes=4), skip_reason="queued")
    claimed = runs_claim(engine, [Claim(first, 1), Claim(second, 1)], "w", TTL_MS)
    accepted, queued = runs_finish_ok(engine, sorted((c.run_id, c.lease_token) for c in claimed))
    assert accepted == {first, second}
    assert sorted(p.run_id for p in queued) == sorted([q1, q2])  # two finished, two released
    assert run_row(engine, q1).skip_reason is None and run_row(engine, q2).skip_reason is None
    assert run_row(engine, q3).skip_reason == "queued"

"""The worker's SQL against the real PostgreSQL: a batch claims in one statement and
only what is still claimable at the message's attempt; heartbeats extend the leases it
holds; finishes need the token; failures retry with backoff or dead-letter, and
repeated dead letters pause the job."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select, text

from kit.store.claims import (
    Claim,
    run_finish_failed,
    run_finish_ok,
    runs_claim,
    runs_heartbeat,
    runs_return,
)
from kit.store.reaping import runs_publish_unclaimed, runs_reap_expired
from kit.store.runs import run_now
from kit.store.scheduling import runs_rearm
from kit.store.schema import dead_letters, jobs, triggers
from tests.integration.worker_rows import expire_lease, make_job, make_run, rearm_retry, run_row

pytestmark = pytest.mark.integration
TTL_MS = 30_000


def test_batch_claim_takes_only_claimable_runs_at_their_attempt(engine: Engine) -> None:
    job = make_job(engine)
    pending = make_run(engine, job)
    other = make_run(
        engine, job, scheduled_at=run_row(engine, pending).scheduled_at + timedelta(minutes=1)
    )
    done = make_run(
        engine,
        job,
        status="succeeded",
        scheduled_at=run_row(engine, pending).scheduled_at + timedelta(minutes=2),
    )
    claims = [Claim(pending, 1), Claim(other, 2), Claim(done, 1), Claim(pending, 1)]
    claimed = runs_claim(engine, claims, "w1", TTL_MS)
    assert [c.run_id for c in claimed] == [pending]  # wrong attempt, finished, duplicate
    row = run_row(engine, pending)
    assert row.status == "running" and row.worker_id == "w1"
    assert row.lease_token == claimed[0].lease_token
    assert row.started_at is None  # a claim is not a start: the worker records that
    assert claimed[0].task_spec == {"type": "noop"} and claimed[0].timeout_s == 60
    # a second delivery of the same message claims nothing
    assert runs_claim(engine, [Claim(pending, 1)], "w2", TTL_MS) == []
    assert run_row(engine, pending).worker_id == "w1"


def test_a_run_claimed_ahead_is_leased_a_ttl_past_its_second(engine: Engine) -> None:
    """Claimed 20 s before its second, the run's lease ends a ttl after that second, and a
    heartbeat before then does not shorten it: the worker need not beat runs it holds
    ahead (at a sustained 2,000 runs/s those beats overloaded the database)."""
    job = make_job(engine)
    with engine.connect() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
    due = now.replace(microsecond=0) + timedelta(seconds=20)
    rid = make_run(engine, job, scheduled_at=due)
    claimed = runs_claim(engine, [Claim(rid, 1)], "w1", TTL_MS)
    assert claimed[0].due_at == due
    assert run_row(engine, rid).lease_expires_at == due + timedelta(milliseconds=TTL_MS)
    kept, lost = runs_heartbeat(engine, [(rid, claimed[0].lease_token)], TTL_MS)
    assert kept == {rid} and not lost
    assert run_row(engine, rid).lease_expires_at == due + timedelta(milliseconds=TTL_MS)


def test_heartbeat_extends_held_leases_and_reports_lost_ones(engine: Engine) -> None:
    job = make_job(engine)
    a = make_run(engine, job)
    [run] = runs_claim(engine, [Claim(a, 1)], "w1", 2000)
    before = run_row(engine, a).lease_expires_at
    kept, lost = runs_heartbeat(engine, [(a, run.lease_token), (a, "not-the-token")], TTL_MS)
    assert kept == {a} and lost == set()
    assert run_row(engine, a).lease_expires_at > before
    with engine.begin() as conn:  # overlap 'replace' cancels it
        conn.execute(
            text("UPDATE runs SET status = 'cancelled', lease_token = NULL WHERE run_id = :r"),
            {"r": a},
        )
    assert runs_heartbeat(engine, [(a, run.lease_token)], TTL_MS) == (set(), {a})


def test_an_expired_worker_cannot_finish_after_the_reaper_requeued(engine: Engine) -> None:
    job = make_job(engine)
    rid = make_run(engine, job)
    [first] = runs_claim(engine, [Claim(rid, 1)], "slow", TTL_MS)
    expire_lease(engine, rid)
    published: list = []
    reaped = runs_reap_expired(engine, published.extend)
    assert [p.run_id for p in reaped.requeued] == [rid] and published == reaped.requeued
    row = run_row(engine, rid)
    assert (row.status, row.attempt, row.lease_token) == ("pending", 2, None)
    assert row.dispatched_at is not None  # when the reaper published it
    assert row.errors[0]["error"] == "lease expired (worker slow)"
    [second] = runs_claim(engine, [Claim(rid, 2)], "fast", TTL_MS)
    assert not run_finish_ok(engine, rid, first.lease_token).accepted  # stale
    assert not run_finish_failed(engine, rid, first.lease_token, "x", random.Random(1)).accepted
    assert run_finish_ok(engine, rid, second.lease_token).accepted
    row = run_row(engine, rid)
    assert (row.status, row.worker_id) == ("succeeded", "fast")


def test_failure_writes_a_retry_trigger_then_dead_letters_and_pauses(engine: Engine) -> None:
    retry = {"max_attempts": 2, "base_s": 4.0, "cap_s": 60.0, "jitter": "none"}
    job = make_job(engine, retry=retry, pause_after_dead=1)
    rid = make_run(engine, job)
    [run] = runs_claim(engine, [Claim(rid, 1)], "w", TTL_MS)
    result = run_finish_failed(engine, rid, run.lease_token, "exit 1", random.Random(0))
    assert (result.accepted, result.status, result.next_attempt) == (True, "retry_scheduled", 2)
    row = run_row(engine, rid)
    assert row.status == "retry_scheduled" and row.retry_at == result.retry_at
    # backoff without jitter: base_s after the first failure, from the database clock
    assert 3.9 <= (row.retry_at - row.finished_at).total_seconds() <= 4.1
    with engine.begin() as conn:
        trig = conn.execute(select(triggers).where(triggers.c.kind == "retry")).one()
    assert (trig.attempt, trig.fire_at, trig.run_scheduled_at) == (
        2,
        row.retry_at,
        row.scheduled_at,
    )
    assert rearm_retry(engine, rid) == 2
    [run] = runs_claim(engine, [Claim(rid, 2)], "w", TTL_MS)
    result = run_finish_failed(engine, rid, run.lease_token, "exit 2", random.Random(0))
    assert (result.status, result.job_paused) == ("dead", True)
    with engine.begin() as conn:
        letter = conn.execute(select(dead_letters)).one()
        job_row = conn.execute(select(jobs).where(jobs.c.job_id == job)).one()
    assert [(e["attempt"], e["error"]) for e in letter.errors] == [(1, "exit 1"), (2, "exit 2")]
    assert (job_row.paused, job_row.dead_streak) == (True, 1)


def test_success_resets_the_dead_streak(engine: Engine) -> None:
    job = make_job(engine, retry={"max_attempts": 1}, pause_after_dead=3)
    base = run_row(engine, make_run(engine, job)).scheduled_at
    ids = [
        run_row(engine, make_run(engine, job, scheduled_at=base + timedelta(minutes=m))).run_id
        for m in (1, 2)
    ]
    for rid in ids:
        [run] = runs_claim(engine, [Claim(rid, 1)], "w", TTL_MS)
        run_finish_failed(engine, rid, run.lease_token, "boom", random.Random(0))
    with engine.begin() as conn:
        assert conn.execute(select(jobs.c.dead_streak)).scalar_one() == 2
    ok = make_run(engine, job, scheduled_at=base + timedelta(minutes=3))
    [run] = runs_claim(engine, [Claim(ok, 1)], "w", TTL_MS)
    run_finish_ok(engine, ok, run.lease_token)
    with engine.begin() as conn:
        assert conn.execute(select(jobs.c.dead_streak, jobs.c.paused)).one() == (0, False)


def test_expiry_on_the_last_attempt_dead_letters(engine: Engine) -> None:
    job = make_job(engine, retry={"max_attempts": 1})
    rid = make_run(engine, job)
    runs_claim(engine, [Claim(rid, 1)], "gone", TTL_MS)
    expire_lease(engine, rid)
    reaped = runs_reap_expired(engine, lambda pointers: None)
    assert reaped.dead == [rid] and reaped.requeued == []
    assert run_row(engine, rid).status == "dead"


def test_unclaimed_runs_are_published_after_the_grace_and_queued_ones_wait(
    engine: Engine,
) -> None:
    """Without a view of the workers' progress, a run still unclaimed a grace after it
    went out counts as lost (with it: tests/integration/test_reaper_lost.py)."""
    job = make_job(engine)
    plain = make_run(engine, job)
    base = run_row(engine, plain).scheduled_at
    queued = make_run(engine, job, scheduled_at=base + timedelta(minutes=1), skip_reason="queued")
    published: list = []
    assert runs_publish_unclaimed(engine, 60_000, published.extend).all == []  # in grace
    out = runs_publish_unclaimed(engine, 0, published.extend)
    assert [p.run_id for p in out.lost] == [plain] == [p.run_id for p in published]
    row = run_row(engine, plain)
    assert (row.status, row.dispatched_at is not None) == ("pending", True)
    assert run_row(engine, queued).dispatched_at is None
    # published again only a whole grace after that publish
    assert runs_publish_unclaimed(engine, 60_000, published.extend).all == []


def test_a_queued_run_with_nothing_ahead_of_it_is_released_after_the_grace(
    engine: Engine,
) -> None:
    """Regression (found in review): a finish that committed just before the scan that
    queued a run released nothing, and the queued run then blocked its job for good."""
    job = make_job(engine, overlap="queue")
    first = make_run(engine, job, skip_reason="queued")
    base = run_row(engine, first).scheduled_at
    later = base + timedelta(minutes=1)
    second = make_run(engine, job, scheduled_at=later, skip_reason="queued")
    published: list = []
    assert runs_publish_unclaimed(engine, 60_000, published.extend).all == []  # in grace
    out = runs_publish_unclaimed(engine, 0, published.extend)
    assert [p.run_id for p in out.all] == [first]  # the oldest only
    assert run_row(engine, first).skip_reason is None
    assert (run_row(engine, second).status, run_row(engine, second).skip_reason) == (
        "pending",
        "queued",
    )
    out = runs_publish_unclaimed(engine, 60_000, published.extend)
    assert out.all == []  # first is ahead of second, and just went out


def test_a_manual_run_is_published_on_the_next_pass_without_waiting_for_grace(
    engine: Engine,
) -> None:
    job = make_job(engine)
    run, _ = run_now(engine, "acme", job)
    published: list = []
    out = runs_publish_unclaimed(engine, 60_000, published.extend)
    assert [p.run_id for p in out.first] == [run.run_id] == [p.run_id for p in published]
    assert run_row(engine, run.run_id).dispatched_at is not None
    assert runs_publish_unclaimed(engine, 60_000, published.extend).all == []  # once


def test_finishing_releases_the_oldest_queued_run(engine: Engine) -> None:
    job = make_job(engine, overlap="queue")
    rid = make_run(engine, job)
    base = run_row(engine, rid).scheduled_at
    second = make_run(engine, job, scheduled_at=base + timedelta(minutes=2), skip_reason="queued")
    make_run(engine, job, scheduled_at=base + timedelta(minutes=3), skip_reason="queued")
    [run] = runs_claim(engine, [Claim(rid, 1)], "w", TTL_MS)
    result = run_finish_ok(engine, rid, run.lease_token)
    assert result.queued_next is not None and result.queued_next.run_id == second
    assert run_row(engine, second).skip_reason is None


def test_a_heartbeat_does_not_revive_an_expired_lease(engine: Engine) -> None:
    """kit.core.leases.heartbeat_run refuses an expired lease (a reaper may already be
    handing the run to another worker); the store agreed to extend it (issue 7, item 17)."""
    job = make_job(engine)
    rid = make_run(engine, job)
    [run] = runs_claim(engine, [Claim(rid, 1)], "w1", TTL_MS)
    expire_lease(engine, rid)
    kept, lost = runs_heartbeat(engine, [(rid, run.lease_token)], TTL_MS)
    assert (kept, lost) == (set(), {rid})
    row = run_row(engine, rid)
    assert row.lease_expires_at < run.claimed_at + timedelta(seconds=TTL_MS / 1000)


def test_a_failure_whose_text_holds_a_nul_byte_is_recorded(engine: Engine) -> None:
    """PostgreSQL text cannot hold U+0000: a command printing one on stderr made its failure
    impossible to write, so the run waited out its lease and ran again without backoff
    (issue 7, item 14)."""
    job = make_job(engine)
    rid = make_run(engine, job)
    [run] = runs_claim(engine, [Claim(rid, 1)], "w1", TTL_MS)
    result = run_finish_failed(
        engine, rid, run.lease_token, "exit code 1; stderr: a\x00b", random.Random(1)
    )
    assert (result.accepted, result.status) == (True, "retry_scheduled")
    row = run_row(engine, rid)
    assert row.error == "exit code 1; stderr: a\\0b"
    assert row.errors[-1]["error"] == "exit code 1; stderr: a\\0b"


def test_the_reaper_holds_a_rearmed_retry_of_a_manual_run_until_its_retry_at(
    engine: Engine,
) -> None:
    """The scan re-arms a retry up to its scan-ahead before retry_at and holds it until
    then; the reaper published manual and replayed runs on sight, so their retries went
    out up to 5 s early (issue 7, item 16)."""
    job = make_job(engine)
    with engine.begin() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
    run, _ = run_now(engine, "acme", job, now=now - timedelta(seconds=2))
    [claimed] = runs_claim(engine, [Claim(run.run_id, 1)], "w1", TTL_MS)
    failed = run_finish_failed(engine, run.run_id, claimed.lease_token, "boom", random.Random(1))
    assert failed.status == "retry_scheduled"
    with engine.begin() as conn:  # the retry is 3 s away; the scan re-arms it now (5 s ahead)
        conn.execute(
            text("UPDATE runs SET retry_at = now() + interval '3 s' WHERE run_id = :r"),
            {"r": run.run_id},
        )
    with engine.begin() as conn:  # what the scan does when the retry trigger enters its window
        assert runs_rearm(conn, {run.run_id: 2}) == {run.run_id}
    row = run_row(engine, run.run_id)
    assert (row.status, row.attempt) == ("pending", 2)
    published: list = []
    assert runs_publish_unclaimed(engine, 10_000, published.extend).all == []
    due = row.retry_at + timedelta(milliseconds=1)
    again = runs_publish_unclaimed(engine, 10_000, published.extend, now=due).all
    assert [p.run_id for p in again] == [run.run_id] == [p.run_id for p in published]


def test_a_failure_that_will_retry_does_not_release_a_queued_run(engine: Engine) -> None:
    """Overlap 'queue' (issue 7, item 12): the job is still busy while its run awaits a
    retry, so the next run stays queued; only an end (success, dead, cancel) releases it."""
    job = make_job(engine, overlap="queue")
    first = make_run(engine, job)
    later = run_row(engine, first).scheduled_at + timedelta(minutes=1)
    queued = make_run(engine, job, scheduled_at=later, skip_reason="queued")
    [run] = runs_claim(engine, [Claim(first, 1)], "w1", TTL_MS)
    result = run_finish_failed(engine, first, run.lease_token, "boom", random.Random(1))
    assert (result.status, result.queued_next) == ("retry_scheduled", None)
    assert run_row(engine, queued).skip_reason == "queued"
    rearm_retry(engine, first)
    [again] = runs_claim(engine, [Claim(first, 2)], "w1", TTL_MS)
    done = run_finish_ok(engine, first, again.lease_token)
    assert done.queued_next is not None and done.queued_next.run_id == queued


def test_the_reaper_leaves_a_lease_a_millisecond_before_its_expiry(engine: Engine) -> None:
    """A lease is the worker's until the instant it expires, and the reaper's from then:
    at expiry - 1 ms nothing is taken, at the expiry it is (whatever the rest of the
    lease: a reaper that took leases early passed every test that reaped leases just
    claimed or long expired)."""
    job = make_job(engine)
    rid = make_run(engine, job)
    [claimed] = runs_claim(engine, [Claim(rid, 1)], "w1", TTL_MS)
    expires = run_row(engine, rid).lease_expires_at
    published: list = []
    for before_ms in (TTL_MS // 2, 5_000, 1):
        early = runs_reap_expired(
            engine, published.extend, now=expires - timedelta(milliseconds=before_ms)
        )
        assert (early.requeued, early.dead, published) == ([], [], [])
        assert run_row(engine, rid).lease_token == claimed.lease_token
    reaped = runs_reap_expired(engine, published.extend, now=expires)
    assert [p.run_id for p in reaped.requeued] == [rid] == [p.run_id for p in published]
    assert (run_row(engine, rid).status, run_row(engine, rid).attempt) == ("pending", 2)


def test_a_started_run_is_not_given_back(engine: Engine) -> None:
    """A worker gives back only runs whose task never started: a started run given back
    would run its task twice. Its start recorded (a heartbeat with started_ms), the
    give-back takes nothing; the unstarted run beside it goes back to pending."""
    job = make_job(engine)
    started = make_run(engine, job)
    unstarted = make_run(
        engine, job, scheduled_at=run_row(engine, started).scheduled_at + timedelta(minutes=1)
    )
    claimed = {
        c.run_id: c
        for c in runs_claim(engine, [Claim(started, 1), Claim(unstarted, 1)], "w1", TTL_MS)
    }
    assert set(claimed) == {started, unstarted}
    with engine.connect() as conn:
        now_ms = int(conn.execute(text("SELECT extract(epoch FROM now()) * 1000")).scalar_one())
    kept, _ = runs_heartbeat(
        engine, [(started, claimed[started].lease_token)], TTL_MS, started_ms={started: now_ms}
    )
    assert kept == {started} and run_row(engine, started).started_at is not None
    given = runs_return(engine, [(r, c.lease_token) for r, c in claimed.items()])
    assert [str(p.run_id) for p in given] == [unstarted]
    row = run_row(engine, started)
    assert row.status == "running" and row.lease_token == claimed[started].lease_token
    assert run_row(engine, unstarted).status == "pending"


def test_a_retry_trigger_rearms_only_a_run_still_waiting_for_its_retry(engine: Engine) -> None:
    """A retry trigger can outlive its run's wait (the run cancelled, finished, or re-armed
    already): the re-arm moves only a retry_scheduled run, never revives another."""
    job = make_job(engine)
    waiting = make_run(engine, job, status="retry_scheduled")
    base = run_row(engine, waiting).scheduled_at
    others = {
        status: make_run(engine, job, scheduled_at=base + timedelta(minutes=i + 1), status=status)
        for i, status in enumerate(("cancelled", "succeeded", "dead", "pending"))
    }
    with engine.begin() as conn:
        rearmed = runs_rearm(conn, {waiting: 2} | {rid: 2 for rid in others.values()})
    assert rearmed == {waiting}
    assert (run_row(engine, waiting).status, run_row(engine, waiting).attempt) == ("pending", 2)
    for status, rid in others.items():
        row = run_row(engine, rid)
        assert (row.status, row.attempt) == (status, 1), status

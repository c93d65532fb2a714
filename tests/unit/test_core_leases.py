from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.core.leases import (
    TRANSITIONS,
    PartitionLease,
    RunLease,
    RunStatus,
    acquire_partition,
    cancel_run,
    claim_run,
    expire_run,
    fenced_write_allowed,
    finish_run,
    heartbeat_run,
    preempt_run,
    release_partition,
    release_run,
    renew_partition,
    retry_due_run,
    return_run,
)

TTL = 1000

# --- partition lease


def test_acquire_free_then_renew_by_owner_keeps_epoch():
    d = acquire_partition(None, 7, "a", 0, TTL)
    assert d.granted and d.lease == PartitionLease(7, "a", 1, 1000)
    d2 = acquire_partition(d.lease, 7, "a", 500, TTL)
    assert d2.granted and d2.lease.epoch == 1 and d2.lease.expires_at_ms == 1500


def test_other_node_refused_while_live_then_takes_over_with_new_epoch():
    lease = acquire_partition(None, 7, "a", 0, TTL).lease
    refused = acquire_partition(lease, 7, "b", 999, TTL)
    assert not refused.granted and "held by a" in refused.reason
    taken = acquire_partition(lease, 7, "b", 1000, TTL)
    assert taken.granted and taken.lease.owner == "b" and taken.lease.epoch == 2


def test_reacquiring_own_expired_lease_bumps_epoch():
    lease = acquire_partition(None, 7, "a", 0, TTL).lease
    again = acquire_partition(lease, 7, "a", 5000, TTL)
    assert again.granted and again.lease.epoch == 2


def test_renew_refusals_name_the_reason():
    lease = PartitionLease(3, "a", 4, 1000)
    assert renew_partition(lease, "b", 4, 0, TTL).reason.startswith("not owner")
    assert renew_partition(lease, "a", 3, 0, TTL).reason.startswith("stale epoch")
    assert renew_partition(lease, "a", 5, 0, TTL).reason.startswith("unknown epoch")
    assert renew_partition(lease, "a", 4, 1000, TTL).reason.startswith("expired")
    ok = renew_partition(lease, "a", 4, 999, TTL)
    assert ok.granted and ok.lease.expires_at_ms == 1999


def test_release_and_fencing():
    lease = PartitionLease(3, "a", 4, 1000)
    assert fenced_write_allowed(lease, "a", 4, 999)
    assert not fenced_write_allowed(lease, "a", 4, 1000)
    assert not fenced_write_allowed(lease, "a", 3, 0)
    assert not fenced_write_allowed(lease, "b", 4, 0)
    assert not release_partition(lease, "a", 3).granted
    assert not release_partition(lease, "b", 4).granted
    freed = release_partition(lease, "a", 4)
    assert freed.granted and freed.lease.owner is None and freed.lease.epoch == 4
    assert not fenced_write_allowed(freed.lease, "a", 4, 0)
    nxt = acquire_partition(freed.lease, 3, "a", 0, TTL)
    assert nxt.granted and nxt.lease.epoch == 5


def test_acquire_wrong_partition_is_a_programming_error():
    with pytest.raises(ValueError):
        acquire_partition(PartitionLease(1, "a", 1, 10), 2, "a", 0, TTL)


# --- run lease


def pending(attempt=1):
    return RunLease("r1", attempt, RunStatus.pending)


def running(token="t1", expires=1000, attempt=1):
    return RunLease("r1", attempt, RunStatus.running, token, "w1", expires)


def test_claim_from_pending_only():
    t = claim_run(pending(), "w1", "t1", 1, 0, TTL)
    assert t.accepted and t.run == running()
    dup = claim_run(running(), "w2", "t2", 1, 0, TTL)
    assert not dup.accepted and "not claimable" in dup.reason and dup.run == running()


def test_claim_for_the_wrong_attempt_is_refused():
    t = claim_run(pending(attempt=2), "w1", "t1", 1, 0, TTL)
    assert not t.accepted and "attempt mismatch" in t.reason


def test_a_run_claimed_ahead_holds_its_lease_a_ttl_past_its_second():
    t = claim_run(pending(), "w1", "t1", 1, 0, TTL, due_ms=5_000)
    assert t.run.expires_at_ms == 5_000 + TTL
    # an early beat never shortens it; one after the second extends it from then
    assert heartbeat_run(t.run, "t1", 100, TTL).run.expires_at_ms == 5_000 + TTL
    assert heartbeat_run(t.run, "t1", 5_500, TTL).run.expires_at_ms == 5_500 + TTL
    # a run already due: the ttl counts from now
    assert claim_run(pending(), "w1", "t1", 1, 700, TTL, due_ms=0).run.expires_at_ms == 700 + TTL


def test_heartbeat_needs_current_token_before_expiry():
    assert heartbeat_run(running(), "t1", 999, TTL).run.expires_at_ms == 1999
    assert heartbeat_run(running(), "old", 0, TTL).reason == "stale token"
    assert "expired" in heartbeat_run(running(), "t1", 1000, TTL).reason


def test_finish_outcomes():
    ok = finish_run(running(), "t1", True, 10, None)
    assert ok.accepted and ok.run.status is RunStatus.succeeded and ok.run.token is None
    retry = finish_run(running(), "t1", False, 10, 5000)
    assert retry.run.status is RunStatus.retry_scheduled
    assert retry.run.attempt == 2 and retry.run.retry_at_ms == 5000
    dead = finish_run(running(), "t1", False, 10, None)
    assert dead.run.status is RunStatus.dead and dead.run.attempt == 1


def test_stale_finish_is_refused():
    t = finish_run(running(token="new"), "old", True, 10, None)
    assert not t.accepted and t.reason == "stale token" and t.run.status is RunStatus.running


def test_expire_returns_to_pending_with_next_attempt():
    assert not expire_run(running(), 999).accepted
    t = expire_run(running(), 1000)
    assert t.accepted and t.run == RunLease("r1", 2, RunStatus.pending)
    # the old worker's late finish is now refused
    assert not finish_run(t.run, "t1", True, 1001, None).accepted
    assert expire_run(running(attempt=3), 1000, max_attempts=3).run.status is RunStatus.dead


def test_retry_due_and_cancel():
    waiting = finish_run(running(), "t1", False, 10, 5000).run
    assert not retry_due_run(waiting, 4999).accepted
    back = retry_due_run(waiting, 5000)
    assert back.accepted and back.run.status is RunStatus.pending and back.run.attempt == 2
    assert cancel_run(back.run).run.status is RunStatus.cancelled
    assert not cancel_run(RunLease("r", 1, RunStatus.succeeded)).accepted


# --- the table


def _every_operation(run):
    yield cancel_run(run)
    for tok in ("t1", "other"):
        yield release_run(run, tok, 0)
        yield preempt_run(run, tok)
        for started in (False, True):
            yield return_run(run, tok, started)
        yield heartbeat_run(run, tok, 0, TTL)
        yield heartbeat_run(run, tok, 5000, TTL)
        for ok in (True, False):
            for retry_at in (None, 9000):
                yield finish_run(run, tok, ok, 0, retry_at)
    for attempt in (1, 2):
        yield claim_run(run, "w9", "t9", attempt, 0, TTL)
    for now in (0, 5000):
        yield expire_run(run, now)
        yield expire_run(run, now, max_attempts=1)
        yield retry_due_run(run, now)


def test_every_accepted_transition_is_in_the_table():
    rules = {(r.source, r.event, r.target) for r in TRANSITIONS}
    used = set()
    for status in RunStatus:
        run = RunLease("r1", 1, status, "t1", "w1", 1000, 2000)
        for t in _every_operation(run):
            if t.accepted:
                triple = (status, t.event, t.run.status)
                assert triple in rules
                used.add(triple)
            else:
                assert t.run == run and t.reason
    assert used == rules  # and the table has no rule the functions never take


# --- giving a run back (a stopping worker)


def _running(token="t1", expires=5000):
    return RunLease("r1", 3, RunStatus.running, token, "w1", expires)


def test_release_ends_the_lease_a_millisecond_before_now_as_the_store_writes_it():
    # kit.store.claims.runs_release: lease_expires_at = now - 1 ms
    t = release_run(_running(), "t1", 2000)
    assert t.accepted and t.event == "release"
    assert t.run == replace(_running(), expires_at_ms=1999)  # token, worker, attempt kept
    # the lease is over at `now`: no heartbeat, and the reaper takes it at once
    assert heartbeat_run(t.run, "t1", 2000, TTL).reason == "lease expired at 1999"
    assert expire_run(t.run, 2000).run.attempt == 4


def test_release_and_return_refuse_another_token_and_a_run_not_running():
    for give_back in (
        lambda run, tok: release_run(run, tok, 2000),
        lambda run, tok: return_run(run, tok, False),
        preempt_run,
    ):
        t = give_back(_running(), "t2")
        assert (t.accepted, t.reason, t.run) == (False, "stale token", _running())
        pending = RunLease("r1", 3, RunStatus.pending)
        t = give_back(pending, "t1")
        assert (t.accepted, t.reason) == (False, "not running: status is pending")


def test_return_gives_an_unstarted_run_back_at_the_same_attempt_without_its_lease():
    t = return_run(_running(), "t1", started=False)
    assert t.accepted and t.event == "return"
    assert t.run == RunLease("r1", 3, RunStatus.pending, None, None, None)
    started = return_run(_running(), "t1", started=True)
    assert not started.accepted and started.run == _running()
    assert started.reason == "its task started: release it instead (the attempt counts)"


def test_preempt_gives_a_started_run_back_at_the_same_attempt_without_its_lease():
    # kit.store.claims.runs_preempt: the attempt was cut short for a paid run, not failed
    t = preempt_run(_running(), "t1")
    assert t.accepted and t.event == "preempt"
    assert t.run == RunLease("r1", 3, RunStatus.pending, None, None, None)
    assert claim_run(t.run, "w2", "t9", 3, 0, TTL).accepted  # claimed again at attempt 3


# --- edges the full mutation run found unguarded


def test_a_ttl_of_one_millisecond_is_a_lease_and_of_zero_is_refused_by_every_grant():
    lease = acquire_partition(None, 7, "a", 0, 1).lease
    assert lease.expires_at_ms == 1
    assert renew_partition(lease, "a", 1, 0, 1).lease.expires_at_ms == 1
    run = RunLease("r", 1, RunStatus.pending)
    claimed = claim_run(run, "w", "t", 1, 0, 1).run
    assert claimed.expires_at_ms == 1
    assert heartbeat_run(claimed, "t", 0, 1).run.expires_at_ms == 1
    for grant in (
        lambda: acquire_partition(None, 7, "a", 0, 0),
        lambda: renew_partition(lease, "a", 1, 0, 0),
        lambda: claim_run(run, "w", "t", 1, 0, 0),
        lambda: heartbeat_run(claimed, "t", 0, 0),
    ):
        with pytest.raises(ValueError, match=r"^ttl_ms must be positive$"):
            grant()


def test_a_lease_of_another_partition_is_a_caller_bug():
    lease = acquire_partition(None, 7, "a", 0, TTL).lease
    with pytest.raises(ValueError, match=r"^lease is for partition 7, not 8$"):
        acquire_partition(lease, 8, "a", 0, TTL)


def test_a_takeover_lease_runs_its_ttl_from_now():
    lease = acquire_partition(None, 7, "a", 0, TTL).lease
    d = acquire_partition(lease, 7, "b", 5000, TTL)
    assert d.lease == PartitionLease(7, "b", 2, 6000)


def test_refusals_are_false_and_leave_the_lease_as_it_was():
    lease = acquire_partition(None, 7, "a", 0, TTL).lease
    d = renew_partition(lease, "a", 1, 1000, TTL)
    assert (d.granted, d.lease, d.reason) == (False, lease, "expired at 1000")
    d = acquire_partition(lease, 7, "b", 10, TTL)
    assert d.granted is False and d.lease == lease
    t = claim_run(RunLease("r", 1, RunStatus.dead), "w", "t", 1, 0, TTL)
    assert t.accepted is False and t.reason == "not claimable: status is dead"
    t = cancel_run(RunLease("r", 1, RunStatus.succeeded))
    assert (t.accepted, t.reason) == (False, "cannot cancel a succeeded run")


def test_a_claim_starts_with_no_retry_time():
    run = RunLease("r", 2, RunStatus.pending, retry_at_ms=500)
    assert claim_run(run, "w", "t", 2, 0, TTL).run.retry_at_ms is None


def test_every_end_of_an_attempt_drops_its_lease():
    running = RunLease("r", 1, RunStatus.running, "t", "w", 1000)
    retry = finish_run(running, "t", False, 10, 5000).run
    assert (retry.status, retry.token, retry.expires_at_ms, retry.retry_at_ms) == (
        RunStatus.retry_scheduled,
        None,
        None,
        5000,
    )
    dead = finish_run(running, "t", False, 10, None).run
    assert (dead.status, dead.token, dead.expires_at_ms) == (RunStatus.dead, None, None)
    exhausted = expire_run(running, 1000, max_attempts=1).run
    assert (exhausted.status, exhausted.token, exhausted.worker, exhausted.expires_at_ms) == (
        RunStatus.dead,
        None,
        None,
        None,
    )
    due = retry_due_run(retry, 5000).run
    assert (due.status, due.retry_at_ms) == (RunStatus.pending, None)
    cancelled = cancel_run(replace(retry, token="t", expires_at_ms=1)).run
    assert (cancelled.status, cancelled.token, cancelled.expires_at_ms, cancelled.retry_at_ms) == (
        RunStatus.cancelled,
        None,
        None,
        None,
    )


def test_a_lease_is_renewed_only_when_it_would_end_within_the_horizon() -> None:
    from kit.core.leases import beat_wanted

    for started in (False, True):
        assert not beat_wanted(started, 50_000, None, now_ms=0, horizon_ms=20_000)
        assert not beat_wanted(started, 20_000, None, now_ms=0, horizon_ms=20_000)
        assert beat_wanted(started, 19_999, None, now_ms=0, horizon_ms=20_000)


def test_the_default_horizon_spares_a_storms_first_seconds() -> None:
    """A run claimed ahead is leased a ttl past its second: the beats in the 4.5 s after
    it renew none of the storm's leases (the 2.5-beat rule spared 2 s), the ones after
    that do."""
    from kit.core import defaults
    from kit.core.leases import beat_rule, beat_wanted, fence_margin_ms

    ttl, beat = defaults.RUN_LEASE_TTL_MS, defaults.RUN_HEARTBEAT_MS
    horizon = beat_rule(ttl, beat, fence_margin_ms(ttl, defaults.KILL_GRACE_MS)).horizon_ms
    spared = ttl - horizon
    assert spared == 4_500
    due = 1_000_000
    assert not any(
        beat_wanted(False, due + ttl, None, due + t, horizon) for t in range(0, spared + 1, 10)
    )
    assert beat_wanted(False, due + ttl, None, due + spared + 1, horizon)


def test_the_default_rule_survives_a_stall_of_a_lease_less_a_beat() -> None:
    from kit.core import defaults
    from kit.core.leases import beat_rule, fence_margin_ms

    ttl, beat = defaults.RUN_LEASE_TTL_MS, defaults.RUN_HEARTBEAT_MS
    rule = beat_rule(ttl, beat, fence_margin_ms(ttl, defaults.KILL_GRACE_MS))
    assert (rule.tick_ms, rule.stall_ms) == (625, ttl - beat)
    drills = beat_rule(4000, 4000 // 3, fence_margin_ms(4000, defaults.KILL_GRACE_MS))
    assert (drills.tick_ms, drills.horizon_ms, drills.stall_ms) == (83, 3999, 2667)


@given(
    ttl=st.integers(3_000, 120_000),
    ahead=st.integers(0, 10_000),
    phase=st.integers(0, 10**6),
    jitter=st.lists(st.floats(0, 1), min_size=40, max_size=40),
    failed=st.integers(0, 39),
)
def test_one_failed_beat_never_lets_the_fence_take_a_run(
    ttl: int, ahead: int, phase: int, jitter: list[float], failed: int
) -> None:
    """A worker beats every ttl/3 (late by up to a quarter beat, or less when the fence
    margin leaves less room); one beat fails (the database did not answer). The run, held
    from its claim `ahead` ms before its second and then running, must never reach the
    fence (its confirmed lease less the margin) at any beat: a failed beat is not a reason
    to give a healthy run back and run it twice."""
    from kit.core.leases import beat_rule, beat_wanted, fence_margin_ms

    beat = ttl // 3
    margin = fence_margin_ms(ttl, 2_000)
    horizon = beat_rule(ttl, beat, margin).horizon_ms
    late_max = min(beat / 4, (beat - margin) / 2)
    until = ahead + ttl  # claimed at 0, leased a ttl past its second
    now = phase % beat
    for k, j in enumerate(jitter):
        now += int(j * late_max) + (beat if k else 0)
        assert now <= until - margin, f"fenced at beat {k} ({until - now} ms left)"
        if k != failed and beat_wanted(now >= ahead, until, None, now, horizon):
            until = max(until, now + ttl)


def test_a_started_run_is_beaten_until_its_timeout_has_passed_and_not_after() -> None:
    """The lease follows the task's timeout: a task that will not stop does not keep its
    run from the reaper while the worker lives."""
    from kit.core.leases import beat_wanted

    assert beat_wanted(True, 0, deadline_ms=65_000, now_ms=65_000, horizon_ms=20_000)
    assert not beat_wanted(True, 0, deadline_ms=65_000, now_ms=65_001, horizon_ms=20_000)
    assert beat_wanted(True, 0, deadline_ms=None, now_ms=10**12, horizon_ms=20_000)
    # a held run has no deadline yet, however long it waits for a slot
    assert beat_wanted(False, 0, deadline_ms=None, now_ms=10**12, horizon_ms=20_000)


def first_fence(
    ttl: int,
    beat: int,
    ahead: int,
    phase: float,
    slow: list[float],
    stall_at: int,
    stall_ms: int,
) -> int | None:
    """kit.worker's heartbeat thread on one run, in simulated milliseconds: claimed at 0,
    leased until `ahead` + ttl, started at its second `ahead`. The thread waits a tick,
    beats (renewing the lease if kit.core.leases.beat_wanted says so, confirmed until the
    beat's send + ttl once its reply is in; the statement renews other runs too, so it
    may be slow, or hang in a stall, either way), waits a tick again. A beat takes up to
    a sixteenth of a beat, a second at most (`slow`: fractions of that, in turn). From
    `stall_at` for `stall_ms` the database answers nothing: a beat sent into the stall
    (or still in flight when it began) is answered when it ends. The fence takes the run
    when it is not confirmed until the fence margin from now. Returns when it would, or
    None when it never does (looking until a ttl after the stall)."""
    from kit.core.leases import beat_rule, beat_wanted, fence_margin_ms

    margin = fence_margin_ms(ttl, 2_000)
    rule = beat_rule(ttl, beat, margin)
    until = ahead + ttl
    stall_end = stall_at + stall_ms
    now = phase * rule.tick_ms
    for look in range(100_000):
        fraction = slow[look % len(slow)]
        if now > until - margin:
            return int(now)
        wanted = beat_wanted(now >= ahead, int(until), None, int(now), rule.horizon_ms)
        took = fraction * min(1000, beat // 16)
        reply = now + took
        if stall_at <= now < stall_end or now < stall_at < reply:  # other runs' beats too
            reply = stall_end + took
        if reply > until - margin:
            return int(until - margin)
        if wanted:
            until = max(until, now + ttl)
        now = reply + rule.tick_ms
        if now > stall_end + ttl:
            return None
    raise AssertionError("the simulation did not reach its end")


@given(
    ttl=st.integers(3_000, 120_000),
    ahead=st.integers(0, 10_000),
    phase=st.floats(0, 1),
    slow=st.lists(st.floats(0, 1), min_size=1, max_size=50),
    stall_at=st.integers(0, 200_000),
    stall=st.floats(0, 1, exclude_max=True),
)
def test_a_stall_shorter_than_a_lease_less_a_beat_never_reaches_the_fence(
    ttl: int,
    ahead: int,
    phase: float,
    slow: list[float],
    stall_at: int,
    stall: float,
) -> None:
    """The database stops answering for less than one run-lease less one beat (the
    default beat: ttl/3), at any moment: before the run's second, at it, while it runs,
    just before the beat that would renew its lease. A beat sent into the stall hangs
    until it ends; beats are slow by up to a sixteenth of a beat. The lease never ended
    in the database (it was renewed at most a beat before), so the worker must not fence
    the run: a stall that short is no reason to give a healthy run back and run it again.
    (The rule of one look per beat and a 2.5-beat horizon let a running lease fall to
    ttl - beat and fenced it the fence margin before: a stall of ttl - beat - margin did.)"""
    beat = ttl // 3
    stall_ms = int(stall * (ttl - beat))
    at = first_fence(ttl, beat, ahead, phase, slow, stall_at % (ahead + 2 * ttl), stall_ms)
    assert at is None, f"fenced at {at} ms by a stall of {stall_ms} ms"


def test_the_beat_rule_at_its_edges() -> None:
    from kit.core.leases import BeatRule, beat_rule

    for ttl, beat in ((0, 1000), (1000, 0), (-1, 1000), (1000, -1)):
        with pytest.raises(ValueError, match=r"^ttl_ms and beat_ms must be positive$"):
            beat_rule(ttl, beat, 0)
    assert beat_rule(1, 1, 0) == BeatRule(tick_ms=1, horizon_ms=4, stall_ms=0)
    assert beat_rule(100, 10, 0).tick_ms == 1  # a sixteenth of 10 ms is under a millisecond
    assert beat_rule(60_000, 16_016, 0).tick_ms == 1000  # never more than a second
    assert beat_rule(1000, 1000, 0).stall_ms == 0  # a beat as long as the lease survives none
    # a margin and four ticks longer than a beat: they bound the stall survived
    assert beat_rule(10_000, 1000, 2000) == BeatRule(tick_ms=62, horizon_ms=11_248, stall_ms=7752)

"""kit.core.worker_run: a claimed run's life in a worker, rule by rule."""

from __future__ import annotations

from typing import Any

import pytest

from kit.core.backlog import start_budget
from kit.core.leases import beat_rule, fence_margin_ms
from kit.core.switches import Switch, SwitchKind
from kit.core.worker_run import (
    BEAT_LOST,
    BEGIN,
    CANCELLED,
    DEFAULT_TIMEOUT_S,
    EFFECTS,
    EVENTS,
    FAILED,
    FINISH_BATCH,
    HEARTBEAT,
    IS_DUE,
    KEEPER_STOPPED,
    OK,
    OTHERWISE,
    PAST_FENCE,
    PHASES,
    PLACED,
    PREEMPT,
    SEND_BACK,
    STOP,
    SWITCH_HOLDS,
    TICK,
    TIMEOUT_GRACE_MS,
    TRANSITIONS,
    WRITTEN,
    BeatConfirmed,
    Begin,
    Effect,
    EventKind,
    LeaseTerms,
    RefusedEvent,
    Rule,
    RunEntry,
    RunFacts,
    RunPhase,
    Tally,
    _index,
    claimed,
    finish_batch,
    lease_terms,
    next_beat_ms,
    next_tick_ms,
    on,
    rule_for,
    stop_by_ms,
)

P, X = RunPhase, Effect
TERMS = lease_terms(30_000)  # margin 3,000 ms, horizon 25,500 ms
CU = 40_000  # confirmed until, in the examples
FENCE = CU - TERMS.margin_ms  # 37,000


def facts(**kw: Any) -> RunFacts:
    values: dict[str, Any] = {
        "run_id": "r1",
        "due_ms": 10_000,
        "lease": TERMS,
        "task_type": "http",
        "tenant": "acme",
        "tier": "normal",
    }
    return RunFacts(**{**values, **kw})


def at(phase: RunPhase, cu: int = CU, deadline: int | None = None, **kw: Any) -> RunEntry:
    if deadline is None and phase in (P.running, P.stopping, P.giving_back, P.dropping):
        deadline = 80_000
    return RunEntry(facts(**kw), phase, cu, deadline)


def step(entry: RunEntry, event: Any, now: int) -> tuple[RunPhase, tuple[Effect, ...]]:
    after, effects = on(entry, event, now)
    return after.phase, effects


# --- the terms of a lease


def test_lease_terms_follow_the_leases_rules() -> None:
    assert LeaseTerms(30_000, 3_000, 25_500) == TERMS
    short = lease_terms(4_000)  # the drills': a third of it, margin a quarter
    assert short.margin_ms == fence_margin_ms(4_000, 2_000) == 1_000
    assert short.horizon_ms == beat_rule(4_000, 1_333, 1_000).horizon_ms
    assert (
        lease_terms(30_000, beat_ms=5_000).horizon_ms == beat_rule(30_000, 5_000, 3_000).horizon_ms
    )
    assert lease_terms(30_000, kill_grace_ms=500).margin_ms == 1_500
    # a beat is never under 200 ms, however short the lease
    assert lease_terms(300).horizon_ms == beat_rule(300, 200, fence_margin_ms(300, 2000)).horizon_ms


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: lease_terms(0), "ttl_ms: must be positive, not 0"),
        (lambda: LeaseTerms(0, 0, 0), "ttl_ms: must be positive, not 0"),
        (lambda: LeaseTerms(1000, -1, 0), "margin_ms: must be in [0, ttl_ms), not -1"),
        (lambda: LeaseTerms(1000, 1000, 0), "margin_ms: must be in [0, ttl_ms), not 1000"),
        (lambda: facts(run_id="r9", timeout_s=0), "timeout_s: run r9: must be positive"),
        (lambda: facts(run_id="r9", timeout_s=-1), "timeout_s: run r9: must be positive"),
    ],
)
def test_bad_terms_are_refused_naming_the_field(make: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        make()
    assert str(caught.value) == message
    assert caught.value.field == message.split(":")[0]  # type: ignore[attr-defined]


def test_the_smallest_terms_are_taken() -> None:
    assert LeaseTerms(1, 0, 0).ttl_ms == 1
    assert LeaseTerms(1000, 0, 0).margin_ms == 0 and LeaseTerms(1000, 999, 0).margin_ms == 999
    assert lease_terms(1).margin_ms == 0  # a lease of 1 ms: no room for a margin
    assert facts(timeout_s=1).timeout_s == 1 and facts().timeout_s is None


# --- claimed and held


def test_a_claimed_run_is_held_and_its_lease_runs_a_ttl_past_its_second() -> None:
    entry, effects = claimed(facts(), sent_ms=1_000, ahead_ms=9_000)
    assert entry == RunEntry(facts(), P.held, 1_000 + 30_000 + 9_000, None)
    assert effects == (X.stop_by,)
    late, _ = claimed(facts(), sent_ms=1_000, ahead_ms=-500)  # claimed after its second
    assert late.confirmed_until_ms == 31_000
    assert claimed(facts(), sent_ms=1_000)[0].confirmed_until_ms == 31_000


def test_a_held_run_waits_for_its_second_then_is_handed_to_its_executor() -> None:
    held = at(P.held)
    assert on(held, TICK, 9_999) == (held, ())
    assert on(held, TICK, 9_999)[0] is held  # nothing changed: the same entry
    assert step(held, TICK, 10_000) == (P.due, (X.start,))
    assert step(held, TICK, 10_001) == (P.due, (X.start,))


def test_a_held_run_past_its_fence_is_given_back_not_started() -> None:
    held = at(P.held, due_ms=50_000)
    assert step(held, TICK, FENCE - 1) == (P.held, ())
    assert step(held, TICK, FENCE) == (P.done, (X.give_back, X.free))
    # due and past its fence at once: the fence wins
    assert step(at(P.held), TICK, FENCE) == (P.done, (X.give_back, X.free))


@pytest.mark.parametrize("phase", [P.held, P.due])
def test_unstarted_runs_go_back_on_a_lost_lease_a_stop_and_a_cancel(phase: RunPhase) -> None:
    entry = at(phase)
    assert step(entry, BEAT_LOST, 11_000) == (P.done, (X.give_back, X.free))
    assert step(entry, STOP, 11_000) == (P.done, (X.give_back, X.free))
    assert step(entry, CANCELLED, 11_000) == (P.done, (X.free,))  # finished elsewhere


def test_a_run_over_its_tenants_share_is_sent_back_while_held() -> None:
    assert step(at(P.held), SEND_BACK, 5_000) == (P.done, (X.give_back, X.free))
    with pytest.raises(RefusedEvent):
        on(at(P.due), SEND_BACK, 11_000)


# --- due and placed


def test_a_due_run_is_placed_then_begins_with_its_deadline() -> None:
    placed, effects = on(at(P.due), PLACED, 10_100)
    assert (placed.phase, effects) == (P.placed, ())
    running, effects = on(placed, BEGIN, 10_200)
    assert effects == ()
    assert running == RunEntry(placed.facts, P.running, CU, 10_200 + 3600 * 1000 + 5_000)
    assert DEFAULT_TIMEOUT_S == 3600 and TIMEOUT_GRACE_MS == 5_000
    timed, _ = on(at(P.due, timeout_s=60), BEGIN, 10_000)  # inline: begins from due
    assert timed.phase is P.running and timed.deadline_ms == 10_000 + 65_000


@pytest.mark.parametrize("phase", [P.due, P.placed])
def test_a_run_past_its_fence_may_not_begin(phase: RunPhase) -> None:
    entry = at(phase)
    assert step(entry, BEGIN, FENCE - 1)[0] is P.running
    assert step(entry, BEGIN, FENCE) == (P.done, (X.give_back, X.free))
    assert rule_for(entry, BEGIN, FENCE).guard is PAST_FENCE


@pytest.mark.parametrize(
    ("switch", "holds"),
    [
        (Switch(SwitchKind.tenant, "acme"), True),
        (Switch(SwitchKind.tenant, "other"), False),
        (Switch(SwitchKind.tier, "normal"), True),
        (Switch(SwitchKind.tier, "high"), False),
        (Switch(SwitchKind.task_type, "http"), True),
        (Switch(SwitchKind.task_type, "command"), False),
    ],
)
def test_a_switch_turned_off_after_the_claim_gives_the_run_back_at_its_start(
    switch: Switch, holds: bool
) -> None:
    entry = at(P.placed)
    got = step(entry, Begin((switch,)), 10_000)
    assert got == ((P.done, (X.give_back, X.free)) if holds else (P.running, ()))
    # a switch is asked before the fence (both give the run back)
    if holds:
        assert rule_for(entry, Begin((switch,)), FENCE).guard is SWITCH_HOLDS


def test_a_deleted_jobs_run_is_written_cancelled_at_its_start() -> None:
    entry = at(P.due, task_type=None)
    assert step(entry, BEGIN, 10_000) == (P.finishing, (X.finish_cancelled,))
    assert step(entry, BEGIN, FENCE) == (P.done, (X.give_back, X.free))  # the fence first
    assert step(entry, Begin((Switch(SwitchKind.tenant, "acme"),)), 10_000)[0] is P.done


def test_a_placed_run_is_stopped_and_given_back_at_its_fence() -> None:
    placed = at(P.placed)
    assert step(placed, TICK, FENCE - 1) == (P.placed, ())
    assert step(placed, TICK, FENCE) == (P.done, (X.cancel, X.give_back, X.free))
    assert step(at(P.due), TICK, FENCE) == (P.done, (X.give_back, X.free))
    assert step(at(P.due), TICK, FENCE - 1) == (P.due, ())


def test_a_placed_run_that_never_began_writes_nothing() -> None:
    placed = at(P.placed)
    assert step(placed, FAILED, 11_000) == (P.done, (X.free,))
    assert step(placed, BEAT_LOST, 11_000) == (P.done, (X.cancel, X.give_back, X.free))
    assert step(placed, STOP, 11_000) == (P.done, (X.cancel, X.give_back, X.free))
    assert step(placed, CANCELLED, 11_000) == (P.done, (X.cancel, X.free))
    assert step(placed, PREEMPT, 11_000) == (P.preempting, (X.cancel,))


# --- running


def test_a_running_run_is_fenced_a_margin_before_its_confirmed_lease_ends() -> None:
    running = at(P.running)
    assert step(running, TICK, FENCE - 1) == (P.running, ())
    assert step(running, TICK, FENCE) == (P.giving_back, (X.cancel,))
    fenced, _ = on(running, TICK, FENCE)
    assert step(fenced, OK, FENCE + 1) == (P.done, (X.release, X.free))  # even a success
    assert step(fenced, FAILED, FENCE + 1) == (P.done, (X.release, X.free))


def test_a_run_past_its_deadline_is_told_to_stop_and_its_end_written() -> None:
    running = at(P.running, cu=200_000, deadline=80_000)
    assert step(running, TICK, 79_999) == (P.running, ())
    assert step(running, TICK, 80_000) == (P.stopping, (X.cancel,))
    overran, _ = on(running, TICK, 80_000)
    assert step(overran, TICK, 90_000) == (P.stopping, ())  # cancelled once
    assert step(overran, FAILED, 90_000) == (P.finishing, (X.finish_failed,))
    assert step(overran, OK, 90_000) == (P.finishing, (X.finish_ok,))
    # past its fence too: the fence wins
    assert step(at(P.running, deadline=FENCE), TICK, FENCE) == (P.giving_back, (X.cancel,))
    assert step(overran, TICK, 200_000 - 3_000) == (P.giving_back, ())


def test_a_task_that_ended_is_written_unless_the_keeper_stopped_it_past_its_fence() -> None:
    running = at(P.running)
    assert step(running, OK, 20_000) == (P.finishing, (X.finish_ok,))
    assert step(running, FAILED, FENCE - 1) == (P.finishing, (X.finish_failed,))
    assert step(running, FAILED, FENCE) == (P.done, (X.release, X.free))
    assert rule_for(running, FAILED, FENCE).guard is KEEPER_STOPPED
    assert step(running, OK, FENCE) == (P.finishing, (X.finish_ok,))  # a success stands


def test_a_finished_run_is_freed_once_its_outcome_is_written() -> None:
    finishing = at(P.finishing)
    assert step(finishing, WRITTEN, 20_000) == (P.done, (X.free,))
    for event in (TICK, BEAT_LOST, PREEMPT, STOP, CANCELLED):
        assert on(finishing, event, 99_000) == (finishing, ())  # its outcome is written


def test_a_lost_lease_stops_a_running_task_whose_end_is_still_written() -> None:
    lost, effects = on(at(P.running), BEAT_LOST, 20_000)
    assert (lost.phase, effects) == (P.stopping, (X.cancel,))
    assert step(lost, HEARTBEAT, 20_000) == (P.stopping, ())  # no beat for it
    assert step(lost, BEAT_LOST, 20_000) == (P.stopping, ())
    assert step(lost, FAILED, 21_000) == (P.finishing, (X.finish_failed,))


def test_a_preempted_run_goes_back_at_the_same_attempt_unless_it_succeeded() -> None:
    preempting, effects = on(at(P.running), PREEMPT, 20_000)
    assert (preempting.phase, effects) == (P.preempting, (X.cancel,))
    assert step(preempting, FAILED, 21_000) == (P.done, (X.requeue, X.free))
    assert step(preempting, FAILED, FENCE) == (P.done, (X.requeue, X.free))
    assert step(preempting, OK, 21_000) == (P.finishing, (X.finish_ok,))
    assert step(preempting, TICK, FENCE) == (P.giving_back, ())  # the fence first
    assert step(preempting, TICK, FENCE - 1) == (P.preempting, ())
    for event in (BEGIN, BEAT_LOST, PREEMPT, STOP):
        assert on(preempting, event, 21_000) == (preempting, ())
    assert step(at(P.stopping), PREEMPT, 21_000) == (P.preempting, ())
    unstarted, _ = on(at(P.placed), PREEMPT, 20_000)  # its task never began: no success
    assert step(unstarted, OK, 21_000) == (P.done, (X.requeue, X.free))
    assert step(unstarted, FAILED, 21_000) == (P.done, (X.requeue, X.free))
    fenced, _ = on(unstarted, TICK, FENCE)  # fenced before its task ended: no attempt spent
    assert (fenced.phase, fenced.deadline_ms) == (P.giving_back, None)
    assert step(fenced, FAILED, FENCE + 1) == (P.done, (X.give_back, X.free))
    assert step(fenced, OK, FENCE + 1) == (P.done, (X.give_back, X.free))


def test_a_stopping_worker_gives_back_what_has_not_ended() -> None:
    assert step(at(P.running), STOP, 20_000) == (P.giving_back, (X.cancel,))
    assert step(at(P.stopping), STOP, 20_000) == (P.giving_back, ())
    giving_back = at(P.giving_back)
    for event in (TICK, HEARTBEAT, BEAT_LOST, PREEMPT, STOP):
        assert on(giving_back, event, 99_000) == (giving_back, ())
    assert step(giving_back, CANCELLED, 20_000) == (P.dropping, ())


def test_a_run_cancelled_through_the_api_writes_nothing_when_its_task_ends() -> None:
    dropping, effects = on(at(P.running), CANCELLED, 20_000)
    assert (dropping.phase, effects) == (P.dropping, (X.cancel,))
    assert step(dropping, OK, 21_000) == (P.done, (X.free,))
    assert step(dropping, FAILED, FENCE) == (P.done, (X.free,))
    for event in (TICK, HEARTBEAT, BEAT_LOST, PREEMPT, STOP, CANCELLED):
        assert on(dropping, event, 99_000) == (dropping, ())
    assert step(at(P.stopping), CANCELLED, 1) == (P.dropping, ())
    assert step(at(P.preempting), CANCELLED, 1) == (P.dropping, ())


# --- beats


@pytest.mark.parametrize("phase", [P.held, P.due, P.placed, P.running, P.preempting])
def test_a_beat_is_wanted_once_the_lease_ends_within_the_horizon(phase: RunPhase) -> None:
    entry = at(phase, deadline=90_000 if phase in (P.running, P.preempting) else None)
    wanted = CU - TERMS.horizon_ms + 1  # 14,501
    assert step(entry, HEARTBEAT, wanted - 1) == (phase, ())
    assert step(entry, HEARTBEAT, wanted) == (phase, (X.beat,))
    assert next_beat_ms(entry) == wanted


def test_no_beat_for_a_task_past_its_deadline_but_a_finished_one_is_beaten() -> None:
    assert step(at(P.running, deadline=20_000), HEARTBEAT, 20_000) == (P.running, (X.beat,))
    assert step(at(P.running, deadline=20_000), HEARTBEAT, 20_001) == (P.running, ())
    finishing = at(P.finishing, deadline=20_000)
    assert step(finishing, HEARTBEAT, 30_000) == (P.finishing, (X.beat,))
    assert next_beat_ms(finishing) == CU - TERMS.horizon_ms + 1
    assert next_beat_ms(at(P.running, deadline=14_500)) is None  # over before it is wanted
    assert next_beat_ms(at(P.running, deadline=14_501)) == 14_501
    for phase in (P.stopping, P.giving_back, P.dropping, P.done):
        assert next_beat_ms(at(phase)) is None
        assert on(at(phase), HEARTBEAT, 39_000)[1] == ()


def test_a_confirmed_beat_extends_the_lease_from_when_it_was_sent_never_back() -> None:
    running = at(P.running, deadline=90_000)
    after, effects = on(running, BeatConfirmed(sent_ms=15_000), 15_200)
    assert after == RunEntry(running.facts, P.running, 45_000, 90_000)
    assert effects == (X.stop_by,)
    older, _ = on(after, BeatConfirmed(sent_ms=14_000), 15_300)  # answered late
    assert older.confirmed_until_ms == 45_000
    for phase in (P.held, P.stopping, P.giving_back, P.dropping, P.finishing):
        moved, effects = on(at(phase), BeatConfirmed(sent_ms=20_000), 20_100)
        assert (moved.phase, moved.confirmed_until_ms, effects) == (phase, 50_000, (X.stop_by,))
    done = at(P.done)
    assert on(done, BeatConfirmed(sent_ms=20_000), 20_100) == (done, ())


def test_the_keeper_stops_a_task_a_little_after_the_worker_would() -> None:
    assert stop_by_ms(at(P.running)) == FENCE + 500
    small = lease_terms(2_000)  # margin 500: a quarter of it
    assert stop_by_ms(at(P.running, lease=small)) == CU - 500 + 125
    odd = stop_by_ms(at(P.running, lease=LeaseTerms(2_000, 502, 0)))
    assert odd == CU - 502 + 125 and isinstance(odd, int)  # whole milliseconds


# --- when to look again


def test_the_next_tick_is_the_earliest_instant_a_tick_changes_the_run() -> None:
    assert next_tick_ms(at(P.held)) == 10_000  # its second
    assert next_tick_ms(at(P.held, due_ms=50_000)) == FENCE
    assert next_tick_ms(at(P.due)) == next_tick_ms(at(P.placed)) == FENCE
    assert next_tick_ms(at(P.running, deadline=20_000)) == 20_000
    assert next_tick_ms(at(P.running, deadline=90_000)) == FENCE
    assert next_tick_ms(at(P.stopping, deadline=20_000)) == FENCE  # cancelled already
    assert next_tick_ms(at(P.preempting)) == FENCE
    for phase in (P.giving_back, P.dropping, P.finishing, P.done):
        assert next_tick_ms(at(phase)) is None
    assert at(P.held).fence_at_ms == FENCE


# --- refused and late events


@pytest.mark.parametrize(
    ("phase", "event"),
    [
        (P.running, BEGIN),  # never started twice
        (P.stopping, BEGIN),
        (P.finishing, BEGIN),
        (P.held, BEGIN),  # not before its second
        (P.finishing, OK),  # ended twice
        (P.held, OK),
        (P.due, OK),
        (P.done, WRITTEN),
        (P.running, WRITTEN),
        (P.held, PLACED),
        (P.running, PLACED),
        (P.held, PREEMPT),  # holds no slot
        (P.due, PREEMPT),
        (P.done, SEND_BACK),
    ],
)
def test_an_event_a_phase_does_not_accept_is_refused(phase: RunPhase, event: Any) -> None:
    with pytest.raises(RefusedEvent) as caught:
        on(at(phase), event, 20_000)
    assert caught.value.phase is phase and caught.value.event is event.kind
    assert caught.value.run_id == "r1"
    assert (
        str(caught.value) == f"run r1: event {event.kind.value} is refused in phase {phase.value}"
    )


def test_done_takes_late_events_and_changes_nothing() -> None:
    done = at(P.done)
    for event in (TICK, PLACED, BEGIN, OK, FAILED, HEARTBEAT, BEAT_LOST, PREEMPT, STOP, CANCELLED):
        after, effects = on(done, event, 99_000)
        assert after is done and effects == ()


# --- the table


def test_every_group_of_rows_ends_in_one_otherwise() -> None:
    keys = {(r.source, r.event) for r in TRANSITIONS}
    assert set(_index(TRANSITIONS)) == keys
    guarded, otherwise = _index(TRANSITIONS)[(P.held, EventKind.tick)]
    assert [r.guard for r in guarded] == [PAST_FENCE, IS_DUE] and otherwise.target is P.held
    bare = Rule(P.held, EventKind.tick, PAST_FENCE, P.done)
    with pytest.raises(ValueError, match="rows for held on tick must end in one otherwise"):
        _index((bare,))
    last = Rule(P.held, EventKind.tick, OTHERWISE, P.held)
    with pytest.raises(ValueError, match="must end in one otherwise"):
        _index((last, bare))
    with pytest.raises(ValueError, match="must end in one otherwise"):
        _index((last, last))
    assert _index((bare, last))[(P.held, EventKind.tick)] == ((bare,), last)


def test_every_phase_event_and_effect_is_explained_and_used() -> None:
    assert set(PHASES) == set(RunPhase) and set(EVENTS) == set(EventKind)
    assert set(EFFECTS) == set(Effect)
    assert {r.source for r in TRANSITIONS} == set(RunPhase)
    assert {r.event for r in TRANSITIONS} == set(EventKind)
    assert {e for r in TRANSITIONS for e in r.effects} == set(Effect)
    assert {r.target for r in TRANSITIONS} == set(RunPhase)


def test_every_way_to_done_frees_the_run_once_and_nothing_else_does() -> None:
    for r in TRANSITIONS:
        assert (X.free in r.effects) == (r.target is P.done and r.source is not P.done), r
        assert r.effects.count(X.free) <= 1


# --- derived counts


def test_the_tally_counts_runs_by_phase_and_the_room_follows_the_budget() -> None:
    tally = Tally()
    a, _ = claimed(facts(run_id="a"), 0, 10_000)
    b, _ = claimed(facts(run_id="b", tenant="zed"), 0, 10_000)
    inline, _ = claimed(facts(run_id="c", slotted=False), 0, 10_000)
    for entry in (a, b, inline):
        tally.move(None, entry)
    assert (tally.in_flight, tally.waiting, tally.slotted_waiting, tally.due_waiting) == (
        3,
        3,
        2,
        0,
    )
    assert tally.held_by == {"acme": 1, "zed": 1}
    a2, _ = on(a, TICK, 10_000)
    tally.move(a, a2)
    tally.move(a2, a2)  # no change of phase: nothing counted
    assert (tally.waiting, tally.slotted_waiting, tally.due_waiting) == (3, 2, 1)
    i2, _ = on(inline, TICK, 10_000)
    tally.move(inline, i2)
    assert tally.due_waiting == 1  # an inline run waits for no slot
    a3, _ = on(a2, BEGIN, 10_001)
    tally.move(a2, a3)
    assert (tally.in_flight, tally.waiting, tally.slotted_waiting, tally.due_waiting) == (
        3,
        2,
        1,
        0,
    )
    assert tally.held_by == {"zed": 1}
    b2, _ = on(b, CANCELLED, 10_001)
    tally.move(b, b2)
    assert (tally.in_flight, tally.waiting, tally.held_by) == (2, 1, {})
    # budget: 4 slots turned over once a second for half the lease = 60; measured, 2/s: 30
    assert start_budget(4, 30_000, None) == 60 and start_budget(4, 30_000, 2.0) == 30
    assert tally.room(4, 100, 30_000, None) == 60
    assert tally.room(4, 100, 30_000, 2.0) == 30
    assert tally.room(4, 1, 30_000, None) == 0  # the prefetch is held
    full = Tally(in_flight=50, waiting=10, slotted_waiting=10)
    assert full.room(4, 100, 30_000, None) == 50  # the budget less the 10 waiting
    assert full.room(4, 100, 30_000, 200.0) == 64  # the slots: 104 less the 40 running
    few = Tally(in_flight=12, waiting=10, slotted_waiting=10)
    assert few.room(4, 15, 30_000, 200.0) == 5  # the prefetch less the 10 waiting
    assert few.room(4, 15, 30_000, None) == 5 and few.room(4, 30, 30_000, 200.0) == 20
    assert Tally(slotted_waiting=60).room(4, 1000, 30_000, None) == 0  # the budget is held


def test_successes_are_written_a_batch_of_at_most_a_thousand() -> None:
    assert FINISH_BATCH == 1000
    assert finish_batch(3) == 3 and finish_batch(5_000) == 1000 and finish_batch(1000) == 1000


def _every_event() -> list[Any]:
    simple = [TICK, SEND_BACK, PLACED, WRITTEN, HEARTBEAT, BEAT_LOST, PREEMPT, STOP, CANCELLED]
    switched = Begin((Switch(SwitchKind.tenant, "acme"),))
    return [*simple, BEGIN, switched, OK, FAILED, BeatConfirmed(15_000)]


def test_every_row_is_taken_by_some_event_and_on_follows_it() -> None:
    """Each row of the table is the one `on` takes for some run, event and instant (none
    is shadowed by the rows before it), and `on` gives its phase and effects."""
    taken = set()
    for phase in RunPhase:
        for task_type in ("http", None):
            for deadline in (None, 20_000, 90_000):
                entry = RunEntry(facts(task_type=task_type), phase, CU, deadline)
                for event in _every_event():
                    for now in (0, 10_000, 20_000, FENCE - 1, FENCE, 99_000):
                        try:
                            rule = rule_for(entry, event, now)
                        except RefusedEvent:
                            assert (phase, event.kind) not in {
                                (r.source, r.event) for r in TRANSITIONS
                            }
                            continue
                        assert rule.guard.test(entry, event, now)  # its guard holds
                        after, effects = on(entry, event, now)
                        assert (after.phase, effects) == (rule.target, rule.effects)
                        taken.add(id(rule))
    assert [r for r in TRANSITIONS if id(r) not in taken] == []

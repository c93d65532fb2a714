"""kit.core.worker_run under any order of events from the worker's threads: every accepted
event follows a row of the table, done never changes, a run's task begins at most once,
every run ends freed once with at most one outcome written (exactly one when it began,
unless it was cancelled through the API), and no task runs past its fence."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.switches import Switch, SwitchKind
from kit.core.worker_run import (
    BEAT_LOST,
    CANCELLED,
    FAILED,
    HEARTBEAT,
    OK,
    PLACED,
    PREEMPT,
    SEND_BACK,
    STOP,
    TICK,
    TRANSITIONS,
    WRITTEN,
    BeatConfirmed,
    Begin,
    Effect,
    Event,
    EventKind,
    RefusedEvent,
    RunEntry,
    RunFacts,
    RunPhase,
    Tally,
    claimed,
    lease_terms,
    next_tick_ms,
    on,
    rule_for,
)

P, X = RunPhase, Effect
ROWS = {(r.source, r.event, r.target, r.effects) for r in TRANSITIONS}
KEYS = {(r.source, r.event) for r in TRANSITIONS}
WRITES = frozenset({X.finish_ok, X.finish_failed, X.finish_cancelled, X.release, X.requeue})
ON_LEASE = frozenset({P.held, P.due, P.placed, P.running, P.stopping, P.preempting})
TOLD_TO_STOP = frozenset({P.stopping, P.preempting, P.giving_back, P.dropping})

facts_st = st.builds(
    RunFacts,
    run_id=st.just("r1"),
    due_ms=st.integers(0, 1_000),
    lease=st.sampled_from([lease_terms(1_000), lease_terms(4_000), lease_terms(30_000)]),
    task_type=st.sampled_from(["http", "command", "http", "command", None]),
    tenant=st.sampled_from(["acme", "zed"]),
    tier=st.just("normal"),
    slotted=st.booleans(),
    timeout_s=st.sampled_from([None, 1, 60]),
)
SWITCHES = [(), (Switch(SwitchKind.tenant, "acme"),), (Switch(SwitchKind.task_type, "http"),)]
ENDING = frozenset({EventKind.beat_lost, EventKind.send_back, EventKind.stop, EventKind.cancelled})
SIMPLE = {
    EventKind.tick: TICK,
    EventKind.send_back: SEND_BACK,
    EventKind.placed: PLACED,
    EventKind.written: WRITTEN,
    EventKind.heartbeat: HEARTBEAT,
    EventKind.beat_lost: BEAT_LOST,
    EventKind.preempt: PREEMPT,
    EventKind.stop: STOP,
    EventKind.cancelled: CANCELLED,
}


@st.composite
def event_of(draw: st.DrawFn, kind: EventKind, now: int) -> Event:
    if kind is EventKind.begin:  # mostly no switch off
        return Begin(SWITCHES[draw(st.integers(0, 9)) % 3] if draw(st.booleans()) else ())
    if kind is EventKind.ended:
        return draw(st.sampled_from([OK, FAILED]))
    if kind is EventKind.beat_confirmed:
        return BeatConfirmed(now - draw(st.integers(0, 5_000)))  # sent before now
    return SIMPLE[kind]


@st.composite
def runs(draw: st.DrawFn, max_steps: int = 60) -> tuple[RunFacts, int, list[tuple[Event, int]]]:
    """A claimed run and the events the worker's threads send it, with their times: mostly
    events its phase takes that do not end it (so that runs reach every phase), one in
    ten any event its phase takes, one in ten any event at all."""
    facts = draw(facts_st)
    ahead = draw(st.integers(-2_000, 15_000))
    entry, _ = claimed(facts, 0, ahead)
    now, late, steps = 0, 0, []
    for _ in range(draw(st.integers(5, max_steps))):
        now += draw(st.integers(0, 300))
        if draw(st.integers(0, 9)) == 9:  # now and then a long wait (a stall, a timeout)
            now += draw(st.integers(0, 12_000))
        taken = sorted(k for p, k in KEYS if p is entry.phase)
        along = [k for k in taken if k not in ENDING] or taken
        # (hypothesis draws the bounds of a range more often: they are `along` here)
        pick = draw(st.integers(0, 99))
        if 40 <= pick < 50:
            kind = draw(st.sampled_from(sorted(EventKind)))
        else:
            kind = draw(st.sampled_from(taken if 50 <= pick < 60 else along))
        event = draw(event_of(kind, now))
        steps.append((event, now))
        with contextlib.suppress(RefusedEvent):
            entry, _ = on(entry, event, now)
        late += entry.phase is RunPhase.done
        if late > 3:  # a few late events once it is done
            break
    return facts, ahead, steps


@dataclass
class Step:
    before: RunEntry
    event: Event
    now: int
    after: RunEntry | None  # None: refused
    effects: tuple[Effect, ...]


def drive(
    facts: RunFacts, ahead: int, steps: list[tuple[Event, int]]
) -> tuple[RunEntry, list[Step]]:
    entry, _ = claimed(facts, 0, ahead)
    history = []
    for event, now in steps:
        try:
            after, effects = on(entry, event, now)
        except RefusedEvent:
            history.append(Step(entry, event, now, None, ()))
            continue
        history.append(Step(entry, event, now, after, effects))
        entry = after
    return entry, history


def settle(entry: RunEntry, now: int) -> tuple[RunEntry, list[Step]]:
    """The worker stops, every task ends, every write comes back."""
    history = []
    for event in (STOP, FAILED, WRITTEN):
        try:
            after, effects = on(entry, event, now)
        except RefusedEvent:
            continue
        history.append(Step(entry, event, now, after, effects))
        entry = after
    return entry, history


@settings(max_examples=400)
@given(runs())
def test_an_event_is_refused_or_follows_a_row_of_the_table(run):
    _, history = drive(*run)
    for s in history:
        key = (s.before.phase, s.event.kind)
        if s.after is None:
            assert key not in KEYS
            continue
        rule = rule_for(s.before, s.event, s.now)
        assert (s.before.phase, s.event.kind, s.after.phase, s.effects) in ROWS
        assert (s.after.phase, s.effects) == (rule.target, rule.effects)
        assert s.after.facts is s.before.facts
        assert s.after.confirmed_until_ms >= s.before.confirmed_until_ms  # never shortened


@settings(max_examples=300)
@given(runs())
def test_done_is_absorbing(run):
    _, history = drive(*run)
    for s in history:
        if s.before.phase is P.done and s.after is not None:
            assert s.after is s.before and s.effects == ()


def _began(s: Step) -> bool:
    return (
        s.event.kind is EventKind.begin
        and s.after is not None
        and s.after.phase in (P.running, P.finishing)
    )


@settings(max_examples=400)
@given(runs(), st.integers(0, 10**6))
def test_every_run_ends_freed_once_with_one_outcome_if_it_began(run, later):
    entry, history = drive(*run)
    last = history[-1].now if history else 0
    entry, tail = settle(entry, last + later)
    assert entry.phase is P.done
    accepted = [s for s in history + tail if s.after is not None]
    effects = [e for s in accepted for e in s.effects]
    began = sum(1 for s in accepted if _began(s))
    assert began <= 1  # a run is never started twice
    assert effects.count(X.free) == 1
    assert [s.after.phase for s in accepted if X.free in s.effects] == [P.done]
    writes = [e for e in effects if e in WRITES]
    dropped = any(s.after.phase is P.dropping for s in accepted)
    if began:
        assert len(writes) == (0 if dropped else 1)
        assert X.give_back not in effects
    else:
        assert not set(writes) - {X.requeue} and len(writes) + effects.count(X.give_back) <= 1
    for s in accepted:  # a task that was told to stop was told so when it was
        if s.before.phase in (P.placed, P.running) and s.after.phase in TOLD_TO_STOP:
            assert X.cancel in s.effects


@settings(max_examples=400)
@given(runs(), st.integers(0, 60_000))
def test_the_fence_fires_a_margin_before_the_lease_ends(run, past):
    _, history = drive(*run)
    margin = run[0].lease.margin_ms
    for s in history:
        entry = s.after or s.before
        if entry.phase not in ON_LEASE:
            continue
        fence = entry.confirmed_until_ms - margin
        assert entry.fence_at_ms == fence
        tick_at = next_tick_ms(entry)
        assert tick_at is not None and tick_at <= fence < entry.confirmed_until_ms
        # a tick at the fence or later: no task runs on, none starts, on this lease
        after, effects = on(entry, TICK, fence + past)
        assert after.phase not in ON_LEASE
        if entry.phase in (P.placed, P.running):
            assert X.cancel in effects
        if entry.phase in (P.due, P.placed):
            begun, _ = on(entry, Begin(), fence + past)
            assert begun.phase is not P.running


@settings(max_examples=200)
@given(st.lists(runs(max_steps=15), min_size=1, max_size=6))
def test_the_tally_is_the_count_of_runs_by_phase(many):
    tally = Tally()
    entries = []
    for i, (facts, ahead, _steps) in enumerate(many):
        entry, _ = claimed(RunFacts(**{**_fields(facts), "run_id": f"r{i}"}), 0, ahead)
        tally.move(None, entry)
        entries.append(entry)
    merged = sorted(
        ((now, i, n) for i, run in enumerate(many) for n, (_e, now) in enumerate(run[2])),
        key=lambda s: s[0],
    )
    for now, i, n in merged:  # the runs' events interleaved in time
        try:
            after, _ = on(entries[i], many[i][2][n][0], now)
        except RefusedEvent:
            continue
        tally.move(entries[i], after)
        entries[i] = after
    waiting = [e for e in entries if e.phase in (P.held, P.due, P.placed)]
    slotted = [e for e in waiting if e.facts.slotted]
    assert tally.in_flight == sum(1 for e in entries if e.phase is not P.done)
    assert tally.waiting == len(waiting)
    assert tally.slotted_waiting == len(slotted)
    assert tally.due_waiting == sum(1 for e in slotted if e.phase is not P.held)
    by_tenant: dict[str, int] = {}
    for e in slotted:
        by_tenant[e.facts.tenant] = by_tenant.get(e.facts.tenant, 0) + 1
    assert tally.held_by == by_tenant


def _fields(facts: RunFacts) -> dict[str, object]:
    return {name: getattr(facts, name) for name in RunFacts.__slots__}

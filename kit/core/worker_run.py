"""A claimed run's life inside a worker, as one state machine (sans-IO).

The worker kept a run's state as about ten flags (started, done, fenced, releasing,
preempted, counted_out, due_waiting, ...) set and read across five threads, with the
rules inline in their loops. Here a run held by a worker is in one `RunPhase`, and
`on(entry, event, now_ms)` is the only way it changes: the first row of `TRANSITIONS`
for (phase, event) whose guard holds gives the next phase and the effects, which the
worker's threads carry out (nothing here writes, sleeps or reads a clock). An event a
phase does not accept raises `RefusedEvent`. Late events are accepted and do nothing:
a run given back while its task was queued still sees that task begin, or end.

Time is the worker's monotonic clock in ms, for everything: the fence compares it with
the instant the lease was last confirmed from (the start of the claim or beat that
confirmed it), which must not move with a new sample of the database's clock. The run's
second is given on the same clock (`RunFacts.due_ms`: the monotonic instant by which
the database's clock has surely reached it, kit.worker.clock.DbClock.monotonic_s), so
it never starts early.

The rules that live here and nowhere else: the fence (`PAST_FENCE`: a run whose lease
can no longer be confirmed a fence margin before it ends is stopped, or never started,
and given back), the hold (`IS_DUE`), the start (`begin`: a kill switch, the fence, a
deleted job), the timeout's backstop (`OVERRAN`), when a beat is wanted (`BEAT_WANTED`),
what each way out writes (give back, release, requeue, finish), the keeper's deadline
(`stop_by_ms`), the waiting counts behind the start budget (`Tally`) and the size of a
batch of successes (`finish_batch`). docs/state-machine.md renders the table
(kit.core.state_doc).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, NamedTuple

from kit.core.backlog import claim_room, start_budget
from kit.core.defaults import KILL_GRACE_MS
from kit.core.errors import FieldError
from kit.core.leases import beat_rule, beat_wanted, fence_margin_ms
from kit.core.switches import Switch, holding

DEFAULT_TIMEOUT_S = 3600  # a run whose job gives no timeout
# The task stops itself at its timeout; the worker cancels it this much later (backstop).
TIMEOUT_GRACE_MS = 5_000
# The keeper (kit.tasks.command) stops a task this long at most after the worker's own
# fence would: running, the worker acts first and gives the run back itself.
STOP_BY_SLACK_MS = 500
FINISH_BATCH = 1000  # successes written per transaction, at most


class RunPhase(StrEnum):
    held = "held"
    due = "due"
    placed = "placed"
    running = "running"
    stopping = "stopping"
    preempting = "preempting"
    giving_back = "giving_back"
    dropping = "dropping"
    finishing = "finishing"
    done = "done"


PHASES: dict[RunPhase, str] = {
    RunPhase.held: "claimed ahead of its second; waits for it",
    RunPhase.due: "its second came: handed to its executor, waits for a slot",
    RunPhase.placed: "holds a slot; its task is made and has not begun its effect",
    RunPhase.running: "its task began",
    RunPhase.stopping: "its task was told to stop (its timeout passed, or its lease was "
    "found lost); what it returns is written",
    RunPhase.preempting: "its task was stopped for a paid run; it goes back at the same "
    "attempt when it ends",
    RunPhase.giving_back: "fenced, or the worker stops: its task was told to stop, its "
    "lease is released when it ends",
    RunPhase.dropping: "cancelled through the API (the run is finished already): nothing "
    "is written when its task ends",
    RunPhase.finishing: "its task ended; its outcome is being written",
    RunPhase.done: "nothing of it is left to do here",
}


class EventKind(StrEnum):
    tick = "tick"
    send_back = "send_back"
    placed = "placed"
    begin = "begin"
    ended = "ended"
    written = "written"
    heartbeat = "heartbeat"
    beat_confirmed = "beat_confirmed"
    beat_lost = "beat_lost"
    preempt = "preempt"
    stop = "stop"
    cancelled = "cancelled"


EVENTS: dict[EventKind, str] = {
    EventKind.tick: "time passed (the fence's and the hold's look, at `next_tick_ms`)",
    EventKind.send_back: "its tenant holds more than its share here (fair share)",
    EventKind.placed: "an executor gave it a slot (a pool thread, a place on the task loop)",
    EventKind.begin: "its task is about to have its effect, and asks whether it may",
    EventKind.ended: "its task returned, succeeded or not",
    EventKind.written: "its outcome's write came back (accepted, stale, or given up)",
    EventKind.heartbeat: "the heartbeat thread looks at it (at `next_beat_ms`)",
    EventKind.beat_confirmed: "a beat sent at `sent_ms` renewed its lease",
    EventKind.beat_lost: "a beat found its lease gone (reaped, cancelled, or expired)",
    EventKind.preempt: "kit.core.preemption picked it to free a slot for a paid run",
    EventKind.stop: "the worker stops and its drain time is over",
    EventKind.cancelled: "it was cancelled through the API",
}


class Effect(StrEnum):
    start = "start"
    cancel = "cancel"
    stop_by = "stop_by"
    beat = "beat"
    give_back = "give_back"
    release = "release"
    requeue = "requeue"
    finish_ok = "finish_ok"
    finish_failed = "finish_failed"
    finish_cancelled = "finish_cancelled"
    free = "free"


EFFECTS: dict[Effect, str] = {
    Effect.start: "hand it to its executor (the pool's fair queue, the task loop, the hold "
    "thread's inline batch)",
    Effect.cancel: "set its cancel flag: its task stops (a command's process group gets "
    "SIGTERM, then SIGKILL after the grace)",
    Effect.stop_by: "move the keeper's deadline to `stop_by_ms` (kit.tasks.command stops the "
    "task then if the worker cannot)",
    Effect.beat: "renew its lease in the next heartbeat statement",
    Effect.give_back: "never started: pending again at the same attempt, published again "
    "(`runs_return`)",
    Effect.release: "started: its lease ends now and the reaper re-queues it, attempt + 1 "
    "(`runs_release`)",
    Effect.requeue: "preempted: pending again at the same attempt, published again "
    "(`runs_preempt`)",
    Effect.finish_ok: "write its success, in a batch of at most `FINISH_BATCH`",
    Effect.finish_failed: "write its failure: a retry or a dead letter, one transaction",
    Effect.finish_cancelled: "write it cancelled: its job was deleted",
    Effect.free: "forget it: it leaves the worker, and its slot goes to the next run",
}


class RefusedEvent(ValueError):
    """An event the run's phase does not accept: a bug in the worker's threads."""

    def __init__(self, run_id: str, phase: RunPhase, event: EventKind) -> None:
        super().__init__(f"run {run_id}: event {event.value} is refused in phase {phase.value}")
        self.run_id, self.phase, self.event = run_id, phase, event


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    """What a lease of `ttl_ms` means to the worker: how long before its end the run is
    fenced, and within what horizon of its end a beat renews it (kit.core.leases)."""

    ttl_ms: int
    margin_ms: int
    horizon_ms: int

    def __post_init__(self) -> None:
        if self.ttl_ms <= 0:
            raise FieldError("ttl_ms", f"must be positive, not {self.ttl_ms}")
        if not 0 <= self.margin_ms < self.ttl_ms:
            raise FieldError("margin_ms", f"must be in [0, ttl_ms), not {self.margin_ms}")


def lease_terms(
    ttl_ms: int, beat_ms: int | None = None, kill_grace_ms: int = KILL_GRACE_MS
) -> LeaseTerms:
    """The terms of a lease of `ttl_ms` beaten every `beat_ms` (a third of it, 200 ms at
    least, unless the worker's heartbeat is set)."""
    if ttl_ms <= 0:
        raise FieldError("ttl_ms", f"must be positive, not {ttl_ms}")
    margin = fence_margin_ms(ttl_ms, kill_grace_ms)
    beat = beat_ms if beat_ms is not None else max(200, ttl_ms // 3)
    return LeaseTerms(ttl_ms, margin, beat_rule(ttl_ms, beat, margin).horizon_ms)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the claim said of the run; never changes while the worker holds it."""

    run_id: str
    due_ms: int  # monotonic: the instant its second has surely come by the database
    lease: LeaseTerms  # its lease (its job's sized lease, or the worker's)
    task_type: str | None  # None: its job was deleted (no task to run)
    tenant: str = ""
    tier: str = "normal"
    slotted: bool = True  # needs a slot (pool or loop) to start: not an inline task
    timeout_s: int | None = None  # its task's; None: DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise FieldError("timeout_s", f"run {self.run_id}: must be positive")


class RunEntry(NamedTuple):
    """One run held by a worker: its facts, its phase, and the instants the rules read.
    A tuple, not a frozen dataclass: one is made per transition, thousands a second at a
    burst's second, and a tuple is made in under half the time."""

    facts: RunFacts
    phase: RunPhase
    confirmed_until_ms: int  # its lease is known to hold until then (monotonic)
    deadline_ms: int | None = None  # set when its task began: its timeout and the grace

    @property
    def fence_at_ms(self) -> int:
        """From this instant the run must not run on, nor start (`PAST_FENCE`)."""
        return self.confirmed_until_ms - self.facts.lease.margin_ms


@dataclass(frozen=True, slots=True)
class Event:
    kind: ClassVar[EventKind]


@dataclass(frozen=True, slots=True)
class Tick(Event):
    kind: ClassVar[EventKind] = EventKind.tick


@dataclass(frozen=True, slots=True)
class SendBack(Event):
    kind: ClassVar[EventKind] = EventKind.send_back


@dataclass(frozen=True, slots=True)
class Placed(Event):
    kind: ClassVar[EventKind] = EventKind.placed


@dataclass(frozen=True, slots=True)
class Begin(Event):
    kind: ClassVar[EventKind] = EventKind.begin
    switches: tuple[Switch, ...] = ()  # the kill switches off now


@dataclass(frozen=True, slots=True)
class Ended(Event):
    kind: ClassVar[EventKind] = EventKind.ended
    ok: bool


@dataclass(frozen=True, slots=True)
class Written(Event):
    kind: ClassVar[EventKind] = EventKind.written


@dataclass(frozen=True, slots=True)
class Heartbeat(Event):
    kind: ClassVar[EventKind] = EventKind.heartbeat


@dataclass(frozen=True, slots=True)
class BeatConfirmed(Event):
    kind: ClassVar[EventKind] = EventKind.beat_confirmed
    sent_ms: int  # when the beat's statement was sent: the lease holds a ttl from then


@dataclass(frozen=True, slots=True)
class BeatLost(Event):
    kind: ClassVar[EventKind] = EventKind.beat_lost


@dataclass(frozen=True, slots=True)
class Preempt(Event):
    kind: ClassVar[EventKind] = EventKind.preempt


@dataclass(frozen=True, slots=True)
class Stop(Event):
    kind: ClassVar[EventKind] = EventKind.stop


@dataclass(frozen=True, slots=True)
class Cancelled(Event):
    kind: ClassVar[EventKind] = EventKind.cancelled


TICK, SEND_BACK, PLACED, BEGIN = Tick(), SendBack(), Placed(), Begin()
OK, FAILED, WRITTEN, HEARTBEAT = Ended(True), Ended(False), Written(), Heartbeat()
BEAT_LOST, PREEMPT, STOP, CANCELLED = BeatLost(), Preempt(), Stop(), Cancelled()


# ---------------------------------------------------------------------------
# Guards: the rules a row is chosen by


@dataclass(frozen=True)
class Guard:
    text: str  # as docs/state-machine.md shows it
    test: Callable[[RunEntry, Event, int], bool]


def _always(entry: RunEntry, event: Event, now_ms: int) -> bool:
    return True


def _past_fence(entry: RunEntry, event: Event, now_ms: int) -> bool:
    return now_ms >= entry.fence_at_ms


def _is_due(entry: RunEntry, event: Event, now_ms: int) -> bool:
    return now_ms >= entry.facts.due_ms


def _overran(entry: RunEntry, event: Event, now_ms: int) -> bool:
    return entry.deadline_ms is not None and now_ms >= entry.deadline_ms


def _beat_wanted(entry: RunEntry, event: Event, now_ms: int) -> bool:
    # a finished run's outcome is still to be written under its lease: its timeout no
    # longer applies, but its lease is renewed only within the horizon like any other
    finished = entry.phase is RunPhase.finishing
    return beat_wanted(
        finished or entry.deadline_ms is not None,
        entry.confirmed_until_ms,
        None if finished else entry.deadline_ms,
        now_ms,
        entry.facts.lease.horizon_ms,
    )


def _switch_holds(entry: RunEntry, event: Event, now_ms: int) -> bool:
    facts = entry.facts
    assert isinstance(event, Begin)
    switches = event.switches  # mostly none: no call then
    return (
        bool(switches) and holding(switches, facts.tenant, facts.tier, facts.task_type) is not None
    )


def _no_task(entry: RunEntry, event: Event, now_ms: int) -> bool:
    return entry.facts.task_type is None


def _succeeded(entry: RunEntry, event: Event, now_ms: int) -> bool:
    assert isinstance(event, Ended)
    return event.ok


def _began_and_succeeded(entry: RunEntry, event: Event, now_ms: int) -> bool:
    assert isinstance(event, Ended)
    return entry.deadline_ms is not None and event.ok


def _never_began(entry: RunEntry, event: Event, now_ms: int) -> bool:
    # preempted while placed, then fenced: its task had no effect, so no attempt is spent
    return entry.deadline_ms is None


def _keeper_stopped(entry: RunEntry, event: Event, now_ms: int) -> bool:
    assert isinstance(event, Ended)
    return not event.ok and now_ms >= entry.fence_at_ms


OTHERWISE = Guard("otherwise", _always)
PAST_FENCE = Guard("now >= confirmed_until - fence margin", _past_fence)
IS_DUE = Guard("now >= its second (`due_ms`)", _is_due)
OVERRAN = Guard(f"now >= its deadline (its timeout + {TIMEOUT_GRACE_MS // 1000} s)", _overran)
BEAT_WANTED = Guard("its lease ends within the beat horizon (`beat_wanted`)", _beat_wanted)
SWITCH_HOLDS = Guard("a kill switch holds its tenant, tier or task type", _switch_holds)
NO_TASK = Guard("its job was deleted (no task)", _no_task)
SUCCEEDED = Guard("it succeeded", _succeeded)
BEGAN_AND_SUCCEEDED = Guard("it began, and succeeded", _began_and_succeeded)
NEVER_BEGAN = Guard("its task never began", _never_began)
KEEPER_STOPPED = Guard("it failed past its fence: the keeper stopped it", _keeper_stopped)


@dataclass(frozen=True)
class Rule:
    source: RunPhase
    event: EventKind
    guard: Guard
    target: RunPhase
    effects: tuple[Effect, ...] = ()


_P, _E, _X = RunPhase, EventKind, Effect
_GIVE_BACK = (_X.give_back, _X.free)
_CANCEL_GIVE_BACK = (_X.cancel, _X.give_back, _X.free)


# The table, one row per (phase, event, guard). A group's rows are tried in order; its
# last row is its `OTHERWISE`. Spelled out row by row, not built by helpers: it is what
# docs/state-machine.md shows, and what `on` follows.
TRANSITIONS: tuple[Rule, ...] = (
    # held: claimed ahead of its second
    Rule(_P.held, _E.tick, PAST_FENCE, _P.done, _GIVE_BACK),
    Rule(_P.held, _E.tick, IS_DUE, _P.due, (_X.start,)),
    Rule(_P.held, _E.tick, OTHERWISE, _P.held),
    Rule(_P.held, _E.heartbeat, BEAT_WANTED, _P.held, (_X.beat,)),
    Rule(_P.held, _E.heartbeat, OTHERWISE, _P.held),
    Rule(_P.held, _E.beat_confirmed, OTHERWISE, _P.held, (_X.stop_by,)),
    Rule(_P.held, _E.beat_lost, OTHERWISE, _P.done, _GIVE_BACK),
    Rule(_P.held, _E.send_back, OTHERWISE, _P.done, _GIVE_BACK),
    Rule(_P.held, _E.stop, OTHERWISE, _P.done, _GIVE_BACK),
    Rule(_P.held, _E.cancelled, OTHERWISE, _P.done, (_X.free,)),
    # due: handed to its executor, waiting for a slot
    Rule(_P.due, _E.tick, PAST_FENCE, _P.done, _GIVE_BACK),
    Rule(_P.due, _E.tick, OTHERWISE, _P.due),
    Rule(_P.due, _E.placed, OTHERWISE, _P.placed),
    Rule(_P.due, _E.begin, SWITCH_HOLDS, _P.done, _GIVE_BACK),
    Rule(_P.due, _E.begin, PAST_FENCE, _P.done, _GIVE_BACK),
    Rule(_P.due, _E.begin, NO_TASK, _P.finishing, (_X.finish_cancelled,)),
    Rule(_P.due, _E.begin, OTHERWISE, _P.running),
    Rule(_P.due, _E.heartbeat, BEAT_WANTED, _P.due, (_X.beat,)),
    Rule(_P.due, _E.heartbeat, OTHERWISE, _P.due),
    Rule(_P.due, _E.beat_confirmed, OTHERWISE, _P.due, (_X.stop_by,)),
    Rule(_P.due, _E.beat_lost, OTHERWISE, _P.done, _GIVE_BACK),
    Rule(_P.due, _E.stop, OTHERWISE, _P.done, _GIVE_BACK),
    Rule(_P.due, _E.cancelled, OTHERWISE, _P.done, (_X.free,)),
    # placed: holds a slot, its task made, not begun
    Rule(_P.placed, _E.tick, PAST_FENCE, _P.done, _CANCEL_GIVE_BACK),
    Rule(_P.placed, _E.tick, OTHERWISE, _P.placed),
    Rule(_P.placed, _E.begin, SWITCH_HOLDS, _P.done, _GIVE_BACK),
    Rule(_P.placed, _E.begin, PAST_FENCE, _P.done, _GIVE_BACK),
    Rule(_P.placed, _E.begin, NO_TASK, _P.finishing, (_X.finish_cancelled,)),
    Rule(_P.placed, _E.begin, OTHERWISE, _P.running),
    Rule(_P.placed, _E.ended, OTHERWISE, _P.done, (_X.free,)),
    Rule(_P.placed, _E.heartbeat, BEAT_WANTED, _P.placed, (_X.beat,)),
    Rule(_P.placed, _E.heartbeat, OTHERWISE, _P.placed),
    Rule(_P.placed, _E.beat_confirmed, OTHERWISE, _P.placed, (_X.stop_by,)),
    Rule(_P.placed, _E.beat_lost, OTHERWISE, _P.done, _CANCEL_GIVE_BACK),
    Rule(_P.placed, _E.preempt, OTHERWISE, _P.preempting, (_X.cancel,)),
    Rule(_P.placed, _E.stop, OTHERWISE, _P.done, _CANCEL_GIVE_BACK),
    Rule(_P.placed, _E.cancelled, OTHERWISE, _P.done, (_X.cancel, _X.free)),
    # running
    Rule(_P.running, _E.tick, PAST_FENCE, _P.giving_back, (_X.cancel,)),
    Rule(_P.running, _E.tick, OVERRAN, _P.stopping, (_X.cancel,)),
    Rule(_P.running, _E.tick, OTHERWISE, _P.running),
    Rule(_P.running, _E.ended, SUCCEEDED, _P.finishing, (_X.finish_ok,)),
    Rule(_P.running, _E.ended, KEEPER_STOPPED, _P.done, (_X.release, _X.free)),
    Rule(_P.running, _E.ended, OTHERWISE, _P.finishing, (_X.finish_failed,)),
    Rule(_P.running, _E.heartbeat, BEAT_WANTED, _P.running, (_X.beat,)),
    Rule(_P.running, _E.heartbeat, OTHERWISE, _P.running),
    Rule(_P.running, _E.beat_confirmed, OTHERWISE, _P.running, (_X.stop_by,)),
    Rule(_P.running, _E.beat_lost, OTHERWISE, _P.stopping, (_X.cancel,)),
    Rule(_P.running, _E.preempt, OTHERWISE, _P.preempting, (_X.cancel,)),
    Rule(_P.running, _E.stop, OTHERWISE, _P.giving_back, (_X.cancel,)),
    Rule(_P.running, _E.cancelled, OTHERWISE, _P.dropping, (_X.cancel,)),
    # stopping: told to stop (its timeout passed, or its lease was found lost)
    Rule(_P.stopping, _E.tick, PAST_FENCE, _P.giving_back),
    Rule(_P.stopping, _E.tick, OTHERWISE, _P.stopping),
    Rule(_P.stopping, _E.ended, SUCCEEDED, _P.finishing, (_X.finish_ok,)),
    Rule(_P.stopping, _E.ended, KEEPER_STOPPED, _P.done, (_X.release, _X.free)),
    Rule(_P.stopping, _E.ended, OTHERWISE, _P.finishing, (_X.finish_failed,)),
    Rule(_P.stopping, _E.beat_confirmed, OTHERWISE, _P.stopping, (_X.stop_by,)),
    Rule(_P.stopping, _E.preempt, OTHERWISE, _P.preempting),
    Rule(_P.stopping, _E.stop, OTHERWISE, _P.giving_back),
    Rule(_P.stopping, _E.cancelled, OTHERWISE, _P.dropping),
    Rule(_P.stopping, _E.heartbeat, OTHERWISE, _P.stopping),
    Rule(_P.stopping, _E.beat_lost, OTHERWISE, _P.stopping),
    # preempting: stopped for a paid run
    Rule(_P.preempting, _E.tick, PAST_FENCE, _P.giving_back),
    Rule(_P.preempting, _E.tick, OTHERWISE, _P.preempting),
    Rule(_P.preempting, _E.ended, BEGAN_AND_SUCCEEDED, _P.finishing, (_X.finish_ok,)),
    Rule(_P.preempting, _E.ended, OTHERWISE, _P.done, (_X.requeue, _X.free)),
    Rule(_P.preempting, _E.heartbeat, BEAT_WANTED, _P.preempting, (_X.beat,)),
    Rule(_P.preempting, _E.heartbeat, OTHERWISE, _P.preempting),
    Rule(_P.preempting, _E.beat_confirmed, OTHERWISE, _P.preempting, (_X.stop_by,)),
    Rule(_P.preempting, _E.cancelled, OTHERWISE, _P.dropping),
    Rule(_P.preempting, _E.begin, OTHERWISE, _P.preempting),
    Rule(_P.preempting, _E.beat_lost, OTHERWISE, _P.preempting),
    Rule(_P.preempting, _E.preempt, OTHERWISE, _P.preempting),
    Rule(_P.preempting, _E.stop, OTHERWISE, _P.preempting),
    # giving_back: fenced, or the worker stops
    Rule(_P.giving_back, _E.ended, NEVER_BEGAN, _P.done, _GIVE_BACK),
    Rule(_P.giving_back, _E.ended, OTHERWISE, _P.done, (_X.release, _X.free)),
    Rule(_P.giving_back, _E.beat_confirmed, OTHERWISE, _P.giving_back, (_X.stop_by,)),
    Rule(_P.giving_back, _E.cancelled, OTHERWISE, _P.dropping),
    Rule(_P.giving_back, _E.tick, OTHERWISE, _P.giving_back),
    Rule(_P.giving_back, _E.heartbeat, OTHERWISE, _P.giving_back),
    Rule(_P.giving_back, _E.beat_lost, OTHERWISE, _P.giving_back),
    Rule(_P.giving_back, _E.preempt, OTHERWISE, _P.giving_back),
    Rule(_P.giving_back, _E.stop, OTHERWISE, _P.giving_back),
    # dropping: cancelled through the API
    Rule(_P.dropping, _E.ended, OTHERWISE, _P.done, (_X.free,)),
    Rule(_P.dropping, _E.beat_confirmed, OTHERWISE, _P.dropping, (_X.stop_by,)),
    Rule(_P.dropping, _E.tick, OTHERWISE, _P.dropping),
    Rule(_P.dropping, _E.heartbeat, OTHERWISE, _P.dropping),
    Rule(_P.dropping, _E.beat_lost, OTHERWISE, _P.dropping),
    Rule(_P.dropping, _E.preempt, OTHERWISE, _P.dropping),
    Rule(_P.dropping, _E.stop, OTHERWISE, _P.dropping),
    Rule(_P.dropping, _E.cancelled, OTHERWISE, _P.dropping),
    # finishing: its outcome is being written
    Rule(_P.finishing, _E.written, OTHERWISE, _P.done, (_X.free,)),
    Rule(_P.finishing, _E.heartbeat, BEAT_WANTED, _P.finishing, (_X.beat,)),
    Rule(_P.finishing, _E.heartbeat, OTHERWISE, _P.finishing),
    Rule(_P.finishing, _E.beat_confirmed, OTHERWISE, _P.finishing, (_X.stop_by,)),
    Rule(_P.finishing, _E.tick, OTHERWISE, _P.finishing),
    Rule(_P.finishing, _E.beat_lost, OTHERWISE, _P.finishing),
    Rule(_P.finishing, _E.preempt, OTHERWISE, _P.finishing),
    Rule(_P.finishing, _E.stop, OTHERWISE, _P.finishing),
    Rule(_P.finishing, _E.cancelled, OTHERWISE, _P.finishing),
    # done: late events change nothing
    Rule(_P.done, _E.tick, OTHERWISE, _P.done),
    Rule(_P.done, _E.placed, OTHERWISE, _P.done),
    Rule(_P.done, _E.begin, OTHERWISE, _P.done),
    Rule(_P.done, _E.ended, OTHERWISE, _P.done),
    Rule(_P.done, _E.heartbeat, OTHERWISE, _P.done),
    Rule(_P.done, _E.beat_confirmed, OTHERWISE, _P.done),
    Rule(_P.done, _E.beat_lost, OTHERWISE, _P.done),
    Rule(_P.done, _E.preempt, OTHERWISE, _P.done),
    Rule(_P.done, _E.stop, OTHERWISE, _P.done),
    Rule(_P.done, _E.cancelled, OTHERWISE, _P.done),
)


def _index(
    rules: tuple[Rule, ...],
) -> dict[tuple[RunPhase, EventKind], tuple[tuple[Rule, ...], Rule]]:
    """Rows by (phase, event): the guarded ones in order, then the `OTHERWISE` one that
    every group must end in (so that `on` always finds a row) and have only there."""
    groups: dict[tuple[RunPhase, EventKind], list[Rule]] = {}
    for rule in rules:
        groups.setdefault((rule.source, rule.event), []).append(rule)
    for (phase, event), group in groups.items():
        if [r.guard is OTHERWISE for r in group] != [False] * (len(group) - 1) + [True]:
            raise ValueError(f"rows for {phase.value} on {event.value} must end in one otherwise")
    return {key: (tuple(group[:-1]), group[-1]) for key, group in groups.items()}


_RULES = _index(TRANSITIONS)


def claimed(facts: RunFacts, sent_ms: int, ahead_ms: int = 0) -> tuple[RunEntry, tuple[Effect]]:
    """A run the claim sent at `sent_ms` took: held, its lease confirmed a ttl past the
    later of the claim and its second (kit.core.leases.claim_run). `ahead_ms`: how long
    before its second the database claimed it (negative for a run claimed late)."""
    until = sent_ms + facts.lease.ttl_ms + max(0, ahead_ms)
    return RunEntry(facts, RunPhase.held, until), (Effect.stop_by,)


def rule_for(entry: RunEntry, event: Event, now_ms: int) -> Rule:
    """The row of `TRANSITIONS` that `event` takes at `now_ms`; RefusedEvent if none."""
    found = _RULES.get((entry.phase, event.kind))
    if found is None:
        raise RefusedEvent(entry.facts.run_id, entry.phase, event.kind)
    guarded, otherwise = found
    for rule in guarded:
        if rule.guard.test(entry, event, now_ms):
            return rule
    return otherwise


def on(entry: RunEntry, event: Event, now_ms: int) -> tuple[RunEntry, tuple[Effect, ...]]:
    """The run after `event` at `now_ms`, and what the worker must do about it."""
    rule = rule_for(entry, event, now_ms)
    target = rule.target
    if event.kind is EventKind.beat_confirmed and target is not RunPhase.done:
        assert isinstance(event, BeatConfirmed)
        sent_ms = event.sent_ms
        until = max(entry.confirmed_until_ms, sent_ms + entry.facts.lease.ttl_ms)
        return RunEntry(entry.facts, target, until, entry.deadline_ms), rule.effects
    if target is RunPhase.running and entry.phase is not RunPhase.running:
        timeout_s = entry.facts.timeout_s or DEFAULT_TIMEOUT_S
        deadline = now_ms + timeout_s * 1000 + TIMEOUT_GRACE_MS
        return RunEntry(entry.facts, target, entry.confirmed_until_ms, deadline), rule.effects
    if target is entry.phase:
        return entry, rule.effects
    return RunEntry(entry.facts, target, entry.confirmed_until_ms, entry.deadline_ms), rule.effects


# ---------------------------------------------------------------------------
# When the worker must look again, and what the rules derive


def stop_by_ms(entry: RunEntry) -> int:
    """When the run's task must be stopped if this worker cannot do it itself (stopped or
    starved): a little after its own fence would, still the kill grace and more before
    the lease ends (kit.tasks.command's keeper holds it to that)."""
    margin = entry.facts.lease.margin_ms
    return entry.confirmed_until_ms - margin + min(STOP_BY_SLACK_MS, margin // 4)


_FENCED = frozenset({_P.held, _P.due, _P.placed, _P.running, _P.stopping, _P.preempting})
_BEATEN = frozenset({_P.held, _P.due, _P.placed, _P.running, _P.preempting, _P.finishing})


def next_tick_ms(entry: RunEntry) -> int | None:
    """The earliest instant a tick may change the run (its second, its fence, its
    deadline); None: no tick ever will. A worker ticks a run then, not every pass."""
    if entry.phase not in _FENCED:
        return None
    at = entry.fence_at_ms
    if entry.phase is RunPhase.held:
        return min(at, entry.facts.due_ms)
    if entry.phase is RunPhase.running and entry.deadline_ms is not None:
        return min(at, entry.deadline_ms)
    return at


def next_beat_ms(entry: RunEntry) -> int | None:
    """The first instant a heartbeat wants the run's lease renewed, unless a beat is
    confirmed before (the lease ends within the horizon after it); None: never."""
    if entry.phase not in _BEATEN:
        return None
    at = entry.confirmed_until_ms - entry.facts.lease.horizon_ms + 1
    if entry.phase is not RunPhase.finishing and entry.deadline_ms is not None:
        return at if at <= entry.deadline_ms else None
    return at


def finish_batch(waiting: int) -> int:
    """How many of the successes waiting the next transaction writes."""
    return min(waiting, FINISH_BATCH)


WAITING = frozenset({_P.held, _P.due, _P.placed})  # claimed, not begun
DUE_WAITING = frozenset({_P.due, _P.placed})  # its second came, not begun


@dataclass
class Tally:
    """The worker's counts of its runs, by phase: what its start budget and fair shares
    read. `move` is called with every entry before and after a transition."""

    in_flight: int = 0  # not done
    waiting: int = 0  # claimed, not begun (WAITING)
    slotted_waiting: int = 0  # of those, the runs that need a slot to start
    due_waiting: int = 0  # of those, the ones whose second came (the start rate's cue)
    held_by: dict[str, int] = field(default_factory=dict)  # slotted waiting, by tenant

    def move(self, before: RunEntry | None, after: RunEntry) -> None:
        if before is not None:
            if before.phase is after.phase:
                return
            self._count(before.facts, before.phase, -1)
        self._count(after.facts, after.phase, 1)

    def _count(self, facts: RunFacts, phase: RunPhase, sign: int) -> None:
        if phase is RunPhase.done:
            return
        self.in_flight += sign
        if phase not in WAITING:
            return
        self.waiting += sign
        if not facts.slotted:
            return
        self.slotted_waiting += sign
        self.due_waiting += sign if phase in DUE_WAITING else 0
        held = self.held_by.get(facts.tenant, 0) + sign
        if held:
            self.held_by[facts.tenant] = held
        else:
            del self.held_by[facts.tenant]

    def room(
        self, concurrency: int, prefetch: int, lease_ttl_ms: int, starts_per_s: float | None
    ) -> int:
        """How many more runs to claim: the prefetch left, and never more runs needing a
        slot than it starts in half its lease (kit.core.backlog)."""
        running = self.in_flight - self.waiting
        budget = start_budget(concurrency, lease_ttl_ms, starts_per_s)
        return min(
            prefetch - self.waiting,
            prefetch + concurrency - running,
            claim_room(self.slotted_waiting, budget),
        )

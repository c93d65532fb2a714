"""Leases as explicit state transitions with fencing.

Partition lease: which scheduler node may write a partition's triggers and runs. Its
`epoch` is the fencing token: it increments whenever ownership changes hands
(including a takeover after expiry, and a node re-acquiring its own expired lease),
so a write carrying an older epoch is refused.

Run lease: which worker may finish a run. Its `token` is new on every claim; a finish
or heartbeat by any other token is refused. Every run-lease function returns a
`Transition`, looks its target up in `TRANSITIONS`, and never mutates its input.

Time is the caller's (the database clock in production, simulated time in the
model). A lease is live while now_ms < expires_at_ms.

`python -m kit.core.state_doc` prints docs/state-machine.md from the tables below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

# ---------------------------------------------------------------------------
# Partition lease


@dataclass(frozen=True)
class PartitionLease:
    partition_id: int
    owner: str | None
    epoch: int
    expires_at_ms: int

    def live(self, now_ms: int) -> bool:
        return self.owner is not None and now_ms < self.expires_at_ms


@dataclass(frozen=True)
class LeaseDecision:
    granted: bool
    lease: PartitionLease
    reason: str | None = None


def _refuse(lease: PartitionLease, reason: str) -> LeaseDecision:
    return LeaseDecision(False, lease, reason)


def _epoch_reason(held: int, offered: int) -> str:
    if offered < held:
        return f"stale epoch {offered} (current {held})"
    return f"unknown epoch {offered} (current {held})"


def acquire_partition(
    lease: PartitionLease | None, partition_id: int, node: str, now_ms: int, ttl_ms: int
) -> LeaseDecision:
    """Take a free or expired partition (new epoch), or renew one `node` holds live."""
    if ttl_ms <= 0:
        raise ValueError("ttl_ms must be positive")
    if lease is None:
        return LeaseDecision(True, PartitionLease(partition_id, node, 1, now_ms + ttl_ms))
    if lease.partition_id != partition_id:
        raise ValueError(f"lease is for partition {lease.partition_id}, not {partition_id}")
    if lease.live(now_ms):
        if lease.owner == node:
            return LeaseDecision(True, replace(lease, expires_at_ms=now_ms + ttl_ms))
        return _refuse(lease, f"held by {lease.owner} until {lease.expires_at_ms}")
    return LeaseDecision(True, PartitionLease(partition_id, node, lease.epoch + 1, now_ms + ttl_ms))


def renew_partition(
    lease: PartitionLease, node: str, epoch: int, now_ms: int, ttl_ms: int
) -> LeaseDecision:
    """Extend a live lease; only its owner at the current epoch may."""
    if ttl_ms <= 0:
        raise ValueError("ttl_ms must be positive")
    if lease.owner != node:
        return _refuse(lease, f"not owner (owner is {lease.owner})")
    if epoch != lease.epoch:
        return _refuse(lease, _epoch_reason(lease.epoch, epoch))
    if now_ms >= lease.expires_at_ms:
        return _refuse(lease, f"expired at {lease.expires_at_ms}")
    return LeaseDecision(True, replace(lease, expires_at_ms=now_ms + ttl_ms))


def release_partition(lease: PartitionLease, node: str, epoch: int) -> LeaseDecision:
    """Give a partition up (graceful shutdown, rebalance); the epoch is kept, the next
    acquire increments it."""
    if lease.owner != node:
        return _refuse(lease, f"not owner (owner is {lease.owner})")
    if epoch != lease.epoch:
        return _refuse(lease, _epoch_reason(lease.epoch, epoch))
    return LeaseDecision(True, replace(lease, owner=None, expires_at_ms=0))


def fenced_write_allowed(lease: PartitionLease, node: str, epoch: int, now_ms: int) -> bool:
    """May `node`, believing it holds `epoch`, write to this partition now?"""
    return lease.owner == node and lease.epoch == epoch and now_ms < lease.expires_at_ms


# ---------------------------------------------------------------------------
# Run lease


class RunStatus(StrEnum):
    # pending: committed, its message published (or about to be) and not yet claimed. No
    # status records the publish itself: that write cost a row version per run, and the
    # reaper proves a message lost from the workers' progress instead (kit.core.recovery).
    pending = "pending"
    running = "running"  # a worker holds its lease (it starts the task at the run's second)
    succeeded = "succeeded"
    retry_scheduled = "retry_scheduled"
    dead = "dead"
    skipped = "skipped"
    cancelled = "cancelled"


CLAIMABLE = frozenset({RunStatus.pending})
# Runs that keep their job busy for the overlap policy (forbid, queue, replace): a run
# awaiting its retry is one of them, or the retry would run beside the next fire.
BUSY = frozenset({RunStatus.pending, RunStatus.running, RunStatus.retry_scheduled})
TERMINAL = frozenset({RunStatus.succeeded, RunStatus.dead, RunStatus.skipped, RunStatus.cancelled})


@dataclass(frozen=True)
class RunLease:
    run_id: str
    attempt: int
    status: RunStatus
    token: str | None = None
    worker: str | None = None
    expires_at_ms: int | None = None
    retry_at_ms: int | None = None  # set while retry_scheduled


@dataclass(frozen=True)
class Transition:
    accepted: bool
    run: RunLease
    reason: str | None = None
    event: str | None = None  # the TRANSITIONS event applied (None when refused)


@dataclass(frozen=True)
class TransitionRule:
    source: RunStatus
    event: str
    target: RunStatus
    guard: str


_S = RunStatus
TRANSITIONS: tuple[TransitionRule, ...] = (
    TransitionRule(_S.pending, "claim", _S.running, "attempt matches; new token"),
    TransitionRule(_S.running, "heartbeat", _S.running, "token matches; lease not expired"),
    TransitionRule(
        _S.running, "release", _S.running, "token matches; lease ends now (worker stopping)"
    ),
    TransitionRule(_S.running, "return", _S.pending, "token matches; its task never started"),
    TransitionRule(
        _S.running, "preempt", _S.pending, "token matches; stopped for a paid run; same attempt"
    ),
    TransitionRule(_S.running, "finish_ok", _S.succeeded, "token matches"),
    TransitionRule(
        _S.running, "finish_retry", _S.retry_scheduled, "token matches; failed; retry_at given"
    ),
    TransitionRule(_S.running, "finish_dead", _S.dead, "token matches; failed; no retry_at"),
    TransitionRule(_S.running, "expire", _S.pending, "lease expired; attempt + 1"),
    TransitionRule(_S.running, "expire_dead", _S.dead, "lease expired; attempts exhausted"),
    TransitionRule(_S.retry_scheduled, "retry_due", _S.pending, "now >= retry_at"),
    TransitionRule(_S.pending, "cancel", _S.cancelled, "not started"),
    TransitionRule(_S.retry_scheduled, "cancel", _S.cancelled, "not started"),
    TransitionRule(_S.running, "cancel", _S.cancelled, "replace overlap; worker told to stop"),
)
_RULES = {(r.source, r.event): r.target for r in TRANSITIONS}


def _move(run: RunLease, event: str, **changes: Any) -> Transition:
    target = _RULES.get((run.status, event))
    if target is None:
        return Transition(False, run, f"cannot {event} a {run.status.value} run")
    return Transition(True, replace(run, status=target, **changes), None, event)


def _no(run: RunLease, reason: str) -> Transition:
    return Transition(False, run, reason)


def claim_run(
    run: RunLease,
    worker: str,
    token: str,
    attempt: int,
    now_ms: int,
    ttl_ms: int,
    due_ms: int | None = None,
) -> Transition:
    """A worker takes the run (ahead of its second, to start it then). A duplicate
    delivery finds it running and claims nothing. The lease runs `ttl_ms` past the later
    of now and the run's due time: a run claimed ahead needs no heartbeat before it is
    due (at a sustained rate, heartbeats of every run held ahead cost the database more
    than the runs), and a dead worker's run is recovered as long after its second as
    one that died running."""
    if ttl_ms <= 0:
        raise ValueError("ttl_ms must be positive")
    if run.status not in CLAIMABLE:
        return _no(run, f"not claimable: status is {run.status.value}")
    if attempt != run.attempt:
        return _no(run, f"attempt mismatch: run is at {run.attempt}, claim is for {attempt}")
    return _move(
        run,
        "claim",
        token=token,
        worker=worker,
        expires_at_ms=max(now_ms, now_ms if due_ms is None else due_ms) + ttl_ms,
        retry_at_ms=None,
    )


def heartbeat_run(run: RunLease, token: str, now_ms: int, ttl_ms: int) -> Transition:
    """Extend the lease (never shorten it); only the current token, only before it expired."""
    if ttl_ms <= 0:
        raise ValueError("ttl_ms must be positive")
    if run.status is not RunStatus.running:
        return _no(run, f"not running: status is {run.status.value}")
    if token != run.token:
        return _no(run, "stale token")
    if run.expires_at_ms is not None and now_ms >= run.expires_at_ms:
        return _no(run, f"lease expired at {run.expires_at_ms}")
    # never shortens a lease granted to a run claimed ahead of its second
    return _move(run, "heartbeat", expires_at_ms=max(now_ms + ttl_ms, run.expires_at_ms or 0))


def fence_margin_ms(ttl_ms: int, kill_grace_ms: int) -> int:
    """How long before its confirmed lease ends a worker stops a run (the fence): time for
    a command's process group to get SIGTERM, then SIGKILL after the grace, and a second
    more, all before the lease ends and the reaper may give the run to another worker;
    never more than a quarter of a short lease."""
    return min(kill_grace_ms + 1000, ttl_ms // 4)


@dataclass(frozen=True)
class BeatRule:
    """How a worker's heartbeat thread keeps its leases: it looks every `tick_ms` and
    renews, in one statement, the leases that would end within `horizon_ms`
    (`beat_wanted`). A stall of the database shorter than `stall_ms` (whatever its
    moment) never brings a lease to the fence."""

    tick_ms: int
    horizon_ms: int
    stall_ms: int


def beat_rule(ttl_ms: int, beat_ms: int, fence_margin_ms: int) -> BeatRule:
    """The thread looks every sixteenth of a beat (a second at most) and renews a lease
    once it has less than ttl - beat + margin + 4 ticks left.

    Why: the database may stop answering at any moment, for a while, and come back (a
    stall: a beat sent into it hangs until it ends). A lease renewed a beat ago has
    ttl - beat left in the database; a stall shorter than that ends before it does, so
    the run must not be given back. The worker fences a run the margin before its
    confirmed lease ends, so it must hold ttl - beat + margin at every instant: the look
    that finds less than the horizon renews it, and between looks pass a tick and the
    last beat's statement, with the renewing beat's own still in flight: three slow
    beats (each allowed a tick) and a tick. A failed beat is retried a tick later, not
    a whole beat (tests/unit/test_core_leases.py, a stall at any moment shorter than
    ttl - beat never reaches the fence; tests/integration/test_worker_safety.py on a
    real worker).

    With the defaults (ttl 30 s, beat 10 s, margin 3 s, tick 625 ms) the horizon is
    25.5 s: a running lease is renewed about every 5 s, and a lease granted a ttl past
    its run's second is not renewed in the 4.5 s after it, so the beats in a storm's
    first seconds renew none of the thousands of leases held for it. With the drills'
    (ttl 4 s, beat 1.33 s, margin 1 s) the horizon is the whole ttl: every lease is
    renewed every tick (83 ms). When the margin and four ticks exceed a beat, the
    stall survived is ttl - margin - 4 ticks, less than ttl - beat (`stall_ms`)."""
    if ttl_ms <= 0 or beat_ms <= 0:
        raise ValueError("ttl_ms and beat_ms must be positive")
    tick = max(1, min(1000, beat_ms // 16))
    return BeatRule(
        tick_ms=tick,
        horizon_ms=ttl_ms - beat_ms + fence_margin_ms + 4 * tick,
        stall_ms=max(0, ttl_ms - max(beat_ms, fence_margin_ms + 4 * tick)),
    )


def beat_wanted(
    started: bool,
    confirmed_until_ms: int,
    deadline_ms: int | None,
    now_ms: int,
    horizon_ms: int,
) -> bool:
    """Whether a worker's next heartbeat extends this run's lease: only a lease that
    would end within `horizon_ms` (`beat_rule`). At a 50,000-run burst a beat just
    after the second that renewed every held lease renewed ~25,000 with 30 s left each
    while the second's starts waited on the worker's lock; beating thousands held ahead
    cost the database more than running them. A run waiting for a slot keeps its lease
    like any other. A started run is beaten until its task's timeout and the time to stop
    it have passed (`deadline_ms`), and not after: the lease follows the task's timeout, so
    a task that will not stop does not keep its run from the reaper for as long as the
    worker lives."""
    if started and deadline_ms is not None and now_ms > deadline_ms:
        return False
    return confirmed_until_ms < now_ms + horizon_ms


def release_run(run: RunLease, token: str, now_ms: int) -> Transition:
    """A stopping worker gives a run back unfinished: its lease ends now, so the reaper's
    next pass re-queues it (attempt + 1) like any expired one."""
    if run.status is not RunStatus.running:
        return _no(run, f"not running: status is {run.status.value}")
    if token != run.token:
        return _no(run, "stale token")
    return _move(run, "release", expires_at_ms=now_ms - 1)


def return_run(run: RunLease, token: str, started: bool) -> Transition:
    """A worker gives back a run it claimed ahead of its second and never started (it is
    stopping, or could not confirm the lease in time): pending again at the same attempt,
    since no attempt was made, to be published again."""
    if run.status is not RunStatus.running:
        return _no(run, f"not running: status is {run.status.value}")
    if token != run.token:
        return _no(run, "stale token")
    if started:
        return _no(run, "its task started: release it instead (the attempt counts)")
    return _move(run, "return", token=None, worker=None, expires_at_ms=None)


def preempt_run(run: RunLease, token: str) -> Transition:
    """A worker stopped the run's task to give its slot to a paid tenant's run
    (kit.core.preemption): pending again at the same attempt, started or not. The attempt
    was cut short by the fleet, not failed by the task, so it costs nothing of the run's
    retry budget; to be published again."""
    if run.status is not RunStatus.running:
        return _no(run, f"not running: status is {run.status.value}")
    if token != run.token:
        return _no(run, "stale token")
    return _move(run, "preempt", token=None, worker=None, expires_at_ms=None)


def finish_run(
    run: RunLease, token: str, succeeded: bool, now_ms: int, retry_at_ms: int | None
) -> Transition:
    """Record the outcome, only for the current token.

    A finish after the lease's expiry is still accepted while the token matches: the
    reaper has not re-queued the run (that would have cleared the token), so no one
    else can hold it, and accepting saves a needless re-run.
    """
    if run.status is not RunStatus.running:
        return _no(run, f"not running: status is {run.status.value}")
    if token != run.token:
        return _no(run, "stale token")
    released = {"token": None, "expires_at_ms": None}
    if succeeded:
        return _move(run, "finish_ok", **released)
    if retry_at_ms is not None:
        return _move(
            run, "finish_retry", attempt=run.attempt + 1, retry_at_ms=retry_at_ms, **released
        )
    return _move(run, "finish_dead", **released)


def expire_run(run: RunLease, now_ms: int, max_attempts: int | None = None) -> Transition:
    """The reaper's move: a running run whose lease expired goes back to pending with
    the next attempt (or dead, when `max_attempts` is given and is used up)."""
    if run.status is not RunStatus.running:
        return _no(run, f"not running: status is {run.status.value}")
    if run.expires_at_ms is not None and now_ms < run.expires_at_ms:
        return _no(run, f"lease live until {run.expires_at_ms}")
    released = {"token": None, "worker": None, "expires_at_ms": None}
    if max_attempts is not None and run.attempt >= max_attempts:
        return _move(run, "expire_dead", **released)
    return _move(run, "expire", attempt=run.attempt + 1, **released)


def retry_due_run(run: RunLease, now_ms: int) -> Transition:
    """A scheduled retry whose time has come becomes pending again (to be published)."""
    if run.status is not RunStatus.retry_scheduled:
        return _no(run, f"not awaiting retry: status is {run.status.value}")
    if run.retry_at_ms is not None and now_ms < run.retry_at_ms:
        return _no(run, f"retry not due until {run.retry_at_ms}")
    return _move(run, "retry_due", retry_at_ms=None)


def cancel_run(run: RunLease) -> Transition:
    """Cancel a run that has not finished (a user's cancel, or the replace overlap)."""
    released = {"token": None, "expires_at_ms": None, "retry_at_ms": None}
    return _move(run, "cancel", **released)


# ---------------------------------------------------------------------------
# The partition lease as a table too, for the docs (its functions above implement it;
# kit.core.state_doc renders both tables).

PARTITION_TRANSITIONS: tuple[tuple[str, str, str, str], ...] = (
    ("free", "acquire", "held", "epoch + 1"),
    ("held", "acquire (same node)", "held", "lease live; renews, epoch kept"),
    ("held", "acquire (other node)", "held", "refused while live"),
    ("held", "renew", "held", "owner and epoch match; not expired"),
    ("held", "time passes", "expired", "now >= expires_at"),
    ("expired", "acquire", "held", "any node, epoch + 1 (takeover fences the old owner)"),
    ("held", "release", "free", "owner and epoch match; epoch kept"),
    ("expired", "release", "free", "owner and epoch match; epoch kept"),
)

"""Which running run a worker stops so that a paid run waiting for a slot can start
(paid ahead of free, docs/tenants.md).

A worker's slots are full and a paid tenant's run is due: rather than wait for a slot to
free, it takes one back from a preemptible run (a free tenant's). The preempted run is
stopped as a cancel stops it and goes back to pending at the same attempt: it runs again
later, at no cost to its retry budget. The rules, each held by
tests/unit/test_preemption.py and tests/property/test_preemption_props.py:

- never while a slot is free: the free slot goes to the paid run first;
- never a paid run, never one already told to stop, never one already preempted as
  often as its tenant's bound allows (`max_preemptions`: its work is not thrown away
  again and again while paid runs keep coming); such a run still holds its slot;
- only for the paid runs the next slots would go to, in the fair queue's order (tier,
  then paid before free): a free run waiting in a more urgent tier takes the next slot
  first, so preempting for a paid one behind it would only free a slot for that free run;
- one preemption per such paid run at most, less the slots already being taken back for
  them (a run told to stop still holds its slot until its task has ended);
- a paid run takes a slot only from a run of its own tier or a less urgent one; among
  those, the least urgent tier first, then the youngest start, so the least work is lost.

Pure: the start times are given, nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Running:
    """A run holding one of the worker's slots."""

    key: str  # the run's id
    paid: bool  # its tenant's class: a paid run is never preempted
    tier: int  # its tier's rank, 0 the most urgent (kit.core.dispatch.tier_rank)
    started_ms: int  # when its task began
    stopping: bool = False  # already told to stop for a waiting paid run
    preemptions: int = 0  # times the run was preempted before (on any worker)
    max_preemptions: int | None = None  # its tenant's bound on those; None: no bound

    @property
    def preemptible(self) -> bool:
        """A free run not yet told to stop, preempted fewer times than its bound."""
        if self.paid or self.stopping:
            return False
        return self.max_preemptions is None or self.preemptions < self.max_preemptions


@dataclass(frozen=True)
class Waiting:
    """A due run waiting for a slot (one whose tenant is at a limit is not given: it
    could not take a freed slot)."""

    paid: bool
    tier: int


def waiting_of(groups: Iterable[tuple[bool, int, int]], slots: int) -> list[Waiting]:
    """The waiting runs `to_preempt` needs, from (paid, tier, runs) per tenant and tier:
    each paid run up to the slots (no more can be served), one run per free group (a free
    run waiting in a more urgent tier takes the next slot: one stands for all of them)."""
    return [
        Waiting(paid, tier) for paid, tier, n in groups for _ in range(min(n, slots) if paid else 1)
    ]


def to_preempt(slots: int, running: Sequence[Running], waiting: Sequence[Waiting]) -> list[str]:
    """The keys of the runs to stop now. `slots`: the worker's slots of this kind, free
    or held."""
    if slots > len(running):
        return []
    claimants: list[int] = []  # the tiers of the paid runs the next slots go to
    for w in sorted(waiting, key=lambda w: (w.tier, not w.paid)):
        if not w.paid:
            break  # this free run takes the next slot: none further is preempted for
        claimants.append(w.tier)
    claimants = claimants[sum(1 for r in running if r.stopping) :]
    # least urgent tier first, then the youngest start; the key breaks ties
    candidates = sorted(
        (r for r in running if r.preemptible),
        key=lambda r: (-r.tier, -r.started_ms, r.key),
    )
    # The freed slots go to the first claimants in order, so preempt for the longest
    # prefix of them that can each have a run of its tier or a less urgent one. The k
    # least urgent candidates serve a prefix of k if they do when both are matched most
    # restrictive first (the sets of runs each may take are nested); a shorter prefix is
    # served whenever a longer one is, so the longest is found by bisection.
    lo, hi = 0, min(len(claimants), len(candidates))
    while lo < hi:
        k = (lo + hi + 1) // 2
        wanted = sorted(claimants[:k], reverse=True)
        if all(candidates[i].tier >= wanted[i] for i in range(k)):
            lo = k
        else:
            hi = k - 1
    return [r.key for r in candidates[:lo]]

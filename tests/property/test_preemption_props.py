"""kit.core.preemption.to_preempt over any worker's slots and waiting runs:
- never a paid run, never one already stopping, never one preempted as often as its
  bound allows, no run twice; a run at its bound is decided on as a paid run is (it
  holds its slot, it is not taken);
- never while a slot is free;
- never more than the paid runs waiting ahead of every free one, less those stopping;
- each run preempted is of a tier no more urgent than some waiting paid run's;
- the runs kept, of the tiers preempted from, are never younger than those stopped
  (the least work is lost)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.preemption import Running, Waiting, to_preempt

tiers = st.integers(0, 3)
bounds = st.one_of(st.none(), st.integers(0, 3))


def spent(r: Running) -> bool:
    """Preempted as often as its bound allows."""
    return r.max_preemptions is not None and r.preemptions >= r.max_preemptions


@st.composite
def worker(draw: st.DrawFn) -> tuple[int, list[Running], list[Waiting]]:
    n = draw(st.integers(0, 8))
    running = [
        Running(
            f"r{i}",
            draw(st.booleans()),
            draw(tiers),
            draw(st.integers(0, 50)),
            draw(st.booleans()),
            draw(st.integers(0, 4)),
            draw(bounds),
        )
        for i in range(n)
    ]
    slots = n + draw(st.sampled_from([0, 0, 0, 1, 2]))
    waiting = draw(st.lists(st.builds(Waiting, st.booleans(), tiers), max_size=10))
    return slots, running, waiting


@settings(max_examples=500, deadline=None)
@given(worker())
def test_preemption_rules_hold(case: tuple[int, list[Running], list[Waiting]]) -> None:
    slots, running, waiting = case
    got = to_preempt(slots, running, waiting)
    by_key = {r.key: r for r in running}
    assert len(got) == len(set(got))
    chosen = [by_key[k] for k in got]
    assert not any(r.paid or r.stopping or spent(r) for r in chosen)
    if slots > len(running):
        assert got == []
    ahead = 0
    for w in sorted(waiting, key=lambda w: (w.tier, not w.paid)):
        if not w.paid:
            break
        ahead += 1
    stopping = sum(r.stopping for r in running)
    assert len(got) <= max(0, ahead - stopping)
    paid_tiers = [w.tier for w in waiting if w.paid]
    assert all(any(r.tier >= t for t in paid_tiers) for r in chosen)
    for r in chosen:
        kept = [k for k in running if not (k.paid or k.stopping or spent(k) or k.key in got)]
        assert not any(k.tier == r.tier and k.started_ms > r.started_ms for k in kept)


@settings(max_examples=300, deadline=None)
@given(worker())
def test_a_full_worker_of_free_runs_serves_every_paid_run_it_can(
    case: tuple[int, list[Running], list[Waiting]],
) -> None:
    """With only free runs of one tier and paid runs of that tier waiting, every paid run
    gets a run stopped for it, up to the slots (nothing stopping yet)."""
    _slots, running, _waiting = case
    running = [Running(r.key, False, 2, r.started_ms, preemptions=r.preemptions) for r in running]
    for n_paid in range(len(running) + 2):
        got = to_preempt(len(running), running, [Waiting(True, 2)] * n_paid)
        assert len(got) == min(n_paid, len(running))


def _longest_served_prefix(running: list[Running], waiting: list[Waiting]) -> int:
    """By brute force: the most of the paid runs the next slots go to (in order, less
    those already being served) that can each have a distinct free run of its tier or a
    less urgent one."""
    claimants: list[int] = []
    for w in sorted(waiting, key=lambda w: (w.tier, not w.paid)):
        if not w.paid:
            break
        claimants.append(w.tier)
    claimants = claimants[sum(r.stopping for r in running) :]
    free = sorted((r.tier for r in running if not (r.paid or r.stopping or spent(r))), reverse=True)
    best = 0
    for k in range(1, min(len(claimants), len(free)) + 1):
        wanted = sorted(claimants[:k], reverse=True)
        if all(free[i] >= wanted[i] for i in range(k)):  # greedy matching is exact here
            best = k
    return best


@settings(max_examples=500, deadline=None)
@given(worker())
def test_as_many_runs_are_stopped_as_the_paid_runs_ahead_can_use(
    case: tuple[int, list[Running], list[Waiting]],
) -> None:
    """Neither fewer (a paid run left waiting behind a full worker) nor more (a run
    stopped for nobody) than the longest prefix of the paid runs ahead that free runs
    can serve, each with a run of its tier or a less urgent one."""
    slots, running, waiting = case
    got = to_preempt(slots, running, waiting)
    expected = 0 if slots > len(running) else _longest_served_prefix(running, waiting)
    assert len(got) == expected, (running, waiting, got)


@settings(max_examples=500, deadline=None)
@given(worker())
def test_a_run_at_its_bound_is_decided_on_as_a_paid_run(
    case: tuple[int, list[Running], list[Waiting]],
) -> None:
    """The bound only takes runs out of the candidates: the same decision as with each
    run at its bound marked paid (still holding its slot), and the same as with no bound
    on the others; the lowest-value candidate left still goes first."""
    slots, running, waiting = case
    got = to_preempt(slots, running, waiting)
    as_paid = [
        replace(r, paid=True) if spent(r) else replace(r, max_preemptions=None) for r in running
    ]
    assert got == to_preempt(slots, as_paid, waiting)

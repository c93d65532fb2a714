"""kit.core.preemption.to_preempt over any worker's slots and waiting runs:
- never a paid run, never one already stopping, no run twice;
- never while a slot is free;
- never more than the paid runs waiting ahead of every free one, less those stopping;
- each run preempted is of a tier no more urgent than some waiting paid run's;
- the runs kept, of the tiers preempted from, are never younger than those stopped
  (the least work is lost)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.preemption import Running, Waiting, to_preempt

tiers = st.integers(0, 3)


@st.composite
def worker(draw: st.DrawFn) -> tuple[int, list[Running], list[Waiting]]:
    n = draw(st.integers(0, 8))
    running = [
        Running(
            f"r{i}", draw(st.booleans()), draw(tiers), draw(st.integers(0, 50)), draw(st.booleans())
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
    assert not any(r.paid or r.stopping for r in chosen)
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
        kept = [k for k in running if not (k.paid or k.stopping or k.key in got)]
        assert not any(k.tier == r.tier and k.started_ms > r.started_ms for k in kept)


@settings(max_examples=300, deadline=None)
@given(worker())
def test_a_full_worker_of_free_runs_serves_every_paid_run_it_can(
    case: tuple[int, list[Running], list[Waiting]],
) -> None:
    """With only free runs of one tier and paid runs of that tier waiting, every paid run
    gets a run stopped for it, up to the slots (nothing stopping yet)."""
    _slots, running, _waiting = case
    running = [Running(r.key, False, 2, r.started_ms) for r in running]
    for n_paid in range(len(running) + 2):
        got = to_preempt(len(running), running, [Waiting(True, 2)] * n_paid)
        assert len(got) == min(n_paid, len(running))

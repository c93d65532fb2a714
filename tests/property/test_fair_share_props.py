"""kit.core.fair_share.FairQueue driven as a worker drives it: runs arrive, slots free,
each free slot takes what `pop` gives. Over any sequence of arrivals and completions:
- the weighted share: over any stretch in which two tenants of a lane both wait (and may
  start), |starts_i / w_i - starts_j / w_j| <= 1/w_i + 1/w_j (SFQ's bound, one start per
  unit of weight: `test_backlogged_tenants_keep_their_weighted_share`);
- no run waits while a slot is free and its tenant may start (work-conserving);
- a more urgent tier first, then paid before free, whatever arrived first;
- a tenant at its running limit never runs more than it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.fair_share import (
    MAX_LAPS,
    FairQueue,
    TenantGate,
    fair_order,
    goes_round,
    held_share,
    holds,
    worker_part,
    worker_rate,
)

TENANTS = ["a", "b", "c", "d"]


@dataclass(frozen=True)
class Run:
    tenant: str
    tier: int
    paid: bool
    seq: int


weights = st.sampled_from([0.5, 1.0, 2.0, 3.0, 7.5])


@settings(max_examples=300, deadline=None)
@given(
    ws=st.lists(weights, min_size=2, max_size=4),
    joins=st.lists(st.integers(0, 60), min_size=4, max_size=4),
    picks=st.integers(50, 300),
)
def test_backlogged_tenants_keep_their_weighted_share(
    ws: list[float], joins: list[int], picks: int
) -> None:
    """Tenants join at any start (then always have runs waiting); from the moment two are
    both waiting, their starts per unit of weight differ by at most 1/w_i + 1/w_j at every
    start after it."""
    names = TENANTS[: len(ws)]
    w = dict(zip(names, ws, strict=True))
    join = {n: (0 if i == 0 else joins[i]) for i, n in enumerate(names)}
    q: FairQueue[Run] = FairQueue()
    seq = 0
    starts: list[str] = []
    for step in range(picks):
        for n in names:
            if join[n] == step:
                for _ in range(picks):  # never runs out
                    seq += 1
                    q.push(Run(n, 0, False, seq), n, 0, w[n], False)
        got = q.pop()
        assert got is not None
        starts.append(got.tenant)
    for i in names:
        for j in names:
            if i >= j:
                continue
            since = max(join[i], join[j])
            n_i = n_j = 0
            for t in starts[since:]:
                n_i += t == i
                n_j += t == j
                assert abs(n_i / w[i] - n_j / w[j]) <= 1 / w[i] + 1 / w[j] + 1e-9, (i, j)


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(
                st.just("arrive"),
                st.sampled_from(TENANTS),
                st.integers(0, 3),
                st.integers(1, 6),
            ),
            st.tuples(st.just("finish"), st.integers(0, 50), st.just(0), st.just(0)),
        ),
        max_size=80,
    ),
    slots=st.integers(1, 6),
    caps=st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=4, max_size=4),
    paid=st.lists(st.booleans(), min_size=4, max_size=4),
    ws=st.lists(weights, min_size=4, max_size=4),
)
def test_any_sequence_of_arrivals_and_completions(
    ops: list[tuple[str, object, int, int]],
    slots: int,
    caps: list[int | None],
    paid: list[bool],
    ws: list[float],
) -> None:
    cap = dict(zip(TENANTS, caps, strict=True))
    is_paid = dict(zip(TENANTS, paid, strict=True))
    w = dict(zip(TENANTS, ws, strict=True))
    q: FairQueue[Run] = FairQueue()
    gate = TenantGate()
    waiting: list[Run] = []  # the model: what the queue holds
    running: list[Run] = []
    seq = 0

    def startable(tenant: str) -> bool:
        return gate.refusal(tenant, cap[tenant], None, 0) is None

    def fill() -> None:
        while len(running) < slots:
            got = q.pop(startable)
            if got is None:
                break
            # the most urgent (tier, class) of the runs that may start
            may = [r for r in waiting if startable(r.tenant)]
            assert (got.tier, not got.paid) == min((r.tier, not r.paid) for r in may)
            waiting.remove(got)
            running.append(got)
            gate.started(got.tenant, None, 0)
            assert cap[got.tenant] is None or gate.running[got.tenant] <= cap[got.tenant]
        # work-conserving: a free slot left only when nothing waiting may start
        if len(running) < slots:
            assert not [r for r in waiting if startable(r.tenant)]
        assert len(q) == len(waiting)

    for op, a, b, c in ops:
        if op == "arrive":
            tenant = str(a)
            for _ in range(c):
                seq += 1
                run = Run(tenant, b, is_paid[tenant], seq)
                waiting.append(run)
                q.push(run, tenant, b, w[tenant], is_paid[tenant])
        elif running:
            done = running.pop(int(str(a)) % len(running))
            gate.finished(done.tenant)
        fill()
    per = Counter(r.tenant for r in running)
    for tenant, n in per.items():
        assert cap[tenant] is None or n <= cap[tenant]


def test_a_tenant_held_at_its_limit_banks_no_credit() -> None:
    """While `a` is at its limit `b` takes every slot; once `a` may start again it gets its
    share from then on, not a burst owed for the time it waited."""
    q: FairQueue[str] = FairQueue()
    for i in range(100):
        q.push(f"a{i}", "a", 0, 1.0, False)
        q.push(f"b{i}", "b", 0, 1.0, False)
    for _ in range(40):
        got = q.pop(lambda t: t != "a")
        assert got is not None and got.startswith("b")
    after = [q.pop() for _ in range(20)]
    assert sum(1 for x in after if x and x.startswith("a")) <= 11


def test_a_rate_limit_refills() -> None:
    gate = TenantGate()
    assert gate.refusal("a", None, 2.0, 0) is None
    gate.started("a", 2.0, 0)
    gate.started("a", 2.0, 0)
    assert gate.refusal("a", None, 2.0, 0) == "max_starts_per_s"
    assert gate.refusal("a", None, 2.0, 499) == "max_starts_per_s"
    assert gate.refusal("a", None, 2.0, 500) is None


def test_the_workers_part_of_a_fleet_limit() -> None:
    assert worker_part(None, 3) is None
    assert worker_part(0, 3) == 0  # nothing is a real limit
    assert worker_part(10, 3) == 4  # rounded up
    assert worker_part(2, 5) == 1  # at least one each
    assert worker_part(7, 0) == 7  # no live workers read yet: this one


def test_a_tenant_alone_holds_half_the_budget_and_shares_by_weight() -> None:
    assert held_share(1000, 1.0, []) == 500
    assert held_share(1000, 3.0, [1.0]) == 600
    assert held_share(1000, 1.0, [3.0]) == 200
    assert held_share(1, 1.0, [1.0]) == 1


@settings(max_examples=300, deadline=None)
@given(
    runs=st.lists(st.tuples(st.sampled_from(TENANTS), st.integers(0, 2)), min_size=0, max_size=60),
    ws=st.lists(weights, min_size=4, max_size=4),
    paid=st.sets(st.sampled_from(TENANTS)),
)
def test_a_batch_in_fair_order_is_the_order_a_queue_starts_it(
    runs: list[tuple[str, int]], ws: list[float], paid: set[str]
) -> None:
    """fair_order (the task loop's handover) agrees with FairQueue.pop over a batch that
    arrives at once: one rule of who goes first, in two shapes."""
    w = dict(zip(TENANTS, ws, strict=True))
    batch = [Run(t, tier, t in paid, i) for i, (t, tier) in enumerate(runs)]
    q: FairQueue[Run] = FairQueue()
    for r in batch:
        q.push(r, r.tenant, r.tier, w[r.tenant], r.paid)
    popped = [q.pop() for _ in batch]
    ordered = fair_order(
        batch, lambda r: r.tenant, lambda r: r.tier, w.__getitem__, paid.__contains__
    )
    if len({r.tenant for r in batch}) < 2:
        assert ordered == batch  # one tenant: arrival order, as before
    else:
        assert ordered == popped


def test_a_run_goes_round_fewer_than_max_laps_times() -> None:
    """The liveness bound on send-backs (the worker-cut drill): a run sent round MAX_LAPS
    times is held the next time, whatever its tenant holds (each edge spelled out: a
    drawn `laps` missed 2, and `<=` survived mutation)."""
    assert MAX_LAPS == 2
    assert [goes_round(n) for n in (0, 1, 2, 3, 1_000)] == [True, True, False, False, False]


def test_the_workers_part_of_a_fleet_rate() -> None:
    """A fleet-wide start rate split over the live workers (none read yet: this one)."""
    assert worker_rate(None, 3) is None
    assert worker_rate(6.0, 3) == 2.0
    assert worker_rate(6.0, 1) == 6.0
    assert worker_rate(6.0, 0) == 6.0


@pytest.mark.parametrize("weight", [0.0, -1.0])
def test_a_weight_of_zero_or_less_is_refused_saying_so(weight: float) -> None:
    q: FairQueue[str] = FairQueue()
    with pytest.raises(ValueError) as caught:
        q.push("r", "a", 0, weight, False)
    assert str(caught.value) == "weight must be greater than 0"
    assert len(q) == 0


def test_a_tenant_finishing_its_last_run_leaves_nothing_behind() -> None:
    """The running count never goes below nothing: a finish with none running (a run
    started before a restart of the gate) leaves no entry, and the last one removes it."""
    gate = TenantGate()
    gate.finished("a")
    assert gate.running == {}
    gate.started("a", None, 0)
    gate.started("a", None, 0)
    gate.finished("a")
    assert gate.running == {"a": 1}
    gate.finished("a")
    assert gate.running == {}
    assert gate.refusal("a", 1, None, 0) is None


def test_a_rate_bucket_holds_one_seconds_starts_and_never_refills_backwards() -> None:
    """A rate of 0.5 a second still allows one start at once (the bucket holds at least
    one); a clock read earlier than the last does not add tokens."""
    gate = TenantGate()
    assert gate.refusal("a", None, 0.5, 10_000) is None
    gate.started("a", 0.5, 10_000)
    assert gate.refusal("a", None, 0.5, 10_000) == "max_starts_per_s"
    assert gate.refusal("a", None, 0.5, 5_000) == "max_starts_per_s"  # earlier: no refill
    assert gate.refusal("a", None, 0.5, 11_999) == "max_starts_per_s"
    assert gate.refusal("a", None, 0.5, 12_000) is None


def test_a_tenant_just_served_waits_behind_a_newcomer() -> None:
    """A tenant whose queue emptied keeps its finish tag: back a moment later it comes
    after a tenant that has had nothing yet, though it pushed first (losing the tag
    gives `a` the slot again)."""
    q: FairQueue[str] = FairQueue()
    q.push("a1", "a", 0, 1.0, False)
    assert q.pop() == "a1"
    q.push("a2", "a", 0, 1.0, False)
    q.push("b1", "b", 0, 1.0, False)
    assert [q.pop(), q.pop(), q.pop()] == ["b1", "a2", None]


def test_a_lane_past_the_tags_it_keeps_still_serves_a_newcomer_first() -> None:
    """The 1,025th emptied tenant makes the lane drop the tags it no longer needs (those
    not ahead of its virtual time): the lane and the tag just kept stay, so a tenant
    just served still comes after a newcomer."""
    q: FairQueue[str] = FairQueue()
    for i in range(1_025):
        q.push(f"r{i}", f"t{i}", 0, 1.0, False)
        assert q.pop() == f"r{i}"
    q.push("again", "t1024", 0, 1.0, False)
    q.push("new", "fresh", 0, 1.0, False)
    assert [q.pop(), q.pop()] == ["new", "again"]


def test_a_tenant_whose_class_changed_counts_its_runs_in_both_lanes() -> None:
    q: FairQueue[str] = FairQueue()
    q.push("r1", "a", 0, 1.0, True)
    q.push("r2", "a", 0, 1.0, False)
    q.push("r3", "a", 1, 1.0, False)
    assert q.waiting() == {(0, "a"): 2, (1, "a"): 1}


def test_a_start_with_no_question_asked_first_still_spends_a_token() -> None:
    """`started` opens the tenant's bucket itself when no refusal was asked first."""
    gate = TenantGate()
    gate.started("a", 1.0, 1_000)
    assert gate.refusal("a", None, 1.0, 1_000) == "max_starts_per_s"
    assert gate.refusal("a", None, 1.0, 2_000) is None


def test_a_drained_queue_gives_every_waiting_run_once_and_is_empty() -> None:
    """A stopping worker gives back what waits: every run of every lane, then nothing."""
    q: FairQueue[str] = FairQueue()
    q.push("a1", "a", 0, 1.0, True)
    q.push("a2", "a", 0, 1.0, True)
    q.push("b1", "b", 2, 1.0, False)
    assert sorted(q.drain()) == ["a1", "a2", "b1"]
    assert len(q) == 0 and q.pop() is None and q.waiting() == {}


def test_a_run_is_held_under_its_tenants_share_or_after_its_laps() -> None:
    """The worker's one rule for a tenant's run, read again or just claimed: held while the
    tenant's backlog is under its share, sent round at the share, held anyway once it
    has gone round MAX_LAPS times (each edge spelled out)."""
    assert [holds(b, 5, 0) for b in (0, 4, 5, 6)] == [True, True, False, False]
    assert [holds(9, 5, laps) for laps in (1, 2, 3)] == [False, True, True]
    assert holds(0, 1, 0) and not holds(1, 1, 1)

"""The task loop's places handed by fair share (kit.worker.shares.FairSlots): the order in
which waiting runs get a place, a tenant's limit on this worker, and a waiter that gives
up. The worker's own use of them is in tests/integration/test_worker_fair_share.py."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from kit.core.fair_share import FairQueue
from kit.core.tenancy import TenantClass, TenantLimits, TenantsPolicy
from kit.worker.shares import OTHER, FairSlots, Shares, TenantMetrics


def _slots(places: int, policy: TenantsPolicy) -> tuple[FairSlots[tuple[str, int]], Shares]:
    shares = Shares(lambda: policy, lambda: 1, TenantMetrics(CollectorRegistry()))
    return FairSlots(places, shares, lambda r: r[0], lambda _r: "normal"), shares


async def _order(policy: TenantsPolicy, runs: list[tuple[str, int]], places: int) -> list:
    """Each run takes a place, holds it for one turn of the loop, gives it back."""
    slots, _ = _slots(places, policy)
    got: list[tuple[str, int]] = []

    async def one(run: tuple[str, int]) -> None:
        await slots.acquire(run)
        got.append(run)
        await asyncio.sleep(0)
        slots.release(run)

    await asyncio.gather(*(one(r) for r in runs))
    return got


def test_a_place_that_frees_goes_to_the_next_tenant_not_the_next_arrival() -> None:
    runs = [("a", i) for i in range(8)] + [("b", 0), ("b", 1)]
    got = asyncio.run(_order(TenantsPolicy(), runs, 1))
    tenants = [t for t, _ in got]
    assert tenants.index("b") <= 2 and tenants[:5].count("b") == 2, tenants


def test_paid_before_free_whatever_came_first() -> None:
    policy = TenantsPolicy(tenants={"p": TenantLimits(tenant_class=TenantClass.paid)})
    runs = [("f", i) for i in range(5)] + [("p", 0), ("p", 1)]
    got = asyncio.run(_order(policy, runs, 1))
    assert [t for t, _ in got][:3] == ["f", "p", "p"]  # the first took the free place


def test_a_tenant_at_its_running_limit_waits_while_others_take_free_places() -> None:
    async def scene() -> tuple[list[str], int]:
        policy = TenantsPolicy(tenants={"a": TenantLimits(max_running=1)})
        slots, shares = _slots(3, policy)
        await slots.acquire(("a", 0))
        second = asyncio.ensure_future(slots.acquire(("a", 1)))
        await asyncio.sleep(0)
        await slots.acquire(("b", 0))  # a free place, and b is not limited
        held = [] if second.done() else ["a waits"]
        slots.release(("a", 0))
        await asyncio.wait_for(second, 1)
        limited = shares.metrics.limited.labels("a", "max_running")._value.get()
        return held, int(limited)

    held, limited = asyncio.run(scene())
    assert held == ["a waits"]
    assert limited >= 1


def test_a_waiter_that_gives_up_takes_no_place() -> None:
    async def scene() -> int:
        slots, _ = _slots(1, TenantsPolicy())
        await slots.acquire(("a", 0))
        waiter = asyncio.ensure_future(slots.acquire(("b", 0)))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        slots.release(("a", 0))
        await slots.acquire(("c", 0))  # the freed place, not lost to the cancelled waiter
        return slots.free

    assert asyncio.run(scene()) == 0


def test_tenant_labels_are_bounded() -> None:
    shares = Shares(
        lambda: TenantsPolicy(tenants={"named": TenantLimits()}),
        lambda: 1,
        TenantMetrics(CollectorRegistry()),
    )
    labels = {shares.label(f"t{i}") for i in range(100)}
    assert len(labels) == 33 and OTHER in labels
    assert shares.label("named") == "named"  # named in the policy: always its own


def test_the_runs_a_preemption_may_be_for_leave_out_a_tenant_at_its_limit() -> None:
    """kit.worker.worker.Worker._preempt counts only runs that could take a freed slot: a
    paid tenant at its running limit on this worker would leave the slot to another."""
    policy = TenantsPolicy(
        tenants={
            "capped": TenantLimits(tenant_class=TenantClass.paid, max_running=1),
            "open": TenantLimits(tenant_class=TenantClass.paid),
        }
    )
    shares = Shares(lambda: policy, lambda: 1, TenantMetrics(CollectorRegistry()))
    queue: FairQueue[str] = FairQueue()
    for tenant in ("capped", "capped", "open"):
        shares.push(queue, tenant, tenant, "normal", policy)
    assert sorted(shares.waiting_startable(queue)) == [("capped", 2, 2), ("open", 2, 1)]
    assert shares.try_start("capped")  # one of its runs runs: it is at its limit
    assert shares.waiting_startable(queue) == [("open", 2, 1)]


def test_an_admitted_run_is_started_only_when_a_place_is_its_and_in_fair_order() -> None:
    """A due batch of one tenant does not become a batch of tasks: each run is started
    when its place comes, and another tenant's run admitted last is started second."""

    async def scene() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        slots, _ = _slots(1, TenantsPolicy())
        started: list[tuple[str, int]] = []
        runs = [("bench", i) for i in range(50)] + [("quiet", 0)]
        for run in runs:
            slots.admit(run, lambda r=run: started.append(r))
        at_once = list(started)
        for _ in range(3):
            slots.release(started[-1])
        return at_once, started

    at_once, started = asyncio.run(scene())
    assert at_once == [("bench", 0)]  # one place: one run started, 50 wait without a task
    assert ("quiet", 0) in started[1:3], started
    assert len(started) == 4


def test_an_admitted_run_holds_its_place_until_released() -> None:
    async def scene() -> tuple[int, bool]:
        slots, _ = _slots(1, TenantsPolicy())
        slots.admit(("a", 0), lambda: None)
        waiter = asyncio.ensure_future(slots.acquire(("b", 0)))
        await asyncio.sleep(0)
        blocked = not waiter.done()
        slots.release(("a", 0))
        await asyncio.wait_for(waiter, 1)
        return slots.free, blocked

    free, blocked = asyncio.run(scene())
    assert blocked and free == 0


def test_the_holders_of_places_are_known_for_preemption_to_take_one_back() -> None:
    """Every way to a place (admitted at once, handed one later, acquired) makes the run
    a holder; releasing it (the same object) makes it none."""

    async def scene() -> list[list[tuple[str, int]]]:
        slots, _ = _slots(2, TenantsPolicy())
        a, b, c, d = ("a", 0), ("b", 0), ("c", 0), ("d", 0)
        seen = []
        slots.admit(a, lambda: None)  # a free place: at once
        await slots.acquire(b)
        seen.append(slots.holders())
        slots.admit(c, lambda: None)  # waits
        waiter = asyncio.ensure_future(slots.acquire(d))
        await asyncio.sleep(0)
        seen.append(slots.holders())
        slots.release(a)  # to c, admitted first
        seen.append(slots.holders())
        slots.release(b)  # to d
        await asyncio.wait_for(waiter, 1)
        seen.append(slots.holders())
        slots.release(c)
        slots.release(d)
        seen.append(slots.holders())
        return seen

    a, b, c, d = ("a", 0), ("b", 0), ("c", 0), ("d", 0)
    assert asyncio.run(scene()) == [[a, b], [a, b], [b, c], [c, d], []]

"""The lag sampler: one broker read at a time on its own thread, at most one per period,
whatever the number of callers; a stale sample is answered at once while the next is
taken; a broker error is said, not raised, and the sampler goes on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from kit.api.lag_sampler import LagSampler
from kit.transport.lag import TierLag

LAG = [TierLag("normal", "cronfleet.runs.normal", 3, 1)]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Broker:
    """A read that blocks until released, counting the reads."""

    def __init__(self) -> None:
        self.reads = 0
        self.release = threading.Event()
        self.fail = False

    def __call__(self) -> list[TierLag]:
        self.reads += 1
        assert self.release.wait(30)
        if self.fail:
            raise RuntimeError("broker down")
        return [TierLag("normal", "cronfleet.runs.normal", self.reads, 1)]


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded: 10 s) for the sampler's thread to get there."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the sampler's thread did not get there in 10 s")


def test_many_callers_one_read_then_the_sample_until_it_is_stale() -> None:
    clock, broker = Clock(), Broker()
    sampler = LagSampler(broker, every_s=5, clock=clock)

    async def scenario() -> None:
        waiting = [asyncio.ensure_future(sampler.latest()) for _ in range(50)]
        await until(lambda: broker.reads > 0)
        assert broker.reads == 1 and not any(w.done() for w in waiting)  # the first waits
        broker.release.set()
        first = await asyncio.gather(*waiting)
        assert {id(s) for s in first} == {id(first[0])} and first[0].tiers[0].lag == 1
        clock.now += 4.9
        assert (await sampler.latest()) is first[0] and broker.reads == 1  # fresh enough
        clock.now += 0.2
        broker.release.clear()
        stale = await asyncio.gather(*(sampler.latest() for _ in range(20)))
        assert all(s is first[0] for s in stale)  # answered at once, the next one started
        await until(lambda: broker.reads > 1)
        assert broker.reads == 2
        broker.release.set()
        await until(lambda: sampler.samples_taken == 2)
        assert (await sampler.latest()).tiers[0].lag == 2

    asyncio.run(scenario())
    sampler.close()


def test_a_broker_error_is_said_and_the_next_read_happens() -> None:
    clock, broker = Clock(), Broker()
    broker.fail = True
    broker.release.set()
    sampler = LagSampler(broker, every_s=5, clock=clock)

    async def scenario() -> None:
        failed = await sampler.latest()
        assert failed.tiers == [] and failed.error == "RuntimeError: broker down"
        broker.fail = False
        clock.now += 5
        await sampler.latest()  # starts the next read
        await until(lambda: sampler.samples_taken == 2)
        recovered = await sampler.latest()
        assert recovered.error is None and recovered.tiers[0].lag == 2

    asyncio.run(scenario())
    sampler.close()

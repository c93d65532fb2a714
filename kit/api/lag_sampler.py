"""The workers' consumer lag, read from the broker by one sampler per API process.

Reading the lag builds a Kafka admin client and a consumer per tier (kit.transport.lag):
tens of milliseconds and a thread blocked on the broker each time. Done per request, a
flood of fleet requests filled the API's thread pool and slowed every tenant. Here it is
done on the sampler's own thread, at most once per `every_s` and never twice at once,
whatever the request rate: a request gets the latest sample (with its age) and, when
that sample is stale, starts the next one without waiting for it. Only the very first
request of a process waits for a sample. `tests/unit/test_api_lag_sampler.py`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kit.transport.lag import TierLag

LAG_SAMPLE_S = 5.0


@dataclass(frozen=True)
class LagSample:
    tiers: list[TierLag]
    error: str | None  # why the broker could not be read, if it could not
    at: datetime  # when it was taken (wall clock, for the answer)
    taken: float = field(repr=False)  # the sampler's clock, to judge staleness


class LagSampler:
    """`sample()` (the broker read) on its own thread, at most once per `every_s`."""

    def __init__(
        self,
        sample: Callable[[], list[TierLag]],
        every_s: float = LAG_SAMPLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sample = sample
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: LagSample | None = None
        self._running: Future[LagSample] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lag-sampler")
        self.samples_taken = 0

    async def latest(self) -> LagSample:
        """The latest sample; a stale one starts the next in the background."""
        with self._lock:
            latest = self._latest
            stale = latest is None or self._clock() - latest.taken >= self._every_s
            if stale and self._running is None:
                self._running = self._executor.submit(self._take)
            running = self._running
        if latest is not None:
            return latest
        assert running is not None
        return await asyncio.wrap_future(running)

    def _take(self) -> LagSample:
        began = self._clock()
        try:
            tiers, error = self._sample(), None
        except Exception as exc:  # the broker's, whatever its kind: said in the answer
            tiers, error = [], f"{type(exc).__name__}: {exc}"
        sample = LagSample(tiers, error, datetime.now(UTC), began)
        with self._lock:
            self._latest = sample
            self._running = None
            self.samples_taken += 1
        return sample

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

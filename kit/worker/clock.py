"""The database's clock, as a worker sees it through its own monotonic clock.

Time that decides correctness is the database's (docs/design.md): a run must not start before
its second by that clock, whatever the scheduler node's or the worker's own clock says.
Each sample is (monotonic before the query, database time, monotonic after); the query
read the database clock somewhere in between, so `db - after` is a LOWER bound of the
offset. Keeping the largest recent lower bound means the estimate of the database's time
is never ahead of it: a run can start a few milliseconds late, never early. Only recent
samples count (the worker takes one a second, ten are kept): the two clocks may drift
apart (NTP slews at most 0.05 %, 5 ms in ten seconds).
"""

from __future__ import annotations

from collections import deque


class DbClock:
    def __init__(self, keep: int = 10) -> None:
        self._bounds: deque[float] = deque(maxlen=keep)  # recent lower bounds, ms

    def observe(self, sent_s: float, db_ms: float, received_s: float) -> None:
        if received_s < sent_s:
            raise ValueError("received_s must not be before sent_s")
        self._bounds.append(db_ms - received_s * 1000)

    @property
    def known(self) -> bool:
        return bool(self._bounds)

    def db_ms(self, monotonic_s: float) -> float:
        """The database's time at this monotonic instant, never overestimated."""
        if not self._bounds:
            raise RuntimeError("no sample of the database clock yet")
        return monotonic_s * 1000 + max(self._bounds)

    def monotonic_s(self, db_ms: float) -> float:
        """The monotonic instant by which the database's clock has surely reached db_ms."""
        if not self._bounds:
            raise RuntimeError("no sample of the database clock yet")
        return (db_ms - max(self._bounds)) / 1000

"""`next_fire` remembered: a scan's fires share a handful of schedules, so each cron
schedule's fire times are computed once per window of time and looked up for every job
and instant that falls in it, instead of one croniter walk per fire.

Exact, not approximate: a window of a cron schedule holds every fire time in
(start, end] (`kit.core.schedule.fires_in`, which yields what iterating `next_fire`
yields, DST rule included), so the first fire after an instant in [start, end) is the
first of those after it, or else the first fire after `end` (one `next_fire`, kept with
the window). Interval and one-off schedules are arithmetic in epoch milliseconds, as
`next_fire` does it with datetimes. tests/property/test_fire_table_props.py holds
`FireTable.next_ms` equal to `next_fire` over the expressions, zones and instants the API
accepts.

Pure: instants are arguments; the table only remembers what it computed. Bounded: when
it holds `max_windows` windows it starts again empty.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from datetime import UTC, datetime

from kit.core.schedule import (
    CronSchedule,
    IntervalSchedule,
    OneOffSchedule,
    Schedule,
    fires_in,
    next_fire,
)
from kit.core.timeutil import from_epoch_ms, to_epoch_ms

WINDOW_MS = 3_600_000  # an hour of a cron schedule's fire times per window
MAX_WINDOWS = 65_536
# The last instant a datetime can hold: `next_fire` answers None past it (OverflowError).
_LAST_MS = to_epoch_ms(datetime.max.replace(tzinfo=UTC))
_UNSET = -1  # a window's first fire after its end, not computed yet


class _Window:
    """A cron schedule's fire times in (start, end], epoch ms, and the first after end."""

    __slots__ = ("after_end_ms", "end_ms", "fires")

    def __init__(self, fires: list[int], end_ms: int) -> None:
        self.fires = fires
        self.end_ms = end_ms
        self.after_end_ms: int | None = _UNSET


class FireTable:
    """The first fire time of a schedule strictly after an instant, in epoch ms, as
    `kit.core.schedule.next_fire` gives it, remembered per cron schedule and window."""

    def __init__(self, window_ms: int = WINDOW_MS, max_windows: int = MAX_WINDOWS) -> None:
        if window_ms <= 0 or max_windows <= 0:
            raise ValueError("window_ms and max_windows must be positive")
        self._window_ms = window_ms
        self._max = max_windows
        self._windows: dict[tuple[CronSchedule, int], _Window] = {}
        self.built = 0  # windows computed (each one a pass of croniter), for tests and metrics

    def next_ms(self, schedule: Schedule, after_ms: int) -> int | None:
        """`to_epoch_ms(next_fire(schedule, from_epoch_ms(after_ms)))`, or None."""
        if isinstance(schedule, CronSchedule):
            return self._next_cron(schedule, after_ms)
        if isinstance(schedule, IntervalSchedule):
            return _next_interval(schedule, after_ms)
        return _next_one_off(schedule, after_ms)

    def next_many(self, schedule: Schedule, after_ms: Iterable[int]) -> dict[int, int | None]:
        """`next_ms` of one schedule for many instants, each distinct instant once."""
        out: dict[int, int | None] = {}
        for t in after_ms:
            if t not in out:
                out[t] = self.next_ms(schedule, t)
        return out

    def _next_cron(self, schedule: CronSchedule, after_ms: int) -> int | None:
        k = after_ms // self._window_ms
        window = self._windows.get((schedule, k))
        if window is None:
            window = self._build(schedule, k)
        fires = window.fires
        i = bisect_right(fires, after_ms)
        if i < len(fires):
            return fires[i]
        if window.after_end_ms == _UNSET:
            nxt = next_fire(schedule, from_epoch_ms(window.end_ms))
            window.after_end_ms = None if nxt is None else to_epoch_ms(nxt)
        return window.after_end_ms

    def _build(self, schedule: CronSchedule, k: int) -> _Window:
        start_ms = k * self._window_ms
        end_ms = start_ms + self._window_ms
        try:
            found = fires_in(schedule, from_epoch_ms(start_ms), from_epoch_ms(end_ms))
        except OverflowError:  # a window at the end of the calendar
            found = []
        if len(self._windows) >= self._max:
            self._windows.clear()
        window = _Window([to_epoch_ms(f) for f in found], end_ms)
        self._windows[(schedule, k)] = window
        self.built += 1
        return window


def _next_interval(schedule: IntervalSchedule, after_ms: int) -> int | None:
    anchor = schedule.anchor
    if anchor.microsecond % 1000:  # not a whole millisecond: let the datetimes decide
        return _by_datetime(schedule, after_ms)
    anchor_ms = to_epoch_ms(anchor)
    if after_ms < anchor_ms:
        return anchor_ms
    step_ms = schedule.every_s * 1000
    nxt = anchor_ms + ((after_ms - anchor_ms) // step_ms + 1) * step_ms
    return nxt if nxt <= _LAST_MS else None


def _next_one_off(schedule: OneOffSchedule, after_ms: int) -> int | None:
    return _by_datetime(schedule, after_ms)


def _by_datetime(schedule: Schedule, after_ms: int) -> int | None:
    nxt = next_fire(schedule, from_epoch_ms(after_ms))
    return None if nxt is None else to_epoch_ms(nxt)

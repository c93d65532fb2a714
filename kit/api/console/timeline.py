"""A job's recent runs as a timeline: one row per run, a tick at its scheduled time and a
bar from start to finish (to now while running), coloured by status. Pure geometry
for an inline SVG the page draws; time runs left to right."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from kit.store.runs import RunRecord

WIDTH = 900
ROW_H = 14
LEFT = 8
RIGHT = 8
TOP = 22  # room for the axis labels


@dataclass(frozen=True)
class Bar:
    run_id: str
    status: str
    y: float
    tick_x: float  # scheduled time
    x: float  # start of the bar (started_at, or the tick when it never started)
    w: float
    title: str


@dataclass(frozen=True)
class Timeline:
    width: int
    height: int
    bars: list[Bar]
    labels: list[tuple[float, str]]  # axis: x, text


def timeline(runs: Sequence[RunRecord], now: datetime) -> Timeline | None:
    """Oldest run at the top; None when there is nothing to draw."""
    if not runs:
        return None
    ordered = sorted(runs, key=lambda r: (r.scheduled_at, r.run_id))
    lo = min(r.scheduled_at for r in ordered)
    hi = max(max(r.finished_at or now, r.scheduled_at) for r in ordered)
    if hi <= lo:
        hi = lo + timedelta(seconds=1)
    span = (hi - lo).total_seconds()
    usable = WIDTH - LEFT - RIGHT

    def x_of(t: datetime) -> float:
        return LEFT + usable * max(0.0, min(1.0, (t - lo).total_seconds() / span))

    bars: list[Bar] = []
    for i, r in enumerate(ordered):
        tick = x_of(r.scheduled_at)
        if r.started_at is not None:
            start = x_of(r.started_at)
            end = x_of(r.finished_at or now)
        else:
            start = end = tick
        title = f"{r.scheduled_at:%Y-%m-%d %H:%M:%S} UTC · {r.shown_status}"
        if r.started_at and r.finished_at:
            title += f" · ran {(r.finished_at - r.started_at).total_seconds():.1f} s"
        bars.append(
            Bar(
                r.run_id, r.shown_status, TOP + i * ROW_H, tick, start, max(2.0, end - start), title
            )
        )
    labels = [
        (x_of(lo + (hi - lo) * k / 4), f"{(lo + (hi - lo) * k / 4):%m-%d %H:%M:%S}")
        for k in range(5)
    ]
    return Timeline(WIDTH, TOP + len(ordered) * ROW_H + 4, bars, labels)

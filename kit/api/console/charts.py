"""The charts page's geometry: series of the run history (kit.store.console_views) drawn
as inline SVG polylines, server-side, with no script and nothing fetched from another
origin. Pure: a series in, coordinates and labels out; time runs left to right."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kit.store.console_views import Series

# range name -> (span, step): at most 96 buckets a chart
RANGES: dict[str, tuple[timedelta, int]] = {
    "15m": (timedelta(minutes=15), 15),
    "1h": (timedelta(hours=1), 60),
    "6h": (timedelta(hours=6), 300),
    "24h": (timedelta(hours=24), 900),
}
WIDTH, HEIGHT = 640, 150
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 22


def chart_range(name: str, now: datetime | None = None) -> tuple[datetime, datetime, int]:
    """[start, end) of the named range ending at the step after now, and its step."""
    span, step = RANGES[name]
    at = now or datetime.now(UTC)
    end_s = math.ceil(at.timestamp() / step) * step
    end = datetime.fromtimestamp(end_s, UTC)
    return end - span, end, step


@dataclass(frozen=True)
class Line:
    name: str
    css: str
    points: str  # "x,y x,y ..." (gaps where a value is missing split the line)
    last: str  # the last value, for the legend


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str
    lines: list[Line]
    y_ticks: list[tuple[float, str]]
    x_labels: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * power:
            return m * power
    return 10 * power  # pragma: no cover - the loop always returns


def _label(value: float) -> str:
    return f"{value:g}" if value >= 1 or value == 0 else f"{value:.2g}"


def chart(
    key: str,
    title: str,
    unit: str,
    buckets: list[datetime],
    lines: list[tuple[str, str, list[float | None]]],
) -> Chart:
    """One chart of several lines over the same buckets (None: no value there)."""
    values = [v for _, _, vs in lines for v in vs if v is not None]
    top = _nice_max(max(values, default=0.0))
    n = max(1, len(buckets) - 1)
    usable_w, usable_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + usable_w * i / n

    def y(v: float) -> float:
        return TOP + usable_h * (1 - v / top)

    drawn = []
    for name, css, vs in lines:
        runs: list[list[str]] = [[]]
        for i, v in enumerate(vs):
            if v is None:
                runs.append([])
            else:
                runs[-1].append(f"{x(i):.1f},{y(v):.1f}")
        # a polyline per unbroken stretch, joined by a move ("M") in one path; a lone
        # point is drawn as a dot (a zero-length segment with round caps)
        path = " ".join("M" + " L".join(r if len(r) > 1 else r * 2) for r in runs if r)
        last = next((v for v in reversed(vs) if v is not None), None)
        drawn.append(Line(name, css, path, "–" if last is None else _label(round(last, 3))))
    ticks = [(y(top * k / 4), _label(top * k / 4)) for k in range(5)]
    step = max(1, len(buckets) // 4)
    labels = [(x(i), f"{buckets[i]:%H:%M}") for i in range(0, len(buckets), step)]
    return Chart(key, title, unit, drawn, ticks, labels)


def charts_of(series: Series) -> list[Chart]:
    b = series.buckets
    per = f"per {series.step_s} s" if series.step_s < 60 else f"per {series.step_s // 60} min"
    return [
        chart(
            "runs",
            f"Runs started and attempts failed, {per}",
            "runs",
            b,
            [
                ("started", "l-started", [float(v) for v in series.started]),
                ("failed", "l-failed", [float(v) for v in series.failed]),
            ],
        ),
        chart(
            "lag",
            "Start lag p99 per tier (first attempts)",
            "s",
            b,
            [(t, f"l-{t}", series.lag_p99_s.get(t, [])) for t in series.tiers],
        ),
        chart(
            "backlog",
            "Backlog: runs due and not started",
            "runs",
            b,
            [("backlog", "l-backlog", [float(v) for v in series.backlog])],
        ),
    ]

"""The suites' plots (matplotlib, written beside summary.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def rate_plot(
    path: Path, series: Mapping[str, Sequence[float]], origin: float, ylabel: str
) -> None:
    """Events per second over time (seconds from `origin`), one line per series."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for label, times in series.items():
        if not times:
            continue
        counts: dict[int, int] = {}
        for t in times:
            second = int(t - origin)
            counts[second] = counts.get(second, 0) + 1
        xs = list(range(min(counts), max(counts) + 1))
        ax.plot(xs, [counts.get(x, 0) for x in xs], label=label, drawstyle="steps-post")
    ax.set_xlabel("seconds from the start")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def lag_plots(
    path: Path,
    lags_s: Mapping[str, Sequence[float]],
    offsets_s: Mapping[str, Sequence[float]],
    target_s: float,
    title: str,
) -> None:
    """Left: how many runs began (or were published) per 100 ms around the due second T.
    Right: the cumulative distribution of each lag, with the p99 target."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, offsets in offsets_s.items():
        if not offsets:
            continue
        lo, hi = min(min(offsets), -1.0), max(offsets) + 0.1
        bins = [lo + 0.1 * i for i in range(int((hi - lo) / 0.1) + 2)]
        left.hist(offsets, bins=bins, histtype="step", label=label)
    left.axvline(0, color="grey", linestyle=":")
    left.set_xlabel("seconds after T")
    left.set_ylabel("runs per 100 ms")
    left.legend()
    left.grid(alpha=0.3)
    for label, lags in lags_s.items():
        if not lags:
            continue
        ordered = sorted(lags)
        n = len(ordered)
        right.plot(ordered, [(i + 1) / n for i in range(n)], label=label)
    right.axvline(target_s, color="red", linestyle="--", label=f"target p99 {target_s:g} s")
    right.axhline(0.99, color="grey", linestyle=":")
    right.set_xlabel("lag after the scheduled time (s)")
    right.set_ylabel("fraction of runs")
    right.legend()
    right.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

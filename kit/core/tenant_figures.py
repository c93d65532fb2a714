"""Per-tenant figures a worker reports with its presence row, and their sum over the
fleet (the operator's fleet view). Pure: every instant is an argument.

A worker's figures for one tenant label, over the last WINDOW_S:
- `started`: runs started (a count over the window, not a rate; a worker younger than
  the window counts since it started);
- `limited`: times a free slot passed over the tenant's runs for its limit;
- `waiting_share` / `waiting_limit`: due runs waiting now, for the others' turn or at
  the tenant's own limit (the worker's gauges when it reported);
- `lag_p99_s`: the nearest-rank p99 of the start lags of first attempts started in the
  window, at most the latest LAG_SAMPLES of them (None: none started).

Fleet-wide, counts are summed over the live workers and the lag is the largest of their
p99s (not a merged p99: a bound from above, the worst worker's tail).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kit.core.durations import quantile

WINDOW_S = 60.0
LAG_SAMPLES = 2048  # per tenant label: the window's p99 is of at most this many latest


class LagWindow:
    """The start lags of the last `window_s`, per tenant label, at most `samples` each.
    Not thread-safe: the caller holds a lock."""

    def __init__(self, window_s: float = WINDOW_S, samples: int = LAG_SAMPLES) -> None:
        self.window_s = window_s
        self.samples = samples
        self._lags: dict[str, deque[tuple[float, int]]] = {}

    def add(self, label: str, at_s: float, lag_s: float) -> None:
        lags = self._lags.get(label)
        if lags is None:
            lags = self._lags[label] = deque(maxlen=self.samples)
        lags.append((at_s, max(0, round(lag_s * 1000))))

    def p99_s(self, now_s: float) -> dict[str, float]:
        """Each label's p99 over the window ending at `now_s`; labels with none in it
        are dropped (so the map holds only tenants started lately)."""
        out: dict[str, float] = {}
        since = now_s - self.window_s
        for label in list(self._lags):
            lags = self._lags[label]
            while lags and lags[0][0] < since:
                lags.popleft()
            if not lags:
                del self._lags[label]
                continue
            out[label] = quantile([ms for _, ms in lags], 0.99) / 1000
        return out


class CountWindow:
    """Counts over the last `window_s` from running totals: totals noted at each report
    (`note`) and the change since the latest noted at least `window_s` ago (or the
    first, taken at zero when the worker started)."""

    def __init__(self, started_s: float, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._noted: deque[tuple[float, dict[str, float]]] = deque([(started_s, {})])

    def note(self, now_s: float, totals: Mapping[str, float]) -> dict[str, int]:
        """Record `totals` at `now_s`; the change of each label over the window."""
        since = now_s - self.window_s
        while len(self._noted) > 1 and self._noted[1][0] <= since:
            self._noted.popleft()
        base = self._noted[0][1]
        self._noted.append((now_s, dict(totals)))
        return {k: int(v - base.get(k, 0.0)) for k, v in totals.items()}


@dataclass(frozen=True)
class TenantFigure:
    tenant: str
    started: int
    waiting_share: int
    waiting_limit: int
    limited: int
    lag_p99_s: float | None


def worker_figures(
    started: Mapping[str, int],
    limited: Mapping[str, int],
    waiting: Mapping[tuple[str, str], float],
    lag_p99_s: Mapping[str, float],
) -> dict[str, dict[str, Any]]:
    """One worker's report (the presence row's `tenants`): the labels with anything in
    the window or waiting now; `waiting` is keyed (label, reason), reason `share` or a
    limit's name."""
    share: dict[str, int] = {}
    limit: dict[str, int] = {}
    for (label, reason), n in waiting.items():
        into = share if reason == "share" else limit
        into[label] = into.get(label, 0) + int(n)
    labels = {
        label for counts in (started, limited, share, limit) for label, n in counts.items() if n > 0
    } | set(lag_p99_s)
    return {
        label: {
            "started": started.get(label, 0),
            "waiting_share": share.get(label, 0),
            "waiting_limit": limit.get(label, 0),
            "limited": limited.get(label, 0),
            "lag_p99_s": lag_p99_s.get(label),
        }
        for label in sorted(labels)
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def fleet_figures(reports: Iterable[Mapping[str, Any] | None]) -> list[TenantFigure]:
    """The live workers' reports summed per tenant (lag: the largest p99), by tenant. A
    field of the wrong type (a worker of another version) counts as nothing."""
    sums: dict[str, list[int]] = {}
    lags: dict[str, float | None] = {}
    for report in reports:
        for tenant, fig in (report or {}).items():
            if not isinstance(fig, Mapping):
                continue
            acc = sums.setdefault(tenant, [0, 0, 0, 0])
            for i, key in enumerate(("started", "waiting_share", "waiting_limit", "limited")):
                acc[i] += _count(fig.get(key))
            lag = fig.get("lag_p99_s")
            lags.setdefault(tenant, None)
            if isinstance(lag, int | float) and not isinstance(lag, bool):
                before = lags[tenant]
                lags[tenant] = float(lag) if before is None else max(before, float(lag))
    return [
        TenantFigure(t, sums[t][0], sums[t][1], sums[t][2], sums[t][3], lags[t])
        for t in sorted(sums)
    ]

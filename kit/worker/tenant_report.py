"""The per-tenant figures a worker writes with its presence row (kit.store.worker_link),
for the operator's fleet view: what kit.core.tenant_figures describes, read from the
tenant metrics /metrics shows (so the two never disagree) plus a window of start lags.

Runs started and limited are the labelled counters' change over the window, read at
each presence beat: nothing is added where runs start. Start lags are observed where
the fleet-wide lag is (off the task loop's starting path); `lag` takes a lock held for
one append. The labels are the tenant metrics' (kit.worker.shares.Shares.label), so a
report holds at most the policy's tenants, MAX_TENANT_LABELS others and `_other`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from kit.core.tenant_figures import CountWindow, LagWindow, worker_figures
from kit.worker.shares import TenantMetrics


def _totals(metric: MetricWrapperBase, name: str) -> dict[tuple[str, ...], float]:
    """A labelled metric's samples named `name`, by label values."""
    out: dict[tuple[str, ...], float] = {}
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sample.labels.values())] = sample.value
    return out


def _by_tenant(totals: dict[tuple[str, ...], float]) -> dict[str, float]:
    """Summed over every label but the first (the tenant's)."""
    out: dict[str, float] = {}
    for labels, value in totals.items():
        out[labels[0]] = out.get(labels[0], 0.0) + value
    return out


class TenantReport:
    """Thread-safe: `lag` from the threads that observe lags, `report` from the link's."""

    def __init__(self, metrics: TenantMetrics, clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        now = clock()
        self._lags = LagWindow()
        self._started = CountWindow(now)
        self._limited = CountWindow(now)

    def lag(self, label: str, lag_s: float) -> None:
        """A first attempt of `label`'s started `lag_s` after its time: the histogram and
        the window."""
        self.lags([(label, lag_s)])

    def lags(self, lags: list[tuple[str, float]]) -> None:
        """Many lags (label, seconds) at once: each label's histogram child looked up
        once, the window's lock taken once."""
        children: dict[str, Any] = {}
        histogram = self.metrics.start_lag
        for label, lag_s in lags:
            child = children.get(label)
            if child is None:
                child = children[label] = histogram.labels(label)
            child.observe(max(0.0, lag_s))
        at = self._clock()
        with self._lock:
            for label, lag_s in lags:
                self._lags.add(label, at, lag_s)

    def report(self) -> dict[str, dict[str, Any]]:
        """The figures now, per tenant label (the presence row's `tenants`)."""
        m = self.metrics
        started = _by_tenant(_totals(m.started, "cronfleet_worker_tenant_started_total"))
        limited = _by_tenant(_totals(m.limited, "cronfleet_worker_tenant_limited_total"))
        waiting = _totals(m.waiting, "cronfleet_worker_tenant_waiting")
        now = self._clock()
        with self._lock:
            lags = self._lags.p99_s(now)
            started_n = self._started.note(now, started)
            limited_n = self._limited.note(now, limited)
        return worker_figures(
            started_n,
            limited_n,
            {(labels[0], labels[1]): v for labels, v in waiting.items()},
            lags,
        )

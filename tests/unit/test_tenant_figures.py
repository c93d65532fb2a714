"""The per-tenant figures' windows and sums (kit.core.tenant_figures) and a worker's
report of them from its tenant metrics (kit.worker.tenant_report). Time is an argument
throughout: nothing here waits."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from kit.core.tenant_figures import (
    CountWindow,
    LagWindow,
    TenantFigure,
    fleet_figures,
    worker_figures,
)
from kit.worker.shares import TenantMetrics
from kit.worker.tenant_report import TenantReport


def fig(**values: Any) -> dict[str, Any]:
    """One tenant's figures in a report: zero but for `values`."""
    zero = {"started": 0, "waiting_share": 0, "waiting_limit": 0, "limited": 0}
    return {**zero, "lag_p99_s": None, **values}


def test_the_lag_p99_is_of_the_window_only() -> None:
    w = LagWindow(window_s=60)
    for i in range(100):  # 100 lags at t=0: 0.01 .. 1.00 s
        w.add("a", 0.0, (i + 1) / 100)
    w.add("b", 30.0, 2.0)
    assert w.p99_s(59.0) == {"a": 0.99, "b": 2.0}  # nearest rank: the 99th of 100
    assert w.p99_s(61.0) == {"b": 2.0}  # a's lags left the window, and a with them
    assert w.p99_s(91.0) == {}


def test_a_negative_lag_counts_as_zero_and_a_label_keeps_its_latest_samples() -> None:
    w = LagWindow(window_s=60, samples=3)
    w.add("a", 0.0, -0.2)
    assert w.p99_s(1.0) == {"a": 0.0}
    for lag in (9.0, 1.0, 1.0, 1.0):  # 9.0 is pushed out by the three after it
        w.add("a", 1.0, lag)
    assert w.p99_s(2.0) == {"a": 1.0}


def test_counts_are_the_change_over_the_window() -> None:
    c = CountWindow(started_s=0.0, window_s=60)
    assert c.note(5.0, {"a": 3}) == {"a": 3}  # younger than the window: since the start
    assert c.note(30.0, {"a": 10, "b": 1}) == {"a": 10, "b": 1}
    # at 65 the base is the note of 5 s (the latest at least 60 s old)
    assert c.note(65.0, {"a": 12, "b": 1}) == {"a": 9, "b": 1}
    assert c.note(95.0, {"a": 12, "b": 4}) == {"a": 2, "b": 3}  # base: the note of 30 s
    assert c.note(200.0, {"a": 12, "b": 4}) == {"a": 0, "b": 0}


def test_a_workers_figures_hold_the_tenants_with_anything_to_show() -> None:
    got = worker_figures(
        started={"a": 5, "idle": 0},
        limited={"b": 2},
        waiting={("b", "share"): 1, ("b", "max_running"): 2, ("b", "max_starts_per_s"): 1},
        lag_p99_s={"a": 0.25},
    )
    assert got == {
        "a": fig(started=5, lag_p99_s=0.25),
        "b": fig(waiting_share=1, waiting_limit=3, limited=2),
    }


def test_the_fleet_sums_counts_and_takes_the_largest_p99() -> None:
    one = {"a": {"started": 2, "waiting_share": 1, "waiting_limit": 0, "limited": 1,
                 "lag_p99_s": 0.5}}  # fmt: skip
    two = {
        "a": {"started": 3, "waiting_share": 0, "waiting_limit": 4, "limited": 0, "lag_p99_s": 2},
        "b": {"started": 1, "waiting_share": 0, "waiting_limit": 0, "limited": 0,
              "lag_p99_s": None},
    }  # fmt: skip
    assert fleet_figures([one, None, two]) == [
        TenantFigure("a", 5, 1, 4, 1, 2.0),
        TenantFigure("b", 1, 0, 0, 0, None),
    ]


def test_a_malformed_report_counts_for_nothing() -> None:
    odd = {"a": {"started": "7", "limited": True, "lag_p99_s": "slow"}, "b": [1, 2]}
    assert fleet_figures([odd]) == [TenantFigure("a", 0, 0, 0, 0, None)]


def test_a_workers_report_reads_its_tenant_metrics() -> None:
    registry = CollectorRegistry()
    metrics = TenantMetrics(registry)
    now = [100.0]
    report = TenantReport(metrics, clock=lambda: now[0])
    metrics.started.labels("a").inc(4)
    metrics.limited.labels("a", "max_running").inc(2)
    metrics.limited.labels("a", "max_starts_per_s").inc(1)
    metrics.waiting.labels("a", "max_running").set(3)
    metrics.waiting.labels("b", "share").set(5)
    report.lag("a", 0.4)
    assert report.report() == {
        "a": fig(started=4, waiting_limit=3, limited=3, lag_p99_s=0.4),
        "b": fig(waiting_share=5),
    }
    lag_sum = registry.get_sample_value(
        "cronfleet_worker_tenant_start_lag_seconds_sum", {"tenant": "a"}
    )
    assert lag_sum == 0.4  # on /metrics too
    metrics.waiting.labels("a", "max_running").set(0)
    metrics.waiting.labels("b", "share").set(0)
    now[0] = 200.0  # past the window: nothing started since, the lag left it
    assert report.report() == {}


def test_the_largest_p99_wins_whichever_worker_reports_it_first() -> None:
    slow, fast = {"a": fig(started=1, lag_p99_s=3.0)}, {"a": fig(started=1, lag_p99_s=0.5)}
    assert fleet_figures([slow, fast]) == [TenantFigure("a", 2, 0, 0, 0, 3.0)]
    assert fleet_figures([fast, slow]) == [TenantFigure("a", 2, 0, 0, 0, 3.0)]


def test_a_malformed_tenant_leaves_the_reports_other_tenants_counted() -> None:
    report = {"bad": 3, "ok": fig(started=2)}
    assert fleet_figures([report]) == [TenantFigure("ok", 2, 0, 0, 0, None)]


def test_one_start_is_enough_to_be_in_a_workers_report() -> None:
    assert worker_figures(started={"a": 1}, limited={}, waiting={}, lag_p99_s={}) == {
        "a": fig(started=1)
    }


def test_a_lag_exactly_at_the_windows_start_is_still_in_it() -> None:
    window = LagWindow(window_s=60, samples=10)
    window.add("a", 0.0, 0.5)
    assert window.p99_s(60.0) == {"a": 0.5}
    assert window.p99_s(60.001) == {}

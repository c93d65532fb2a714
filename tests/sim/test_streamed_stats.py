"""The streamed statistics against exact ones: percentiles from the log-linear
histograms are within their stated error of the exact order statistics, on a run small
enough to keep every sample, and the histograms merge and split as they claim."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.histogram import (
    RELATIVE_ERROR,
    ZERO_BELOW_MS,
    LagHistogram,
    bucket_of,
    quantiles_of_rows,
)
from sim.stats import MINUTE_MS
from tests.sim.conftest import simulate

QS = (1.0, 50.0, 90.0, 99.0, 99.9, 100.0)


def close(estimate: float | None, exact: float) -> bool:
    """The stated bound: relative error RELATIVE_ERROR, or under ZERO_BELOW_MS."""
    return estimate is not None and abs(estimate - exact) <= max(
        RELATIVE_ERROR * abs(exact), ZERO_BELOW_MS
    )


def exact(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q, method="lower"))


@pytest.mark.parametrize("seed", range(4))
def test_quantiles_within_the_stated_error(seed):
    rng = np.random.default_rng(seed)
    v = np.concatenate(
        [
            rng.lognormal(1, 2.5, 20_000),  # ms to hours
            -rng.exponential(3, 300),  # a node whose clock runs ahead
            np.zeros(50),
            rng.uniform(0, 1e-4, 20),  # under the zero threshold
        ]
    )
    h = LagHistogram()
    h.add(v)
    for q in QS:
        assert close(h.quantile(q), exact(v, q)), q
    assert h.n == v.size and h.hi == v.max() and h.lo == v.min()
    assert h.total == pytest.approx(v.sum())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.floats(min_value=-1e6, max_value=1e8, allow_nan=False, width=64),
        min_size=1,
        max_size=300,
    ),
    st.sampled_from(QS),
)
def test_quantiles_within_error_property(values, q):
    v = np.array(values)
    h = LagHistogram()
    h.add(v)
    assert close(h.quantile(q), exact(v, q))


def test_merge_equals_adding_everything_and_rows_match_single_histograms():
    rng = np.random.default_rng(9)
    parts = [rng.lognormal(2, 1.5, n) for n in (100, 1_000, 5_000)]
    merged = LagHistogram()
    for p in parts:
        h = LagHistogram()
        h.add(p)
        merged.merge(h)
    whole = LagHistogram()
    whole.add(np.concatenate(parts))
    assert np.array_equal(merged.counts, whole.counts)
    assert merged.summary() == whole.summary()
    # per-row quantiles (the per-second and per-minute series) equal one histogram per row
    b = [bucket_of(p) for p in parts]
    b0 = min(int(x.min()) for x in b)
    width = max(int(x.max()) for x in b) - b0 + 1
    rows = np.stack([np.bincount(x - b0, minlength=width) for x in b])
    lo = np.array([p.min() for p in parts])
    hi = np.array([p.max() for p in parts])
    n, q = quantiles_of_rows(rows, b0, (50.0, 99.0), lo, hi)
    for i, p in enumerate(parts):
        h = LagHistogram()
        h.add(p)
        assert n[i] == p.size
        assert q[i, 0] == h.quantile(50.0) and q[i, 1] == h.quantile(99.0)


def test_streamed_percentiles_of_a_model_run_match_the_exact_ones():
    """An overloaded top of the hour (lags from milliseconds to tens of seconds), small
    enough to keep every run's lags: every reported percentile is within the stated
    error of the exact one, for the whole period, per tier, per minute and the peak."""
    m, r = simulate(
        "priority-preemption", "duration_s=150", "peak_at_s=20", seed=3, keep_samples=True
    )
    s = m.stats.sample_arrays()
    lag = s["start_lag"]
    started = ~np.isnan(lag)
    assert started.sum() == r["start_lag_s"]["count"] > 100_000
    lags = lag[started]
    assert lags.max() > 2_000  # the run is overloaded: seconds of lag, not a narrow spike
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9)):
        assert close(m.stats.start.quantile(q), exact(lags, q)), name
        # the report shows the same value in seconds, rounded to 0.1 ms
        assert r["start_lag_s"][name] == round(m.stats.start.quantile(q) / 1000, 4)
    assert r["start_lag_s"]["max"] == pytest.approx(lags.max() / 1000, abs=1e-4)
    for k, h in enumerate(m.stats.start_tier):
        sel = started & (s["tier"] == k)
        if sel.sum():
            for q in (50, 99):
                assert close(h.quantile(q), exact(lag[sel], q)), (k, q)
    # per minute: the p99 series, and the peak window's full histogram
    minute = (s["fire"] // MINUTE_MS).astype(int)
    for mi in np.unique(minute[started]).tolist():
        sel = started & (minute == mi)
        assert close(m.stats.minute["p99"][mi], exact(lag[sel], 99)), mi
        assert m.stats.minute["started"][mi] == sel.sum()
    _, peak, hist = m.stats.busiest
    sel = started & (minute == peak)
    for q in (50, 99, 99.9):
        assert close(hist.quantile(q), exact(lag[sel], q))
    # per second (the plot around the peak)
    sec = (s["fire"] // 1000).astype(int)
    for si in np.unique(sec[started])[::7].tolist():
        sel = started & (sec == si)
        assert close(m.stats.second["p99"][si], exact(lag[sel], 99)), si
    # dispatch lag and queue wait
    d = s["dispatch_lag"][~np.isnan(s["dispatch_lag"])]
    assert close(m.stats.dispatch.quantile(99), exact(d, 99))
    w = s["wait"][started]
    assert close(m.stats.wait.quantile(99), exact(w, 99))

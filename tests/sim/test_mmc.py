"""The worker pool against queueing theory: M/M/c mean wait in queue = Erlang C."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.sim.conftest import simulate

T_995_19 = 2.861  # Student t, 99% two-sided, 19 degrees of freedom


def erlang_c_wait(lam: float, mean_s: float, c: int) -> float:
    a = lam * mean_s
    top = a**c / math.factorial(c) * c / (c - a)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait / (c / mean_s - lam)


@pytest.mark.parametrize(
    ("lam", "mean_s", "c", "duration_s"),
    [(80.0, 0.1, 10, 3000), (15.0, 0.5, 10, 4000), (3.0, 0.25, 1, 6000)],
)
def test_mean_wait_matches_erlang_c(lam, mean_s, c, duration_s):
    m, r = simulate(
        "mmc",
        f"arrival_rate={lam}",
        f"mean_service_s={mean_s}",
        f"workers={c}",
        f"duration_s={duration_s}",
        seed=7,
        keep_samples=True,
    )
    samples = m.stats.sample_arrays()
    waits = samples["wait"] / 1000
    # batch means over 20 consecutive batches of arrivals (after a short warm-up)
    keep = samples["fire"] >= 60_000
    batches = np.array_split(waits[keep], 20)
    means = np.array([b.mean() for b in batches])
    half = T_995_19 * means.std(ddof=1) / math.sqrt(means.size)
    expected = erlang_c_wait(lam, mean_s, c)
    assert abs(means.mean() - expected) <= half, (means.mean(), expected, half)
    assert r["audit"]["dropped"] == 0

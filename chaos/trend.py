"""Is a resource flat? A least-squares slope with its confidence interval, not a look at
a plot. Pure: samples in, verdict out (numpy for the sums).

Samples of a resource over time are autocorrelated (a heap that grows for a minute and
is collected), and ordinary least squares then claims more certainty than it has; so
the interval uses the effective sample size of its residuals' lag-1 autocorrelation
(an AR(1) correction, n (1 - r) / (1 + r)) and Student's t for it. The t quantile comes
from the Cornish-Fisher expansion of the normal one (within 3e-3 from 5 degrees of
freedom, 2e-4 from 10), to need no scipy.

A resource is flat when its slope's interval holds 0, or when even the interval's far
end would grow it by less than `TOLERANCE` of its level over the whole soak: a drift that
small would take more than 20 soaks to double it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Z_975 = 1.959963984540054
TOLERANCE = 0.05


@dataclass(frozen=True)
class Trend:
    n: int
    n_effective: float
    mean: float
    slope_per_h: float  # units per hour
    ci_low_per_h: float
    ci_high_per_h: float
    span_h: float
    flat: bool

    @property
    def growth_pct(self) -> float | None:
        """The slope over the span, as a share of the mean level (None at level 0)."""
        if self.mean == 0:
            return None
        return 100 * self.slope_per_h * self.span_h / abs(self.mean)


def t_quantile_975(df: float) -> float:
    """Student's t 0.975 quantile for `df` degrees of freedom (Cornish-Fisher)."""
    if df <= 0:
        return math.inf
    z = Z_975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def trend(times_s: Sequence[float], values: Sequence[float]) -> Trend | None:
    """The trend of `values` sampled at `times_s` (seconds); None under 4 samples."""
    t = np.asarray(times_s, dtype=float)
    y = np.asarray(values, dtype=float)
    n = len(t)
    if n < 4 or np.ptp(t) == 0:
        return None
    tc = t - t.mean()
    sxx = float((tc**2).sum())
    slope = float((tc * (y - y.mean())).sum() / sxx)
    residuals = y - (y.mean() + slope * tc)
    r = _lag1(residuals)
    n_eff = max(3.0, min(float(n), n * (1 - r) / (1 + r)))
    s2 = float((residuals**2).sum()) / (n - 2)
    se = math.sqrt(s2 / sxx) * math.sqrt((n - 2) / max(n_eff - 2, 1.0))
    half = t_quantile_975(n_eff - 2) * se
    span_h = float(np.ptp(t)) / 3600
    per_h = 3600.0
    low, high = (slope - half) * per_h, (slope + half) * per_h
    mean = float(y.mean())
    far = max(abs(low), abs(high)) * span_h
    flat = low <= 0 <= high or (mean != 0 and far <= TOLERANCE * abs(mean))
    return Trend(n, round(n_eff, 1), mean, slope * per_h, low, high, span_h, flat)


def _lag1(residuals: np.ndarray) -> float:
    """Lag-1 autocorrelation of the residuals, kept in [0, 0.99] (a negative one would
    claim more certainty than the samples' count)."""
    if len(residuals) < 3 or float(residuals.var()) == 0:
        return 0.0
    a, b = residuals[:-1] - residuals.mean(), residuals[1:] - residuals.mean()
    r = float((a * b).sum() / ((residuals - residuals.mean()) ** 2).sum())
    return min(0.99, max(0.0, r))

"""Fixed-size, mergeable histograms of lags (in ms), so a day of 170 million runs costs
the same memory as a minute.

Buckets are log-linear, as in HDR Histogram: each power of two of the magnitude is cut
into 2**SUB_BITS equal sub-buckets, and a value's bucket is read straight from the
float's exponent and top mantissa bits (no logarithm). Negative values (a node whose
clock runs ahead publishes early) mirror the positive ones around a zero bucket.

Error, as the report states it: a quantile is the midpoint of the bucket that holds the
order statistic of rank floor(q (n - 1)) (numpy's `method="lower"`), clamped to the
exact minimum and maximum. For magnitudes in [2**MIN_EXP, 2**MAX_EXP) ms that is within
RELATIVE_ERROR = 2**-(SUB_BITS + 1) = 0.78% of the order statistic; magnitudes under
2**MIN_EXP ms (about 1 µs) count as zero (absolute error under 1 µs); larger ones share
the top bucket (the maximum itself is kept exactly). Counts, sums, minimum and maximum
are exact. Written here rather than taken from a library because it is ~100 lines, must
be vectorised over numpy arrays (tens of millions of values per simulated hour), and the
stated bound is checked by tests/sim/test_streamed_stats.py against exact percentiles.
"""

from __future__ import annotations

import numpy as np

SUB_BITS = 6
MIN_EXP = -10  # 2**-10 ms ~ 1 µs
MAX_EXP = 31  # 2**31 ms ~ 24.9 days
NB = (MAX_EXP - MIN_EXP) << SUB_BITS  # buckets per sign
SIZE = 2 * NB + 1
ZERO = NB
RELATIVE_ERROR = 2.0 ** -(SUB_BITS + 1)
ZERO_BELOW_MS = 2.0**MIN_EXP
QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}

_SHIFT = 52 - SUB_BITS
_BASE = (1023 + MIN_EXP) << SUB_BITS


def _midpoints() -> np.ndarray:
    k = np.arange(NB)
    lower = np.ldexp(1.0 + (k & ((1 << SUB_BITS) - 1)) / (1 << SUB_BITS), MIN_EXP + (k >> SUB_BITS))
    mid = lower + np.ldexp(1.0, MIN_EXP + (k >> SUB_BITS) - SUB_BITS - 1)
    out = np.zeros(SIZE)
    out[ZERO + 1 :] = mid
    out[:ZERO] = -mid[::-1]
    return out


MID = _midpoints()


def bucket_of(values_ms: np.ndarray) -> np.ndarray:
    """Bucket index (0..SIZE-1, increasing with the value) of each value; no NaNs."""
    x = np.ascontiguousarray(values_ms, np.float64)
    if x.size == 0:
        return np.empty(0, np.int64)
    negative = x.min() < 0
    k = ((np.abs(x) if negative else x).view(np.int64) >> _SHIFT) - (_BASE - 1)
    np.clip(k, 0, NB, out=k)
    if negative:
        neg = x < 0
        k[neg] = -k[neg]
    k += ZERO
    return k


def _rank(n: np.ndarray | int | np.int64, q: float) -> np.ndarray:
    return np.floor(q / 100.0 * (np.asarray(n) - 1)).astype(np.int64)


def _value(
    cum: np.ndarray,
    n: np.ndarray | int | np.int64,
    q: float,
    lo: np.ndarray | float,
    hi: np.ndarray | float,
) -> np.ndarray:
    """The order statistic of rank floor(q/100 (n-1)) along the last axis: the midpoint
    of its bucket, clamped to [lo, hi]; the extreme ranks are the exact lo and hi."""
    rank = _rank(n, q)
    j = (cum <= rank[..., None]).sum(axis=-1)
    v = np.minimum(np.maximum(MID[j], lo), hi)
    v = np.where(rank <= 0, lo, v)
    return np.where(rank >= np.asarray(n) - 1, hi, v)


class LagHistogram:
    """Counts per bucket plus exact count, sum, minimum and maximum."""

    __slots__ = ("counts", "hi", "lo", "n", "total")

    def __init__(self) -> None:
        self.counts = np.zeros(SIZE, np.int64)
        self.n = 0
        self.total = 0.0
        self.lo = np.inf
        self.hi = -np.inf

    def add(self, values_ms: np.ndarray, buckets: np.ndarray | None = None) -> None:
        if values_ms.size == 0:
            return
        b = bucket_of(values_ms) if buckets is None else buckets
        self.counts += np.bincount(b, minlength=SIZE)
        self._moments(values_ms.size, float(values_ms.sum()), values_ms.min(), values_ms.max())

    def add_counts(self, counts: np.ndarray, n: int, total: float, lo: float, hi: float) -> None:
        self.counts += counts
        self._moments(n, total, lo, hi)

    def _moments(self, n: int, total: float, lo: float, hi: float) -> None:
        self.n += int(n)
        self.total += total
        self.lo = min(self.lo, float(lo))
        self.hi = max(self.hi, float(hi))

    def merge(self, other: LagHistogram) -> LagHistogram:
        if other.n:
            self.add_counts(other.counts, other.n, other.total, other.lo, other.hi)
        return self

    def quantile(self, q: float) -> float | None:
        """q in [0, 100]; ms; None when empty."""
        if self.n == 0:
            return None
        cum = np.cumsum(self.counts)
        return float(_value(cum, np.int64(self.n), q, self.lo, self.hi))

    def summary(self) -> dict[str, float | int | None]:
        """Quantiles, mean and max in seconds (rounded to 0.1 ms), and the count."""
        out: dict[str, float | int | None] = {}
        for name, q in QUANTILES.items():
            v = self.quantile(q)
            out[name] = None if v is None else round(v / 1000, 4)
        out["max"] = round(self.hi / 1000, 4) if self.n else None
        out["mean"] = round(self.total / self.n / 1000, 4) if self.n else None
        out["count"] = self.n
        return out


def quantiles_of_rows(
    counts: np.ndarray, b0: int, qs: tuple[float, ...], lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of bucket counts (buckets b0, b0+1, ...): the row's count and quantiles
    in ms (NaN for empty rows), by the rule of `LagHistogram.quantile`."""
    cum = np.cumsum(counts, axis=1)
    n = cum[:, -1] if cum.shape[1] else np.zeros(len(counts), np.int64)
    out = np.full((len(counts), len(qs)), np.nan)
    has = n > 0
    if not has.any():
        return n, out
    mid = MID[b0 : b0 + counts.shape[1]]
    c, nh, low, high = cum[has], n[has], lo[has], hi[has]
    for i, q in enumerate(qs):
        rank = _rank(nh, q)
        j = (c <= rank[:, None]).sum(axis=1)
        v = np.minimum(np.maximum(mid[j], low), high)
        v = np.where(rank <= 0, low, v)
        out[has, i] = np.where(rank >= nh - 1, high, v)
    return n, out

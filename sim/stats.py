"""What the model keeps of the runs it retires: mergeable lag histograms (whole period,
per tier, per hour, the busiest and the worst minute), per-minute and per-second
summaries for the plots, and the auditor's counters. Memory is fixed for a given
simulated duration (the series hold one row per second and per minute of fire time,
about 2 MB per simulated day) and does not grow with the number of runs.

A block of runs is folded when none of them can change any more (see
`Model.retire`); a block always holds whole minutes of fire time, so per-minute and
per-second summaries are complete when they are computed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.core import dispatch, invariants
from sim.histogram import (
    RELATIVE_ERROR,
    ZERO_BELOW_MS,
    LagHistogram,
    bucket_of,
    group_extremes,
    grouped_quantiles,
)
from sim.runs import DEAD, LOST, SKIPPED, SUCCEEDED

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
SECOND_CHUNK = 300  # seconds per grouped-quantile pass (bounds its scratch memory)
MAX_VIOLATIONS = 20

COUNTERS = (
    "generated",
    "skipped",
    "fired",
    "started",
    "succeeded",
    "retried",
    "retry_attempts",
    "dead_lettered",
    "dropped",
    "lost_after_start",
    "in_flight_at_end",
    "duplicated",
    "executions",
    "inserted_twice",
    "rows_written",
    "lead_in",
)


class RunStats:
    def __init__(self, duration_ms: int, keep_samples: bool = False) -> None:
        self.n_sec = max(1, -(-duration_ms // 1000))
        self.n_min = max(1, -(-duration_ms // MINUTE_MS))
        self.n_hour = max(1, -(-duration_ms // HOUR_MS))
        tiers = len(dispatch.PRIORITY_TIERS)
        self.start = LagHistogram()
        self.start_censored = LagHistogram()  # + runs not started at the end, at their age
        self.dispatch = LagHistogram()
        self.wait = LagHistogram()
        self.start_tier = [LagHistogram() for _ in range(tiers)]
        self.dispatch_tier = [LagHistogram() for _ in range(tiers)]
        self.hour_start = [LagHistogram() for _ in range(self.n_hour)]
        self.minute = {
            "due": np.zeros(self.n_min, np.int64),
            "started": np.zeros(self.n_min, np.int64),
            "p50": np.full(self.n_min, np.nan),
            "p99": np.full(self.n_min, np.nan),
            "max": np.full(self.n_min, np.nan),
            "wait_sum": np.zeros(self.n_min),
            "wait_n": np.zeros(self.n_min, np.int64),
        }
        self.second = {
            "due": np.zeros(self.n_sec, np.int32),
            "p50": np.full(self.n_sec, np.nan, np.float32),
            "p99": np.full(self.n_sec, np.nan, np.float32),
            "max": np.full(self.n_sec, np.nan, np.float32),
        }
        self.hour_rows = np.zeros(self.n_hour, np.int64)
        self.busiest: tuple[int, int, LagHistogram] | None = None  # (due, minute, hist)
        self.worst: tuple[float, int, LagHistogram] | None = None  # (p99 ms, minute, hist)
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.violations: list[str] = []
        self.samples: dict[str, list[np.ndarray]] | None = (
            {k: [] for k in ("fire", "start_lag", "dispatch_lag", "wait", "tier")}
            if keep_samples
            else None
        )

    # -- folding ---------------------------------------------------------------------------

    def fold(
        self, ids: np.ndarray, c: dict[str, np.ndarray], in_flight: np.ndarray | None = None,
        end_ms: float = 0.0,
    ) -> None:
        """Take a block of retired runs (ids ascending, whole minutes of fire time).
        `in_flight`: at the very end, runs still somewhere in the system (not started
        or not finished); those not started enter `start_censored` at their age."""
        n = ids.size
        if n == 0:
            return
        fire = c["fire"]
        status = c["status"]
        started = ~np.isnan(c["start"])
        fired = ~np.isnan(c["dispatch"])
        skipped = status == SKIPPED
        cnt = self.counts
        cnt["generated"] += n
        cnt["skipped"] += int(skipped.sum())
        cnt["fired"] += int(fired.sum())
        cnt["started"] += int(started.sum())
        cnt["succeeded"] += int((status == SUCCEEDED).sum())
        cnt["dead_lettered"] += int((status == DEAD).sum())
        again = c["attempt"] > 1
        cnt["retried"] += int(again.sum())
        cnt["retry_attempts"] += int((c["attempt"][again] - 1).sum())
        lost = status == LOST
        cnt["dropped"] += int((lost & ~started).sum())
        cnt["lost_after_start"] += int((lost & started).sum())
        cnt["executions"] += int(c["executions"].sum())
        self._check_duplicates(ids, fire, c["effects"])
        twice = int((c["inserts"] > 1).sum())
        if twice:
            cnt["inserted_twice"] += twice
            self._violation(f"{twice} runs inserted twice")
        if in_flight is not None:
            cnt["in_flight_at_end"] += int(in_flight.sum())
        k0 = int(np.searchsorted(fire, 0))
        if k0:  # due in the lead-in: audited above, not part of the period's figures
            cnt["lead_in"] += k0
            c = {name: v[k0:] for name, v in c.items()}
            ids, fire, status = ids[k0:], fire[k0:], status[k0:]
            started, fired, skipped = started[k0:], fired[k0:], skipped[k0:]
            in_flight = None if in_flight is None else in_flight[k0:]
            if ids.size == 0:
                return
        inserted = c["inserts"] >= 1
        cnt["rows_written"] += int(inserted.sum())
        self.hour_rows += np.bincount(
            np.minimum(fire[inserted] // HOUR_MS, self.n_hour - 1), minlength=self.n_hour
        )

        s_fire = fire[started]
        s_lag = c["start"][started] - s_fire
        s_b = bucket_of(s_lag)
        self.start.add(s_lag, s_b)
        self.start_censored.add(s_lag, s_b)
        s_tier = c["tier"][started]
        for k, h in enumerate(self.start_tier):
            m = s_tier == k
            if m.any():
                h.add(s_lag[m], s_b[m])
        d_lag = c["dispatch"][fired] - fire[fired]
        d_b = bucket_of(d_lag)
        self.dispatch.add(d_lag, d_b)
        d_tier = c["tier"][fired]
        for k, h in enumerate(self.dispatch_tier):
            m = d_tier == k
            if m.any():
                h.add(d_lag[m], d_b[m])
        w = c["wait"][started].astype(np.float64)
        has_w = ~np.isnan(w)
        self.wait.add(w[has_w])
        hours = np.minimum(s_fire // HOUR_MS, self.n_hour - 1)
        for h in np.unique(hours).tolist():
            m = hours == h
            self.hour_start[h].add(s_lag[m], s_b[m])
        if in_flight is not None:
            waiting = in_flight & ~started
            age = end_ms - fire[waiting].astype(np.float64)
            self.start_censored.add(age)

        self._minutes(fire, skipped, s_fire, s_lag, s_b, w, has_w)
        self._seconds(fire, skipped, s_fire, s_lag, s_b)
        if self.samples is not None:
            self.samples["fire"].append(fire.copy())
            self.samples["start_lag"].append(
                np.where(started, c["start"] - fire, np.nan).astype(np.float64)
            )
            self.samples["dispatch_lag"].append(
                np.where(fired, c["dispatch"] - fire, np.nan).astype(np.float64)
            )
            self.samples["wait"].append(c["wait"].astype(np.float64))
            self.samples["tier"].append(c["tier"].copy())

    def _minutes(self, fire, skipped, s_fire, s_lag, s_b, w, has_w) -> None:
        m_all = fire // MINUTE_MS
        m0, m1 = int(m_all[0]), int(m_all[-1]) + 1
        k = m1 - m0
        mn = self.minute
        mn["due"][m0:m1] += np.bincount(m_all[~skipped] - m0, minlength=k)
        g = s_fire // MINUTE_MS - m0
        lo, hi = group_extremes(s_lag, g, k)
        n, q = grouped_quantiles(s_b, g, k, (50.0, 99.0), lo, hi)
        mn["started"][m0:m1] += n
        mn["p50"][m0:m1] = q[:, 0]
        mn["p99"][m0:m1] = q[:, 1]
        mn["max"][m0:m1] = hi
        mn["wait_sum"][m0:m1] += np.bincount(g[has_w], weights=w[has_w], minlength=k)
        mn["wait_n"][m0:m1] += np.bincount(g[has_w], minlength=k)
        due = mn["due"][m0:m1]
        top = int(due.argmax())
        if self.busiest is None or due[top] > self.busiest[0]:
            self.busiest = (int(due[top]), m0 + top, self._hist(s_lag, s_b, g == top))
        p99 = q[:, 1]
        if np.isfinite(p99).any():
            bad = int(np.nanargmax(p99))
            if self.worst is None or p99[bad] > self.worst[0]:
                self.worst = (float(p99[bad]), m0 + bad, self._hist(s_lag, s_b, g == bad))

    @staticmethod
    def _hist(lag: np.ndarray, b: np.ndarray, m: np.ndarray) -> LagHistogram:
        h = LagHistogram()
        h.add(lag[m], b[m])
        return h

    def _seconds(self, fire, skipped, s_fire, s_lag, s_b) -> None:
        sec_all = fire // 1000
        s0, s1 = int(sec_all[0]), int(sec_all[-1]) + 1
        se = self.second
        se["due"][s0:s1] += np.bincount(sec_all[~skipped] - s0, minlength=s1 - s0).astype(
            np.int32
        )
        g_all = s_fire // 1000
        for a in range(s0, s1, SECOND_CHUNK):
            b = min(s1, a + SECOND_CHUNK)
            i0, i1 = np.searchsorted(g_all, [a, b])
            g = g_all[i0:i1] - a
            lo, hi = group_extremes(s_lag[i0:i1], g, b - a)
            _, q = grouped_quantiles(s_b[i0:i1], g, b - a, (50.0, 99.0), lo, hi)
            se["p50"][a:b] = q[:, 0]
            se["p99"][a:b] = q[:, 1]
            se["max"][a:b] = hi

    def _check_duplicates(self, ids, fire, effects) -> None:
        dup = np.flatnonzero(effects > 1)
        if dup.size == 0:
            return
        self.counts["duplicated"] += int(dup.size)
        # one run per (job, scheduled time): each successful execution is an applied run;
        # the shared checker flags the first run applied twice
        try:
            invariants.check_unique_runs(
                (int(ids[i]), int(fire[i])) for i in np.repeat(dup, effects[dup].astype(int))
            )
        except invariants.InvariantViolation as exc:
            self._violation(f"duplicated effect: {exc}")

    def _violation(self, text: str) -> None:
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append(text)

    # -- reading -----------------------------------------------------------------------

    def sample_arrays(self) -> dict[str, np.ndarray]:
        if self.samples is None:
            raise RuntimeError("the model was not asked to keep samples")
        return {k: np.concatenate(v) if v else np.empty(0) for k, v in self.samples.items()}

    def hour_table(self, offered: np.ndarray | None = None) -> list[dict[str, Any]]:
        out = []
        for h, hist in enumerate(self.hour_start):
            s = hist.summary()
            row = {
                "hour": h,
                "due": int(offered[h].sum()) if offered is not None else None,
                "started": s["count"],
                "p50_s": s["p50"],
                "p99_s": s["p99"],
                "max_s": s["max"],
                "rows_written": int(self.hour_rows[h]),
            }
            out.append(row)
        return out

    @staticmethod
    def error_note() -> str:
        return (
            f"percentiles from streamed log-linear histograms: within "
            f"{RELATIVE_ERROR * 100:.2f}% of the exact order statistic at rank "
            f"floor(q(n-1)) (values under {ZERO_BELOW_MS * 1000:.1f} µs count as 0); "
            "counts, means and maxima exact"
        )

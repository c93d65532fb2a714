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
    SIZE,
    ZERO,
    LagHistogram,
    bucket_of,
    quantiles_of_rows,
)
from sim.runs import CANCELLED, DEAD, LOST, SKIPPED, SUCCEEDED

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
    "cancelled",
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
        self,
        ids: np.ndarray,
        c: dict[str, np.ndarray],
        in_flight: np.ndarray | None = None,
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
        n_started = int(np.count_nonzero(started))
        by_status = np.bincount(status, minlength=16)
        cnt = self.counts
        cnt["generated"] += n
        cnt["skipped"] += int(by_status[SKIPPED])
        cnt["fired"] += int(np.count_nonzero(fired))
        cnt["started"] += n_started
        cnt["succeeded"] += int(by_status[SUCCEEDED])
        cnt["dead_lettered"] += int(by_status[DEAD])
        cnt["cancelled"] += int(by_status[CANCELLED])
        attempt = c["attempt"]
        if attempt.max() > 1:
            cnt["retried"] += int(np.count_nonzero(attempt > 1))
            cnt["retry_attempts"] += int(attempt.sum(dtype=np.int64)) - n
        if by_status[LOST]:
            lost = status == LOST
            cnt["dropped"] += int(np.count_nonzero(lost & ~started))
            cnt["lost_after_start"] += int(np.count_nonzero(lost & started))
        cnt["executions"] += int(c["executions"].sum(dtype=np.int64))
        if c["effects"].max() > 1:
            self._check_duplicates(ids, fire, c["effects"])
        if c["inserts"].max() > 1:
            twice = int(np.count_nonzero(c["inserts"] > 1))
            cnt["inserted_twice"] += twice
            self._violation(f"{twice} runs inserted twice")
        if in_flight is not None:
            cnt["in_flight_at_end"] += int(np.count_nonzero(in_flight))
        k0 = int(np.searchsorted(fire, 0))
        if k0:  # due in the lead-in: audited above, not part of the period's figures
            cnt["lead_in"] += k0
            c = {name: v[k0:] for name, v in c.items()}
            ids, fire, status = ids[k0:], fire[k0:], status[k0:]
            started, fired = started[k0:], fired[k0:]
            n_started = int(np.count_nonzero(started))
            in_flight = None if in_flight is None else in_flight[k0:]
            if ids.size == 0:
                return
        inserted = c["inserts"] >= 1
        n_ins = int(np.count_nonzero(inserted))
        cnt["rows_written"] += n_ins
        h0, h1 = int(fire[0] // HOUR_MS), int(fire[-1] // HOUR_MS)
        if h0 == h1 and n_ins == fire.size:
            self.hour_rows[min(h0, self.n_hour - 1)] += n_ins
        else:
            self.hour_rows += np.bincount(
                np.minimum(fire[inserted] // HOUR_MS, self.n_hour - 1), minlength=self.n_hour
            )
        due = status != SKIPPED

        every = n_started == fire.size
        s_fire = fire if every else fire[started]
        s_lag = c["start"] - fire if every else c["start"][started] - s_fire
        s_tier = c["tier"] if every else c["tier"][started]
        s_b = bucket_of(s_lag)
        self._by_tier(self.start_tier, s_lag, s_b, s_tier)
        self._series(fire, due, s_fire, s_lag, s_b)
        every_d = bool(fired.all())
        d_lag = c["dispatch"] - fire if every_d else c["dispatch"][fired] - fire[fired]
        d_tier = c["tier"] if every_d else c["tier"][fired]
        whole = self._by_tier(self.dispatch_tier, d_lag, bucket_of(d_lag), d_tier)
        if d_lag.size:
            self.dispatch.add_counts(
                whole, d_lag.size, float(d_lag.sum()), d_lag.min(), d_lag.max()
            )
        self._waits(fire, c["wait"] if every else c["wait"][started], s_fire)
        if in_flight is not None:
            waiting = in_flight & ~started
            age = end_ms - fire[waiting].astype(np.float64)
            self.start_censored.add(age)
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

    def _waits(self, fire: np.ndarray, wait: np.ndarray, s_fire: np.ndarray) -> None:
        """Queue waits (visible -> taken) of the started runs (every started run has
        one); most are 0, so only the positive ones are bucketed and summed per minute."""
        w = wait.astype(np.float64)
        n = int(np.count_nonzero(w == w))  # not NaN
        if n == 0:
            return
        pos = w > 0
        n_pos = int(np.count_nonzero(pos))
        counts = np.zeros(SIZE, np.int64)
        counts[ZERO] = n - n_pos  # no wait is negative
        total, lo, hi = 0.0, 0.0, 0.0
        if n_pos:
            wp = w[pos]
            counts += np.bincount(bucket_of(wp), minlength=SIZE)
            m0 = int(fire[0] // MINUTE_MS)
            k = int(fire[-1] // MINUTE_MS) - m0 + 1
            g = s_fire[pos] // MINUTE_MS - m0
            self.minute["wait_sum"][m0 : m0 + k] += np.bincount(g, weights=wp, minlength=k)
            total, hi = float(wp.sum()), float(wp.max())
            lo = 0.0 if n_pos < n else float(wp.min())
        self.wait.add_counts(counts, n, total, lo, hi)

    @staticmethod
    def _by_tier(
        hists: list[LagHistogram], lag: np.ndarray, b: np.ndarray, tier: np.ndarray
    ) -> np.ndarray:
        """Per-tier histograms from one pass; returns the counts of all tiers together."""
        if lag.size == 0:
            return np.zeros(SIZE, np.int64)
        k = len(hists)
        tier = tier.astype(np.int64)
        counts = np.bincount(tier * SIZE + b, minlength=k * SIZE).reshape(k, SIZE)
        n = counts.sum(axis=1)
        total = np.bincount(tier, weights=lag, minlength=k)
        lo = np.full(k, np.inf)
        hi = np.full(k, -np.inf)
        np.minimum.at(lo, tier, lag)
        np.maximum.at(hi, tier, lag)
        for i, h in enumerate(hists):
            if n[i]:
                h.add_counts(counts[i], int(n[i]), float(total[i]), lo[i], hi[i])
        together: np.ndarray = counts.sum(axis=0)
        return together

    def _series(
        self,
        fire: np.ndarray,
        due: np.ndarray,
        s_fire: np.ndarray,
        s_lag: np.ndarray,
        s_b: np.ndarray,
    ) -> None:
        """Per-second and per-minute summaries, hours and the whole period, from one
        histogram per second of fire time (over the bucket range the block spans)."""
        sec0 = int(fire[0] // 1000)
        n_sec = int(fire[-1] // 1000) - sec0 + 1
        se, mn = self.second, self.minute
        m0 = int(fire[0] // MINUTE_MS)
        n_min = int(fire[-1] // MINUTE_MS) - m0 + 1
        g = s_fire // 1000 - sec0
        all_due = s_fire.size == fire.size and bool(due.all())  # the usual block
        due_sec = np.bincount(g if all_due else fire[due] // 1000 - sec0, minlength=n_sec)
        se["due"][sec0 : sec0 + n_sec] += due_sec.astype(np.int32)
        sec_min = (np.arange(sec0, sec0 + n_sec) // 60) - m0
        mn["due"][m0 : m0 + n_min] += np.bincount(sec_min, weights=due_sec, minlength=n_min).astype(
            np.int64
        )
        if s_lag.size == 0:
            return
        b0 = int(s_b.min())
        width = int(s_b.max()) - b0 + 1
        lo = np.full(n_sec, np.inf)
        hi = np.full(n_sec, -np.inf)
        np.minimum.at(lo, g, s_lag)
        np.maximum.at(hi, g, s_lag)
        total = np.bincount(g, weights=s_lag, minlength=n_sec)
        rel = s_b - b0
        whole = np.zeros(width, np.int64)
        sec_base = sec0 - m0 * 60  # seconds of the first minute before the block's first
        for a in range(0, n_sec, SECOND_CHUNK):
            z = min(n_sec, a + SECOND_CHUNK)
            i0, i1 = np.searchsorted(g, [a, z])
            h = np.bincount((g[i0:i1] - a) * width + rel[i0:i1], minlength=(z - a) * width).reshape(
                z - a, width
            )
            whole += h.sum(axis=0)
            n, q = quantiles_of_rows(h, b0, (99.0,), lo[a:z], hi[a:z])
            se["p99"][sec0 + a : sec0 + z] = q[:, 0]
            se["max"][sec0 + a : sec0 + z] = np.where(n > 0, hi[a:z], np.nan)
            # minutes: rows summed per minute (a block holds whole minutes)
            mins = (np.arange(a, z) + sec_base) // 60
            starts = np.flatnonzero(np.concatenate(([True], mins[1:] != mins[:-1])))
            hm = np.add.reduceat(h, starts, axis=0)
            lo_m = np.minimum.reduceat(lo[a:z], starts)
            hi_m = np.maximum.reduceat(hi[a:z], starts)
            nm, qm = quantiles_of_rows(hm, b0, (50.0, 99.0), lo_m, hi_m)
            mi = m0 + mins[starts]
            mn["started"][mi] += nm
            mn["wait_n"][mi] += nm
            mn["p50"][mi] = qm[:, 0]
            mn["p99"][mi] = qm[:, 1]
            mn["max"][mi] = np.where(nm > 0, hi_m, np.nan)
            tot_m = np.add.reduceat(total[a:z], starts)
            self._windows(mi, hm, b0, nm, qm[:, 1], lo_m, hi_m, tot_m)
            hours = np.minimum(mi // 60, self.n_hour - 1)
            for hr in range(int(hours[0]), int(hours[-1]) + 1):
                sel = (hours == hr) & (nm > 0)
                if sel.any():
                    self.hour_start[hr].add_counts(
                        _pad(hm[sel].sum(axis=0), b0),
                        int(nm[sel].sum()),
                        float(tot_m[sel].sum()),
                        float(lo_m[sel].min()),
                        float(hi_m[sel].max()),
                    )
        counts = _pad(whole, b0)
        n_all, sum_all = int(s_lag.size), float(s_lag.sum())
        self.start.add_counts(counts, n_all, sum_all, s_lag.min(), s_lag.max())
        self.start_censored.add_counts(counts, n_all, sum_all, s_lag.min(), s_lag.max())

    def _windows(
        self,
        mi: np.ndarray,
        hm: np.ndarray,
        b0: int,
        nm: np.ndarray,
        p99: np.ndarray,
        lo_m: np.ndarray,
        hi_m: np.ndarray,
        tot_m: np.ndarray,
    ) -> None:
        """Keep the whole histogram of the busiest minute (runs due) and of the worst
        minute (p99 start lag) seen so far."""
        due = self.minute["due"][mi]
        top = int(due.argmax())
        if self.busiest is None or due[top] > self.busiest[0]:
            hist = _row_hist(hm[top], b0, nm[top], tot_m[top], lo_m[top], hi_m[top])
            self.busiest = (int(due[top]), int(mi[top]), hist)
        if np.isfinite(p99).any():
            bad = int(np.nanargmax(p99))
            if self.worst is None or p99[bad] > self.worst[0]:
                hist = _row_hist(hm[bad], b0, nm[bad], tot_m[bad], lo_m[bad], hi_m[bad])
                self.worst = (float(p99[bad]), int(mi[bad]), hist)

    def _check_duplicates(self, ids: np.ndarray, fire: np.ndarray, effects: np.ndarray) -> None:
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


def _pad(row: np.ndarray, b0: int) -> np.ndarray:
    out = np.zeros(SIZE, np.int64)
    out[b0 : b0 + row.size] = row
    return out


def _row_hist(row: np.ndarray, b0: int, n: int, total: float, lo: float, hi: float) -> LagHistogram:
    h = LagHistogram()
    if n:
        h.add_counts(_pad(row, b0), int(n), float(total), float(lo), float(hi))
    return h

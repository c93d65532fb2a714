"""The schedule population as cohorts: one array row per run, grouped by partition and
second, instead of one SimPy process per schedule (10 million processes would not fit
in a minute). Each run keeps its exact fire time, so per-run lags stay exact.

Three kinds of jobs make the hour: hourly jobs fired at the top of the hour and spread
by their deterministic jitter (kit.core.jitter), every-minute jobs (which can miss
several fires in an outage, so misfire policies differ on them), and the sparse rest
of the population at a steady rate. Partitions come from kit.core.partitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.core import dispatch, jitter, partitions

HOUR_S = 3600
SPARSE_HASH_SAMPLE = 200_000  # ids hashed to weigh partitions for the sparse population


@dataclass
class Workload:
    """Runs sorted by fire time. job_key < 0: a job seen once in the window (sparse)."""

    fire_ms: np.ndarray  # int64, ms since the start of the simulated window
    part: np.ndarray  # int32
    tier: np.ndarray  # int8, kit.core.dispatch.PRIORITY_TIERS rank
    cls: np.ndarray  # int8, index into class_names
    job_key: np.ndarray  # int32
    class_names: list[str]
    hourly_jobs: int
    frequent_jobs: int

    @property
    def n(self) -> int:
        return int(self.fire_ms.size)


def hourly_job_count(w: dict[str, Any]) -> int:
    """Hourly jobs such that the total rate in the jitter window is the peak rate, while
    the hour still averages runs_per_s: H = J (P - R) / (1 - J / 3600)."""
    j = float(w["peak_spread_s"])
    p, r = float(w["peak_runs_per_s"]), float(w["runs_per_s"])
    if j <= 0 or p <= r:
        return 0
    return int(j * (p - r) / (1 - j / HOUR_S))


def build_workload(s: dict[str, Any], rng: np.random.Generator) -> Workload:
    w = s["workload"]
    fleet = s["fleet"]
    n_parts = int(fleet["partitions"])
    dur_ms = int(s["duration_s"] * 1000)
    class_names = list(w["classes"])
    shares = np.array([float(w["classes"][c]["share"]) for c in class_names])
    tier_p = np.array([float(w["tiers"].get(t, 0.0)) for t in dispatch.PRIORITY_TIERS])
    fires: list[np.ndarray] = []
    parts: list[np.ndarray] = []
    keys: list[np.ndarray] = []
    hourly = frequent = 0

    if w["arrivals"] == "poisson":
        rate = float(w["arrival_rate"])
        n = rng.poisson(rate * s["duration_s"])
        t = np.sort(rng.uniform(0, dur_ms, n))
        fires.append(np.floor(t).astype(np.int64))
        parts.append(rng.integers(0, n_parts, n).astype(np.int32))
        keys.append(np.full(n, -1, np.int32))
    else:
        hourly = hourly_job_count(w)
        spread_ms = int(float(w["peak_spread_s"]) * 1000)
        peak_ms = int(s["peak_at_s"] * 1000)
        if hourly:
            ids = [f"job-h{i}" for i in range(hourly)]
            off = np.fromiter(
                (jitter.jitter_offset_ms(j, spread_ms) for j in ids), np.int64, hourly
            )
            pp = np.fromiter((partitions.partition_of(j, n_parts) for j in ids), np.int32, hourly)
            tops = [m for m in range(peak_ms % (HOUR_S * 1000), dur_ms, HOUR_S * 1000)]
            for top in tops:
                f = top + off
                keep = f < dur_ms
                fires.append(f[keep])
                parts.append(pp[keep])
                keys.append(np.flatnonzero(keep).astype(np.int32))
        frequent = int(w["frequent_jobs"])
        base_rate = (float(w["runs_per_s"]) * HOUR_S - hourly) / HOUR_S
        frequent = min(frequent, int(base_rate * 60))
        if frequent:
            ids = [f"job-m{i}" for i in range(frequent)]
            off = np.fromiter((jitter.jitter_offset_ms(j, 60_000) for j in ids), np.int64, frequent)
            pp = np.fromiter((partitions.partition_of(j, n_parts) for j in ids), np.int32, frequent)
            minutes = np.arange(0, dur_ms, 60_000, dtype=np.int64)
            f = (minutes[:, None] + off[None, :]).ravel()
            k = np.tile(np.arange(frequent, dtype=np.int32) + hourly, minutes.size)
            p = np.tile(pp, minutes.size)
            keep = f < dur_ms
            fires.append(f[keep])
            parts.append(p[keep])
            keys.append(k[keep])
        sparse_rate = max(0.0, base_rate - frequent / 60.0)
        n = int(rng.poisson(sparse_rate * s["duration_s"]))
        fires.append(rng.integers(0, dur_ms, n, dtype=np.int64))
        parts.append(
            rng.choice(n_parts, n, p=sparse_partition_weights(s, n_parts)).astype(np.int32)
        )
        keys.append(np.full(n, -1, np.int32))

    fire = np.concatenate(fires)
    order = np.argsort(fire, kind="stable")
    n = fire.size
    return Workload(
        fire_ms=fire[order],
        part=np.concatenate(parts)[order],
        tier=rng.choice(len(tier_p), n, p=tier_p / tier_p.sum()).astype(np.int8),
        cls=rng.choice(len(shares), n, p=shares / shares.sum()).astype(np.int8),
        job_key=np.concatenate(keys)[order],
        class_names=class_names,
        hourly_jobs=hourly,
        frequent_jobs=frequent,
    )


def sparse_partition_weights(s: dict[str, Any], n_parts: int) -> np.ndarray:
    """Partition shares of the sparse population, hashed by kit.core from a sample of ids."""
    sample = min(int(s["workload"]["schedules"]), SPARSE_HASH_SAMPLE)
    if sample <= 0:
        return np.full(n_parts, 1.0 / n_parts)
    counts = np.bincount(
        np.fromiter(
            (partitions.partition_of(f"job-s{i}", n_parts) for i in range(sample)), np.int64, sample
        ),
        minlength=n_parts,
    ).astype(float)
    return counts / counts.sum()


def task_durations_ms(
    s: dict[str, Any], cls: np.ndarray, names: list[str], rng: np.random.Generator
) -> np.ndarray:
    """Per-run task durations drawn from each job class's distribution."""
    out = np.empty(cls.size, np.float64)
    for i, name in enumerate(names):
        c = s["workload"]["classes"][name]
        idx = np.flatnonzero(cls == i)
        mean = float(c["mean_s"]) * 1000
        dist = c.get("dist", "lognormal")
        if dist == "exponential":
            out[idx] = rng.exponential(mean, idx.size)
        elif dist == "fixed":
            out[idx] = mean
        else:
            cv = float(c.get("cv", 1.0))
            sigma2 = np.log1p(cv * cv)
            out[idx] = rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), idx.size)
    return out

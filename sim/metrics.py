"""Summaries of a finished model run: lag percentiles overall and per tier, queue
wait, queue depth, backlog drain time, and the time series the plots use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kit.core import dispatch
from sim.auditor import audit

if TYPE_CHECKING:
    from sim.model import Model

QUANTILES = {"p50": 50, "p90": 90, "p99": 99, "p99.9": 99.9}


def pcts(values_ms: np.ndarray) -> dict[str, float | None]:
    v = values_ms[~np.isnan(values_ms)]
    if v.size == 0:
        return {**{k: None for k in QUANTILES}, "max": None, "count": 0}
    q = np.percentile(v, list(QUANTILES.values()))
    out: dict[str, Any] = {k: round(float(x) / 1000, 4) for k, x in zip(QUANTILES, q, strict=True)}
    out["max"] = round(float(v.max()) / 1000, 4)
    out["mean"] = round(float(v.mean()) / 1000, 4)
    out["count"] = int(v.size)
    return out


def summarise(m: Model, wall_s: float) -> dict[str, Any]:
    fire = m.wl.fire_ms.astype(np.float64)
    trig = m.dispatch_ms - fire
    start = m.start_ms - fire
    per_tier = {}
    for rank, name in enumerate(dispatch.PRIORITY_TIERS):
        sel = m.wl.tier == rank
        if sel.any():
            per_tier[name] = {"dispatch_lag_s": pcts(trig[sel]), "start_lag_s": pcts(start[sel])}
    wait = m.wait_ms.astype(np.float64)
    w = wait[~np.isnan(wait)]
    a = audit(m)
    samples = np.array(m.pool.samples) if m.pool.samples else np.zeros((0, 4))
    fleet = m.s["fleet"]
    return {
        "scenario": m.s["name"],
        "seed": m.seed,
        "dispatch_lag_s": pcts(trig),
        "start_lag_s": pcts(start),
        "per_tier": per_tier,
        "queue_wait_s": {
            "mean": round(float(w.mean()) / 1000, 4) if w.size else None,
            "p99": round(float(np.percentile(w, 99)) / 1000, 4) if w.size else None,
        },
        "runs": {k: a[k] for k in ("fired", "succeeded", "dead_lettered", "dropped", "duplicated")},
        "audit": a,
        "max_queue_depth": int(m.pool.max_waiting),
        "backlog_drain_s": backlog_drain_s(samples),
        "peak_worker_utilisation": round(float(samples[:, 2].max()), 4) if len(samples) else 0.0,
        "fleet": {
            "nodes": fleet["nodes"],
            "partitions": fleet["partitions"],
            "workers": fleet["workers"],
            "concurrency": fleet["concurrency"],
            "db_connections": fleet["db_connections"],
        },
        "counters": dict(m.counters),
        "model": {
            "runs": int(m.wl.n),
            "hourly_jobs": m.wl.hourly_jobs,
            "frequent_jobs": m.wl.frequent_jobs,
            "simulated_s": round(m.end_s, 1),
            "wall_s": round(wall_s, 2),
            "simpy_events": int(m.simpy_events),
            "model_events": int(m.events),
            "events_per_s": round((m.events + m.simpy_events) / wall_s) if wall_s else None,
        },
        "scenario_as_run": m.s,
    }


def backlog_drain_s(samples: np.ndarray) -> float:
    """Length of the backlog episode that contains the deepest queue: from the first
    tick with runs waiting to the first tick with none, around the maximum."""
    if len(samples) == 0 or samples[:, 1].max() == 0:
        return 0.0
    depth = samples[:, 1]
    top = int(depth.argmax())
    lo = top
    while lo > 0 and depth[lo - 1] > 0:
        lo -= 1
    hi = top
    while hi < len(depth) - 1 and depth[hi] > 0:
        hi += 1
    return round(float(samples[hi, 0] - samples[lo, 0]) / 1000 + 1.0, 1)


def lag_by_second(m: Model, lo_s: float, hi_s: float) -> dict[str, np.ndarray]:
    """p50/p99/max start lag per fire second in [lo_s, hi_s), for the peak plot."""
    fire = m.wl.fire_ms
    i0, i1 = np.searchsorted(fire, [lo_s * 1000, hi_s * 1000])
    sec = fire[i0:i1] // 1000
    lag = (m.start_ms[i0:i1] - fire[i0:i1]) / 1000
    secs = np.arange(int(lo_s), int(hi_s))
    out = {k: np.full(secs.size, np.nan) for k in ("p50", "p99", "max", "count")}
    bounds = np.searchsorted(sec, secs)
    bounds = np.append(bounds, sec.size)
    for j in range(secs.size):
        v = lag[bounds[j] : bounds[j + 1]]
        v = v[~np.isnan(v)]
        out["count"][j] = v.size
        if v.size:
            out["p50"][j], out["p99"][j] = np.percentile(v, [50, 99])
            out["max"][j] = v.max()
    out["t"] = secs
    return out

"""Summaries of a finished model run, from the streamed statistics: the peak window (the
minute with the most runs due) and the worst minute first, the whole period labelled as
such, per tier and per hour, utilisation, the run history written and its retention."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from kit.core import dispatch
from sim.auditor import audit
from sim.histogram import RELATIVE_ERROR, ZERO_BELOW_MS
from sim.stats import HOUR_MS, MINUTE_MS
from sim.workload import start_of

if TYPE_CHECKING:
    from sim.model import Model

DAY_S = 86_400


def _at(m: Model, minute: int) -> str:
    return (start_of(m.s) + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%MZ")


def _minute_summary(m: Model, which: str) -> dict[str, Any] | None:
    entry = m.stats.busiest if which == "busiest" else m.stats.worst
    if entry is None:
        return None
    _, minute, hist = entry
    out: dict[str, Any] = {
        "minute": minute,
        "from": _at(m, minute),
        "due": int(m.stats.minute["due"][minute]),
    }
    out["start_lag_s"] = hist.summary()
    return out


def summarise(m: Model, wall_s: float) -> dict[str, Any]:
    st = m.stats
    per_tier = {}
    for rank, name in enumerate(dispatch.PRIORITY_TIERS):
        if st.start_tier[rank].n or st.dispatch_tier[rank].n:
            per_tier[name] = {
                "dispatch_lag_s": st.dispatch_tier[rank].summary(),
                "start_lag_s": st.start_tier[rank].summary(),
            }
    a = audit(m)
    samples = m.pool.samples[: m.pool.n_samples]
    fleet = m.s["fleet"]
    wait = st.wait.summary()
    return {
        "scenario": m.s["name"],
        "seed": m.seed,
        "start": m.s["start"],
        "peak_window": _minute_summary(m, "busiest"),
        "worst_minute": _minute_summary(m, "worst"),
        "start_lag_s": st.start.summary(),  # the whole period
        "start_lag_with_in_flight_s": st.start_censored.summary(),
        "dispatch_lag_s": st.dispatch.summary(),
        "per_tier": per_tier,
        "queue_wait_s": {"mean": wait["mean"], "p99": wait["p99"]},
        "per_hour": hour_table(m, samples),
        "runs": {k: a[k] for k in ("fired", "succeeded", "dead_lettered", "dropped", "duplicated")},
        "in_flight_at_end": a["unfinished"],
        "audit": a,
        "max_queue_depth": int(m.pool.max_waiting),
        "backlog_drain_s": backlog_drain_s(samples),
        "peak_worker_utilisation": round(float(samples[:, 1].max()), 4) if len(samples) else 0.0,
        "mean_worker_utilisation": round(float(samples[:, 1].mean()), 4) if len(samples) else 0.0,
        "history": history(m),
        "fleet": {
            "nodes": fleet["nodes"],
            "partitions": fleet["partitions"],
            "workers": fleet["workers"],
            "concurrency": fleet["concurrency"],
            "db_connections": fleet["db_connections"],
        },
        "counters": dict(m.counters),
        "percentile_error": {
            "relative": RELATIVE_ERROR,
            "zero_below_s": ZERO_BELOW_MS / 1000,
            "rule": "bucket midpoint of the order statistic at rank floor(q(n-1)), clamped "
            "to the exact min/max; counts, means and maxima exact",
        },
        "population": population(m),
        "model": {
            "runs": int(st.counts["generated"]),
            "lead_in_runs": int(st.counts["lead_in"]),
            "jobs": m.stream.jobs,
            "simulated_s": round(m.end_s, 1),
            "wall_s": round(wall_s, 2),
            "simpy_events": int(m.simpy_events),
            "model_events": int(m.events),
            "events_per_s": round((m.events + m.simpy_events) / wall_s) if wall_s else None,
            "peak_live_runs": int(m.runs.peak_live),
            "run_table_bytes": int(m.runs.nbytes),
        },
        "scenario_as_run": m.s,
    }


def hour_table(m: Model, samples: np.ndarray) -> list[dict[str, Any]]:
    offered = m.stream.offered
    rows = m.stats.hour_table(offered)
    busy = samples[:, 1]
    lead = m.lead_ms // 1000  # sample i is the tick at -lead + i + 1 s
    for row in rows:
        h = row["hour"]
        sl = busy[lead + h * 3600 : lead + (h + 1) * 3600]
        row["utilisation_mean"] = round(float(sl.mean()), 4) if sl.size else None
        row["utilisation_max"] = round(float(sl.max()), 4) if sl.size else None
        row["from"] = (start_of(m.s) + timedelta(hours=h)).strftime("%Y-%m-%dT%H:%MZ")
    return rows


def history(m: Model) -> dict[str, Any]:
    """Run rows written (one per run inserted, fired or skipped; retries update their
    run) and, from the calibrated bytes per run row, a day's and the retention's size."""
    rows = int(m.stats.counts["rows_written"])
    per_run = m.p.get("run_row_bytes")
    days = float(m.s["duration_s"]) / DAY_S
    keep = int(m.s["history"]["retention_days"])
    rows_day = rows / days if days else 0.0
    out: dict[str, Any] = {
        "rows": rows,
        "rows_per_day": round(rows_day),
        "bytes_per_run": per_run,
        "retention_days": keep,
    }
    if per_run:
        out["bytes_per_day"] = round(rows_day * per_run)
        out["retention_bytes"] = round(rows_day * per_run * keep)
    compact = m.p.get("run_row_compact_bytes")
    if compact:  # the same rows packed (after VACUUM FULL): the floor
        out["bytes_per_run_compact"] = compact
        out["retention_bytes_compact"] = round(rows_day * compact * keep)
    return out


def population(m: Model) -> list[dict[str, Any]]:
    by: dict[str, dict[str, Any]] = {}
    for t in m.stream.templates:
        e = by.setdefault(
            t.name,
            {
                "class": t.name,
                "schedule": t.expr or str(t.schedule),
                "kind": t.kind.value,  # what a scan charges per fire
                "jitter_s": t.jitter_ms / 1000,
                "jobs": 0,
                "zones": 0,
            },
        )
        e["jobs"] += t.jobs
        e["zones"] += 1
    out = list(by.values())
    if m.stream.sparse_rate:
        out.append(
            {
                "class": "sparse (no identity)",
                "kind": m.stream.sparse_kind.value,
                "runs_per_s": m.stream.sparse_rate,
            }
        )
    return out


def backlog_drain_s(samples: np.ndarray) -> float:
    """Length of the backlog episode that contains the deepest queue: from the first
    tick with runs waiting to the first tick with none, around the maximum."""
    if len(samples) == 0 or samples[:, 0].max() == 0:
        return 0.0
    depth = samples[:, 0]
    top = int(depth.argmax())
    lo = top
    while lo > 0 and depth[lo - 1] > 0:
        lo -= 1
    hi = top
    while hi < len(depth) - 1 and depth[hi] > 0:
        hi += 1
    return round(float(hi - lo) + 1.0, 1)


def lag_by_second(m: Model, lo_s: float, hi_s: float) -> dict[str, np.ndarray]:
    """p99/max start lag and runs due per fire second in [lo_s, hi_s)."""
    se = m.stats.second
    a, b = max(0, int(lo_s)), min(len(se["due"]), int(hi_s))
    return {
        "t": np.arange(a, b),
        "p99": se["p99"][a:b] / 1000,
        "max": se["max"][a:b] / 1000,
        "count": se["due"][a:b],
    }


def minute_series(m: Model) -> dict[str, np.ndarray]:
    mn = m.stats.minute
    return {
        "t_min": np.arange(mn["due"].size),
        "due": mn["due"],
        "p50": mn["p50"] / 1000,
        "p99": mn["p99"] / 1000,
        "max": mn["max"] / 1000,
    }


__all__ = ["HOUR_MS", "MINUTE_MS", "backlog_drain_s", "lag_by_second", "summarise"]

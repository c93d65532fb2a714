"""PNG plots (matplotlib, Agg: no display needed) and a Markdown report embedding them.

Everything is drawn from the streamed statistics (sim.stats): histograms for the CDF,
per-second and per-minute summaries for the time series, per-hour histograms for the
hourly table, the workload's offered load per hour and template for the load by class.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import numpy as np

from sim.histogram import MID
from sim.metrics import lag_by_second, minute_series
from sim.workload import start_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from sim.model import Model


def write_report(m: Model, result: dict[str, Any], out: Path, command: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    plots = [
        ("lag CDF (whole period)", _cdf(m, out / "lag_cdf.png")),
        ("lag around the peak window", _peak(m, result, out / "lag_peak.png")),
        ("queue depth", _queue(m, out / "queue_depth.png")),
        ("worker utilisation", _utilisation(m, out / "worker_utilisation.png")),
    ]
    if m.s["duration_s"] >= 2 * 3600:
        plots.insert(1, ("the period minute by minute", _period(m, out / "period.png")))
        plots.insert(2, ("per-hour p99 start lag", _hours(result, out / "per_hour.png")))
        plots.insert(3, ("runs due per hour, by class", _load(m, out / "load_by_class.png")))
    if m.stream.kind == "cron" and m.s["duration_s"] >= 3600:
        plots.insert(4, ("fixed-time runs a week apart", _week_apart(m, out / "dst.png")))
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    md = out / "report.md"
    md.write_text(_markdown(m, result, command, [(t, p) for t, p in plots if p]))
    return md


# -- plots ----------------------------------------------------------------------------------


def _save(fig: Figure, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _cdf(m: Model, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, h in (("start lag", m.stats.start), ("dispatch lag", m.stats.dispatch)):
        if h.n:
            cum = np.cumsum(h.counts) / h.n
            keep = np.flatnonzero(h.counts)
            x = np.maximum(MID[keep] / 1000, 1e-4)
            ax.step(x, cum[keep], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("lag behind the scheduled time (s, log)")
    ax.set_ylabel("fraction of runs")
    ax.axvline(2.0, color="grey", ls=":", label="2 s target")
    ax.legend()
    ax.set_title("Lag CDF, whole period (streamed histogram)")
    return _save(fig, path)


def _peak(m: Model, r: dict[str, Any], path: Path) -> str:
    import matplotlib.pyplot as plt

    pw = r["peak_window"]
    at = pw["minute"] * 60 if pw else 0
    by = lag_by_second(m, at - 30, at + 120)
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in ("p99", "max"):
        ax.plot(by["t"] - at, by[k], label=f"start lag {k}")
    ax.set_xlabel("fire time relative to the peak window's start (s)")
    ax.set_ylabel("start lag (s)")
    ax2 = ax.twinx()
    ax2.bar(by["t"] - at, by["count"], color="grey", alpha=0.25, width=1.0, label="runs due")
    ax2.set_ylabel("runs due per second")
    ax.legend(loc="upper right")
    ax.set_title(f"Lag around the peak window ({pw['from'] if pw else '-'})")
    return _save(fig, path)


def _period(m: Model, path: Path) -> str:
    import matplotlib.pyplot as plt

    ms = minute_series(m)
    hours = ms["t_min"] / 60
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    ax1.plot(hours, ms["due"] / 60, lw=0.7)
    ax1.set_ylabel("runs due per s\n(minute mean)")
    ax1.set_title("The period minute by minute (hours from the start, UTC)")
    ax2.plot(hours, ms["p99"], lw=0.7, label="p99 start lag")
    ax2.plot(hours, ms["max"], lw=0.5, alpha=0.6, label="max start lag")
    ax2.set_yscale("log")
    ax2.axhline(2.0, color="grey", ls=":", label="2 s target")
    ax2.set_ylabel("start lag (s, log)")
    ax2.set_xlabel("hours from the start of the period")
    ax2.legend(loc="upper right")
    return _save(fig, path)


def _hours(r: dict[str, Any], path: Path) -> str:
    import matplotlib.pyplot as plt

    rows = r["per_hour"]
    h = [row["hour"] for row in rows]
    p99 = [row["p99_s"] if row["p99_s"] is not None else np.nan for row in rows]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.bar(h, p99)
    ax.set_yscale("log")
    ax.set_xlabel("hour of the period (UTC)")
    ax.set_ylabel("p99 start lag (s, log)")
    ax.set_title("p99 start lag per hour")
    return _save(fig, path)


def _load(m: Model, path: Path) -> str:
    import matplotlib.pyplot as plt

    st = m.stream
    names = [t.name for t in st.templates] + ["sparse"]
    classes = list(dict.fromkeys(names))
    by = np.zeros((len(classes), st.offered.shape[0]))
    for j, name in enumerate(names):
        by[classes.index(name)] += st.offered[:, j]
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = np.zeros(by.shape[1])
    for i, name in enumerate(classes):
        if by[i].any():
            ax.bar(np.arange(by.shape[1]), by[i] / 1e6, bottom=bottom, label=name)
            bottom += by[i] / 1e6
    ax.set_xlabel("hour of the period (UTC)")
    ax.set_ylabel("runs due (millions)")
    ax.set_title("Runs due per hour, by class (fire times from kit.core, DST applied)")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def fixed_time_per_hour(s: dict[str, Any], start: str) -> dict[str, np.ndarray]:
    """Runs due per UTC hour of each zone's fixed-time classes (daily, weekly) for the
    period starting at `start`, from kit.core's fire times and the jobs per template
    (no hashing, no simulation)."""
    from sim.workload import WorkloadStream

    st = WorkloadStream({**s, "start": start}, 0)
    hours = max(1, -(-st.duration_ms // 3_600_000))
    out: dict[str, np.ndarray] = {}
    for t in st.templates:
        if t.expr.split()[1] in ("*", "*/1"):
            continue
        row = out.setdefault(t.zone, np.zeros(hours))
        for f in st.nominal_between(t, 0, st.duration_ms).tolist():
            row[int(f // 3_600_000)] += t.jobs
    return out


def _week_apart(m: Model, path: Path) -> str:
    import matplotlib.pyplot as plt

    start = start_of(m.s)
    before = (start - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    now = fixed_time_per_hour(m.s, m.s["start"])
    then = fixed_time_per_hour(m.s, before)
    changing = [row["zone"] for row in dst_table(m) if row["changes"]]
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(next(iter(now.values()))))
    for zone in changing or list(now)[:4]:
        (line,) = ax.step(x, now[zone] / 1e3, where="mid", label=f"{zone}, {start:%d %b}")
        ax.step(
            x,
            then[zone] / 1e3,
            where="mid",
            ls=":",
            color=line.get_color(),
            label=f"{zone}, a week before",
        )
    ax.set_xlabel("hour of the day (UTC)")
    ax.set_ylabel("daily and weekly runs due (thousands)")
    ax.set_title("Fixed-time jobs of the zones whose clocks change, a week apart")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def _queue(m: Model, path: Path) -> str:
    import matplotlib.pyplot as plt

    s = m.pool.samples[: m.pool.n_samples]
    t = (np.arange(len(s)) + 1 - m.lead_ms / 1000) / 3600
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(t, s[:, 0], label="waiting for a worker")
    ax.plot(t, s[:, 2], label="published, not yet visible", alpha=0.6)
    ax.set_xlabel("hours from the start of the period")
    ax.set_ylabel("runs")
    ax.legend()
    ax.set_title("Queue depth (per second)")
    return _save(fig, path)


def _utilisation(m: Model, path: Path) -> str:
    import matplotlib.pyplot as plt

    s = m.pool.samples[: m.pool.n_samples]
    busy = s[:, 1] * 100
    t = (np.arange(len(s)) + 1 - m.lead_ms / 1000) / 3600
    fig, ax = plt.subplots(figsize=(7, 4))
    if len(busy) > 3600:  # minute mean and max
        k = len(busy) // 60 * 60
        b = busy[:k].reshape(-1, 60)
        tm = t[:k].reshape(-1, 60)[:, 0]
        ax.plot(tm, b.max(axis=1), lw=0.6, label="minute max")
        ax.plot(tm, b.mean(axis=1), lw=0.8, label="minute mean")
        ax.legend()
    else:
        ax.plot(t, busy)
    ax.set_ylim(0, 105)
    ax.set_xlabel("hours from the start of the period")
    ax.set_ylabel("worker slots busy (%)")
    ax.set_title("Worker utilisation across the period")
    return _save(fig, path)


# -- DST --------------------------------------------------------------------------------


def dst_table(m: Model) -> list[dict[str, Any]]:
    """Per zone: its UTC offset at the start and the end of the period, and the UTC hour
    in which its fixed-time classes' runs fell (from the fire times kit.core gave)."""
    st = m.stream
    if st.kind != "cron":
        return []
    start = start_of(m.s)
    end = start + timedelta(milliseconds=st.duration_ms)
    fixed = [t for t in st.templates if t.expr.split()[1] not in ("*", "*/1")]
    rows: dict[str, dict[str, Any]] = {}
    for t in st.templates:
        if t.zone in rows:
            continue
        z = ZoneInfo(t.zone)
        a, b = start.astimezone(z).utcoffset(), end.astimezone(z).utcoffset()
        rows[t.zone] = {
            "zone": t.zone,
            "offset_start": _offset(a),
            "offset_end": _offset(b),
            "changes": a != b,
            "fixed": {},
        }
    for t in fixed:
        hours = np.flatnonzero(st.offered[:, t.index])
        rows[t.zone]["fixed"][t.name] = [int(h) for h in hours]
    return list(rows.values())


def _offset(d: timedelta | None) -> str:
    if d is None:
        return "?"
    minutes = int(d.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


# -- markdown -------------------------------------------------------------------------------


def _lagrow(name: str, s: dict[str, Any]) -> str:
    return (
        f"| {name} | {s['count']:,} | {s['p50']} | {s['p90']} | {s['p99']} | {s['p99.9']} | "
        f"{s['max']} |"
    )


def _markdown(m: Model, r: dict[str, Any], command: str, plots: list[tuple[str, str]]) -> str:
    a, f, h = r["audit"], r["fleet"], r["history"]
    pw, wm = r["peak_window"], r["worst_minute"]
    err = r["percentile_error"]
    lines = [
        f"# Simulation: {r['scenario']}",
        "",
        f"Reproduce: `{command}` (seed {r['seed']}). Period from {r['start']}, "
        f"{m.s['duration_s']} s of fire times.",
        "",
        r["scenario_as_run"].get("description", "").strip(),
        "",
        "## Start lag",
        "",
        "| window | runs | p50 (s) | p90 (s) | p99 (s) | p99.9 (s) | max (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    if pw:
        lines.append(_lagrow(f"**peak window** (busiest minute, {pw['from']})", pw["start_lag_s"]))
    if wm:
        lines.append(_lagrow(f"**worst minute** (highest p99, {wm['from']})", wm["start_lag_s"]))
    lines += [
        _lagrow("whole period", r["start_lag_s"]),
        _lagrow(
            "whole period, runs not started at the end at their age",
            r["start_lag_with_in_flight_s"],
        ),
        _lagrow("dispatch lag, whole period", r["dispatch_lag_s"]),
        "",
        f"Percentiles come from streamed log-linear histograms: each is within "
        f"{err['relative'] * 100:.2f}% of the exact order statistic at rank floor(q(n-1)) "
        f"(lags under {err['zero_below_s'] * 1e6:.1f} µs count as 0); counts, means and maxima "
        "are exact. The peak window is the minute with the most runs due; the worst minute "
        "the one with the highest p99 start lag.",
        "",
        f"Runs still in flight when the simulation ended: **{r['in_flight_at_end']:,}** "
        "(not started ones appear in the row 'at their age', a lower bound of their lag).",
        "",
        "| tier | start p99 (s) | start max (s) | dispatch p99 (s) |",
        "| --- | --- | --- | --- |",
    ]
    for tier, v in r["per_tier"].items():
        lines.append(
            f"| {tier} | {v['start_lag_s']['p99']} | {v['start_lag_s']['max']} | "
            f"{v['dispatch_lag_s']['p99']} |"
        )
    lines += [
        "",
        f"Fleet: {f['nodes']} scheduler nodes, {f['partitions']} partitions, {f['workers']} "
        f"workers x {f['concurrency']} slots, {f['db_connections']} database connections. "
        f"Worker utilisation: mean {r['mean_worker_utilisation'] * 100:.0f}%, peak "
        f"{r['peak_worker_utilisation'] * 100:.0f}%; deepest queue {r['max_queue_depth']:,} "
        f"runs (inside a second); longest backlog still waiting at second boundaries "
        f"{r['backlog_drain_s']} s; queue wait mean {r['queue_wait_s']['mean']} s, p99 "
        f"{r['queue_wait_s']['p99']} s.",
        "",
        "| fired | succeeded | retried | dead-lettered | skipped | dropped | duplicated |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {a['fired']:,} | {a['succeeded']:,} | {a['retried']:,} | {a['dead_lettered']:,} | "
        f"{a['skipped']:,} | {a['dropped']:,} | {a['duplicated']:,} |",
        "",
        "Invariant violations: " + ("; ".join(a["violations"]) or "none") + ".",
        "",
        "## Run history",
        "",
        f"Rows written: {h['rows']:,} ({h['rows_per_day']:,} per day at this period's rate; "
        "one row per run fired or skipped, retries update their run).",
    ]
    if h.get("bytes_per_run"):
        lines.append(
            f"At {h['bytes_per_run']:.0f} bytes per run row (table, indexes and TOAST as the "
            "kit writes a run: the space of its updates' old versions kept, from the "
            f"calibration profile): {h['bytes_per_day'] / 1e9:.1f} GB per day, "
            f"**{h['retention_bytes'] / 1e12:.2f} TB for {h['retention_days']} days** kept"
            + (
                f"; packed ({h['bytes_per_run_compact']:.0f} bytes per row, after VACUUM FULL) "
                f"{h['retention_bytes_compact'] / 1e12:.2f} TB."
                if h.get("retention_bytes_compact")
                else "."
            )
        )
    else:
        lines.append("The calibration profile gives no bytes per run row: no size computed.")
    if len(r["per_hour"]) > 1:
        lines += [
            "",
            "## Per hour",
            "",
            "| hour (UTC) | runs due | p50 (s) | p99 (s) | max (s) | workers busy mean/max "
            "| rows |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in r["per_hour"]:
            um, ux = row["utilisation_mean"], row["utilisation_max"]
            util = "-" if um is None else f"{um * 100:.0f}% / {ux * 100:.0f}%"
            lines.append(
                f"| {row['from'][5:16].replace('T', ' ')} | {row['due']:,} | {row['p50_s']} | "
                f"{row['p99_s']} | {row['max_s']} | {util} | {row['rows_written']:,} |"
            )
    dst = dst_table(m)
    if dst:
        classes = sorted({k for row in dst for k in row["fixed"]})
        lines += [
            "",
            "## Time zones and DST",
            "",
            "Fire times come from kit.core.schedule (cron in the zone, with its DST rule). "
            "For each zone: its UTC offset at the start and end of the period, and the UTC "
            "hours in which its fixed-time classes' runs were due.",
            "",
            "| zone | offset at start | offset at end | " + " | ".join(classes) + " |",
            "| --- | --- | --- | " + " | ".join("---" for _ in classes) + " |",
        ]
        for row in dst:
            mark = " (changes)" if row["changes"] else ""
            cells = [
                ", ".join(f"{hh:02d}:00" for hh in row["fixed"].get(c, [])) or "-" for c in classes
            ]
            lines.append(
                f"| {row['zone']}{mark} | {row['offset_start']} | {row['offset_end']} | "
                + " | ".join(cells)
                + " |"
            )
    lines += ["", "## Plots", ""]
    for title, name in plots:
        lines += [f"![{title}]({name})", ""]
    lines += ["## Counters", "", "| counter | value |", "| --- | --- |"]
    lines += [f"| {k} | {v:,} |" for k, v in r["counters"].items()]
    mdl = r["model"]
    lines += [
        "",
        f"Model: {mdl['runs']:,} runs ({mdl['lead_in_runs']:,} of them in the lead-in, audited "
        f"but not timed) of {mdl['jobs']:,} jobs, {mdl['simulated_s']} s simulated in "
        f"{mdl['wall_s']} s of wall time ({mdl['events_per_s']:,} events/s); at most "
        f"{mdl['peak_live_runs']:,} runs held at once.",
        "",
        "Approximations: runs are array rows, generated a minute of fire times at a time "
        "and folded into the statistics once they can no longer change; claims, finishes "
        "and partition-lease renewals and fencing take kit.core's verdict once per "
        "equivalence class; database load from claims and finishes is a fluid (per-second) "
        "charge on the connections; a scan's decisions are kit.core.trigger.decide_scan's, "
        "asked once per class of jobs; a task cancelled by overlap 'replace' keeps its "
        "worker slot until its end.",
        "",
    ]
    return "\n".join(lines)

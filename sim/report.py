"""PNG plots (matplotlib, Agg: no display needed) and a Markdown report embedding them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.metrics import lag_by_second

if TYPE_CHECKING:
    from sim.model import Model


def write_report(m: Model, result: dict[str, Any], out: Path, command: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fire = m.wl.fire_ms.astype(np.float64)
    start = (m.start_ms - fire) / 1000
    trig = (m.dispatch_ms - fire) / 1000
    peak = float(m.s["peak_at_s"])
    if not 0 <= peak < float(m.s["duration_s"]):
        peak = float(np.argmax(np.bincount((m.wl.fire_ms // 1000).astype(np.int64))))

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, v in (("start lag", start), ("dispatch lag", trig)):
        v = np.sort(v[~np.isnan(v)])
        if v.size:
            step = max(1, v.size // 20000)
            ax.plot(np.maximum(v[::step], 1e-4), np.arange(v.size)[::step] / v.size, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("lag behind the scheduled time (s, log)")
    ax.set_ylabel("fraction of runs")
    ax.axvline(2.0, color="grey", ls=":", label="2 s target")
    ax.legend()
    ax.set_title("Lag CDF")
    _save(fig, out / "lag_cdf.png")

    lo, hi = max(0.0, peak - 10), min(float(m.s["duration_s"]), peak + 60)
    by = lag_by_second(m, lo, hi)
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in ("p50", "p99", "max"):
        ax.plot(by["t"] - peak, by[k], label=f"start lag {k}")
    ax.set_xlabel("fire time relative to the top of the hour (s)")
    ax.set_ylabel("start lag (s)")
    ax.legend()
    ax.set_title("Lag around the peak")
    _save(fig, out / "lag_peak.png")

    samples = np.array(m.pool.samples) if m.pool.samples else np.zeros((1, 4))
    t = samples[:, 0] / 1000
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(t, samples[:, 1], label="waiting for a worker")
    ax.plot(t, samples[:, 3], label="published, not yet visible", alpha=0.6)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("runs")
    ax.legend()
    ax.set_title("Queue depth")
    _save(fig, out / "queue_depth.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(t, samples[:, 2] * 100)
    ax.set_ylim(0, 105)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("worker slots busy (%)")
    ax.set_title("Worker utilisation")
    _save(fig, out / "worker_utilisation.png")

    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    md = out / "report.md"
    md.write_text(_markdown(result, command))
    return md


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


def _markdown(r: dict[str, Any], command: str) -> str:
    s, d, a = r["start_lag_s"], r["dispatch_lag_s"], r["audit"]
    f = r["fleet"]
    lines = [
        f"# Simulation: {r['scenario']}",
        "",
        f"Reproduce: `{command}` (seed {r['seed']}).",
        "",
        r["scenario_as_run"].get("description", "").strip(),
        "",
        "| | p50 | p90 | p99 | p99.9 | max |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| start lag (s) | {s['p50']} | {s['p90']} | {s['p99']} | {s['p99.9']} | {s['max']} |",
        f"| dispatch lag (s) | {d['p50']} | {d['p90']} | {d['p99']} | {d['p99.9']} | {d['max']} |",
        "",
        "| tier | start p99 (s) | start max (s) |",
        "| --- | --- | --- |",
    ]
    for tier, v in r["per_tier"].items():
        lines.append(f"| {tier} | {v['start_lag_s']['p99']} | {v['start_lag_s']['max']} |")
    lines += [
        "",
        f"Fleet: {f['nodes']} scheduler nodes, {f['partitions']} partitions, {f['workers']} "
        f"workers x {f['concurrency']} slots, {f['db_connections']} database connections.",
        "",
        "| fired | succeeded | retried | dead-lettered | skipped | dropped | duplicated |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {a['fired']} | {a['succeeded']} | {a['retried']} | {a['dead_lettered']} | "
        f"{a['skipped']} | {a['dropped']} | {a['duplicated']} |",
        "",
        f"Queue wait mean {r['queue_wait_s']['mean']} s, p99 {r['queue_wait_s']['p99']} s; "
        f"deepest queue {r['max_queue_depth']} runs; backlog drained in "
        f"{r['backlog_drain_s']} s; peak worker utilisation "
        f"{r['peak_worker_utilisation'] * 100:.0f}%.",
        "",
        "Invariant violations: " + ("; ".join(a["violations"]) or "none") + ".",
        "",
        "![lag CDF](lag_cdf.png)",
        "",
        "![lag around the peak](lag_peak.png)",
        "",
        "![queue depth](queue_depth.png)",
        "",
        "![worker utilisation](worker_utilisation.png)",
        "",
        "## Counters",
        "",
        "| counter | value |",
        "| --- | --- |",
    ]
    lines += [f"| {k} | {v} |" for k, v in r["counters"].items()]
    mdl = r["model"]
    lines += [
        "",
        f"Model: {mdl['runs']} runs, {mdl['simulated_s']} s simulated in {mdl['wall_s']} s "
        f"of wall time ({mdl['events_per_s']} events/s).",
        "",
        "Approximations: schedules are cohorts (one array row per run, grouped per "
        "partition and second); claims and finishes on the normal path take kit.core's "
        "verdict once per equivalence class; database load from claims and finishes is a "
        "fluid (per-second) charge on the connections; see sim/README in the issue notes.",
        "",
    ]
    return "\n".join(lines)

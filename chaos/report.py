"""A drill's report: `result.json` (the verdict, every count, every finding) and
`report.md` with three plots: each run's start lag against its scheduled time with the
fault windows shaded, each worker's task starts a second, and the counts per cycle;
beside the measurement, what the capacity model predicted for the same fault."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.runner import DrillResult

FINDINGS_SHOWN = 20
COLOURS = {
    "worker_kill_after_effect": "tab:red",
    "worker_kill_mid_task": "tab:orange",
    "worker_kill": "tab:red",
    "scheduler_kill": "tab:purple",
    "scheduler_cut": "tab:brown",
    "postgres_crash": "tab:blue",
    "kafka_kill": "tab:green",
    "clock_skew": "tab:olive",
    "poison_flood": "tab:gray",
}


def write_report(result: DrillResult) -> Path:
    out = result.out
    data = result.to_json()
    data["machine_load"] = _load()
    (out / "result.json").write_text(json.dumps(data, indent=2, default=str))
    plots = _plots(result)
    (out / "report.md").write_text(_markdown(result, data, plots))
    return out / "report.md"


def _load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} CPUs"


def _plots(result: DrillResult) -> list[str]:
    audit, history = result.audit, result.history
    if audit is None or history is None or not audit.lags:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(at for at, _ in audit.lags)
    names: list[str] = []
    fig, ax = plt.subplots(figsize=(11, 4))
    seen: set[str] = set()
    for f in history.faults:
        colour = COLOURS.get(f.kind, "tab:pink")
        label = None if f.kind in seen else f.kind
        seen.add(f.kind)
        ax.axvspan((f.start_ms - t0) / 1000, (f.heal_ms - t0) / 1000, color=colour, alpha=0.18,
                   label=label)  # fmt: skip
    ax.scatter(
        [(at - t0) / 1000 for at, _ in audit.lags],
        [lag / 1000 for _, lag in audit.lags],
        s=4,
        color="black",
        label="a run's first start",
    )
    ax.axhline(history.params.lag_ok_ms / 1000, color="tab:red", linewidth=0.8, linestyle="--",
               label="2 s target")  # fmt: skip
    names.append(
        _saved(plt, fig, ax, result.out / "lag.png", "scheduled time (s from the first run)",
               "start lag (s)", f"{result.drill}: start lag around the faults (shaded)")
    )  # fmt: skip

    names.append(_starts_plot(result, t0, plt))

    if audit.cycles:
        fig, ax = plt.subplots(figsize=(11, 3.5))
        xs = [c.cycle for c in audit.cycles]
        width = 0.2
        series = (
            ("expected", [c.expected for c in audit.cycles], "tab:blue"),
            ("took effect", [c.effects for c in audit.cycles], "tab:green"),
            ("duplicate executions", [c.duplicate_executions for c in audit.cycles], "tab:orange"),
            ("lost", [c.lost for c in audit.cycles], "tab:red"),
        )
        for i, (label, values, colour) in enumerate(series):
            ax.bar([x + (i - 1.5) * width for x in xs], values, width, label=label, color=colour)
        ax.set_xlabel("cycle")
        ax.set_ylabel("runs")
        ax.set_title(f"{result.drill}: counts per cycle")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(result.out / "cycles.png", dpi=110)
        plt.close(fig)
        names.append("cycles.png")
    return names


def _starts_plot(result: DrillResult, t0: int, plt: Any) -> str:
    """Each worker's task starts a second (the execution journal) against the wall clock,
    the faults shaded: where a worker stalled, and how fast it caught up after."""
    from collections import Counter

    history = result.history
    assert history is not None
    by_worker: dict[str, Counter[int]] = {}
    for start in history.starts:
        by_worker.setdefault(start.worker, Counter())[(start.at_ms - t0) // 1000] += 1
    fig, ax = plt.subplots(figsize=(11, 3.5))
    for f in history.faults:
        ax.axvspan((f.start_ms - t0) / 1000, (f.heal_ms - t0) / 1000,
                   color=COLOURS.get(f.kind, "tab:pink"), alpha=0.18)  # fmt: skip
    for worker in sorted(by_worker):
        seconds = by_worker[worker]
        xs = range(min(seconds), max(seconds) + 1)
        ax.plot(list(xs), [seconds.get(x, 0) for x in xs], linewidth=0.8, label=worker)
    return _saved(plt, fig, ax, result.out / "starts.png",
                  "wall time (s from the first run's second)", "task starts per second",
                  f"{result.drill}: each worker's starts a second, the faults shaded")  # fmt: skip


def _saved(plt: Any, fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str) -> str:
    """Label, save and close a time plot; its file name."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _lag(stats: dict[str, Any]) -> str:
    if not stats.get("count"):
        return "—"
    return f"{stats['p50_s']} / {stats['p99_s']} / {stats['max_s']} s ({stats['count']} runs)"


def _markdown(result: DrillResult, data: dict[str, Any], plots: list[str]) -> str:
    lines = [f"# Chaos drill `{result.drill}`", ""]
    verdict = "PASSED" if result.passed else "FAILED"
    lines += [f"**{verdict}**" + (f": {result.error}" if result.error else ""), ""]
    lines += [
        f"- command: `{result.command}`",
        f"- seed {result.seed}, {result.cycles} cycles, {result.wall_s:.0f} s wall time",
        f"- machine: {data['machine_load']} (when the report was written)",
        "",
    ]
    a = data.get("audit")
    if a:
        lines += ["| measure | drill |", "| --- | --- |"]
        rows = (
            ("expected fires (healthy)", a["expected"]),
            ("took effect", a["effects"]),
            ("**lost**", a["lost"]),
            ("unexpected effects / runs", f"{a['unexpected_effects']} / {a['unexpected_runs']}"),
            ("duplicate deliveries (journal; allowed)", a["duplicate_deliveries"]),
            ("duplicate executions (ledger; allowed)", a["duplicate_executions"]),
            ("**duplicate effects** (key-honouring tasks)", a["duplicate_effects"]),
            ("duplicate effects of tasks ignoring the key", a["naive_duplicate_effects"]),
            ("**stale writes accepted**", a["stale_writes_accepted"]),
            ("**overlapping executions** (one acting after the next began)",
             a.get("overlapping_executions", 0)),
            ("**runs started twice in a stall the leases outlive**",
             a.get("started_twice_in_short_stalls", 0)),
            ("writes checked", ", ".join(f"{k} {v}" for k, v in a["writes_checked"].items())),
            ("misfire skips justified by an outage", a["misfire_skips_justified"]),
            ("retries dropped because their job was paused", a["retries_dropped_by_pause"]),
            (
                "poison fires / dead-lettered",
                f"{a['expected_poison']} / {a['poison_dead_lettered']}",
            ),
            ("finishes after the lease ran out (no other holder)", a["late_finishes"]),
            (
                "runs started late / started, by the worker that first started them",
                ", ".join(
                    f"{w} {a['late_by_worker'].get(w, 0)} / {n}"
                    for w, n in a.get("starts_by_worker", {}).items()
                )
                or "—",
            ),
            (
                "the same by worker and tier (lanes with late starts, most first)",
                ", ".join(
                    f"{lane} {late} / {n}"
                    for lane, (late, n) in sorted(
                        a.get("late_by_lane", {}).items(), key=lambda kv: -kv[1][0]
                    )
                    if late
                )
                or "—",
            ),
            ("faults injected", a["faults"]),
            (
                "time to recover after the heal, median / max",
                f"{a['recover_s_median']} / {a['recover_s_max']} s",
            ),
            ("start lag p50 / p99 / max, away from faults", _lag(a["lag_before"])),
            ("start lag, due during a fault", _lag(a["lag_during"])),
            ("start lag, due within 12 s after a heal", _lag(a["lag_after"])),
        )  # fmt: skip
        lines += [f"| {k} | {v} |" for k, v in rows]
        lines.append("")
    model = result.model
    if model and "error" not in model and a:
        lines += [
            "## The model beside the drill",
            "",
            f"`{model['command']}` (faults: {json.dumps(model['faults'])})",
            "",
            "| | model | drill |",
            "| --- | --- | --- |",
            f"| dropped / lost | {model['dropped']} | {a['lost']} |",
            f"| duplicated (effects) | {model['duplicated']} | {a['duplicate_effects']} |",
            f"| executions beyond one per run | {model['executions'] - model['expected']} "
            f"| {a['duplicate_executions']} |",
            f"| start lag p99 / max | {model['start_lag_s']['p99']} / {model['start_lag_s']['max']}"
            f" s | {a['lag_all']['p99_s']} / {a['lag_all']['max_s']} s |",
            "",
        ]
    elif model:
        lines += ["## The model", "", f"did not run: {model.get('error')}", ""]
    for name in plots:
        lines += [f"![{name}]({name})", ""]
    if a:
        findings = a["findings"]
        for key, title in (
            ("lost", "Lost"),
            ("duplicate_effects", "Duplicate effects"),
            ("stale_writes", "Stale writes accepted"),
            ("overlapping_executions", "Overlapping executions"),
            ("started_twice_in_short_stalls", "Runs started twice in a stall the leases outlive"),
            ("unexpected_effects", "Unexpected effects"),
            ("unexpected_runs", "Unexpected runs"),
        ):
            items = findings[key]
            if not items:
                continue
            lines += [f"## {title} ({len(items)})", ""]
            for item in items[:FINDINGS_SHOWN]:
                if isinstance(item, dict):
                    lines.append(
                        f"- `{item['run_id']}` {item['job']} at {item['at_ms']}: {item['why']}"
                    )
                else:
                    lines.append(f"- {item}")
            lines.append("")
        faults = a["faults_detail"]
        if faults:
            lines += [
                "## Faults",
                "",
                "| cycle | fault | target | held s | late runs | recovered after heal s |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
            for f in faults:
                held = (f["heal_ms"] - f["start_ms"]) / 1000
                lines.append(
                    f"| {f['cycle']} | {f['kind']} | {f['target']} | {held:.1f} | "
                    f"{f['late_runs']} | {f['recover_s']} |"
                )
            lines.append("")
    if result.exits:
        lines += ["## Services that exited on their own (restarted)", ""]
        lines += [f"- {e}" for e in result.exits[:50]] + [""]
    if result.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in result.notes[:100]] + [""]
    return "\n".join(lines)

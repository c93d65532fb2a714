"""The summary of a `cronfleet chaos run` of several drills: one table (summary.md) and
one plot (summary.png: per drill, lost / duplicate effects / stale writes, which must be
0, beside start lag p99 during faults and the time to recover), from the drills' results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLUMNS = (
    "| drill | cycles | faults | expected | took effect | **lost** | **dup. effects** | "
    "**stale writes** | unexpected | dup. deliveries | dup. executions | writes checked | "
    "lag p99 during / after s | recover median / max s | wall s | verdict |"
)


def summary_rows(drills: list[dict[str, Any]]) -> list[str]:
    rows = [COLUMNS, _rule()]
    for r in drills:
        a = r.get("audit")
        if a is None:
            rows.append(
                f"| {r['drill']} | {r['cycles']} | | | | | | | | | | | | | {r['wall_s']} "
                f"| FAILED: {r['error']} |"
            )
            continue
        expected = str(a["expected"])
        if a["expected_poison"]:
            expected += f" + {a['expected_poison']} poison"
        rows.append(
            f"| {r['drill']} | {r['cycles']} | {a['faults']} | {expected} | {a['effects']} "
            f"| {a['lost']} | {a['duplicate_effects']} | {_stale(a)} "
            f"| {a['unexpected_effects'] + a['unexpected_runs']} | {a['duplicate_deliveries']} "
            f"| {a['duplicate_executions']} | {sum(a['writes_checked'].values())} "
            f"| {a['lag_during']['p99_s']} / {a['lag_after']['p99_s']} "
            f"| {a['recover_s_median']} / {a['recover_s_max']} | {r['wall_s']} "
            f"| {'passed' if r['passed'] else 'FAILED'} |"
        )
    return rows


def _stale(a: dict[str, Any]) -> str:
    """Stale writes accepted, with executions that overlapped and second starts in a
    stall the leases outlive (drills that can have them) after a slash."""
    extra = a.get("overlapping_executions", 0) + a.get("started_twice_in_short_stalls", 0)
    return f"{a['stale_writes_accepted']}" + (f" / {extra}" if extra else "")


def _rule() -> str:
    return "|" + " --- |" * (COLUMNS.count("|") - 1)


def write_summary(payload: dict[str, Any], out: Path) -> list[Path]:
    """summary.md and summary.png under `out`; returns the files written."""
    drills = payload["drills"]
    md = out / "summary.md"
    lines = [
        f"# Chaos drills: seed {payload['seed']}, {payload['cycles']} cycles each",
        "",
        f"Code: {payload.get('commit') or 'unrecorded'}.",
        "",
        *summary_rows(drills),
        "",
    ]
    written = [md]
    png = _plot(drills, out / "summary.png")
    if png is not None:
        lines += ["![summary](summary.png)", ""]
        written.append(png)
    md.write_text("\n".join(lines))
    return written


def _plot(drills: list[dict[str, Any]], path: Path) -> Path | None:
    audited = [r for r in drills if r.get("audit")]
    if not audited:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["drill"] for r in audited]
    xs = range(len(names))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4))
    width = 0.27
    for i, (key, label, colour) in enumerate(
        (
            ("lost", "lost", "tab:red"),
            ("duplicate_effects", "duplicate effects", "tab:orange"),
            ("stale_writes_accepted", "stale writes accepted", "tab:purple"),
        )
    ):
        left.bar([x + (i - 1) * width for x in xs], [r["audit"][key] for r in audited], width,
                 label=label, color=colour)  # fmt: skip
    left.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    left.set_ylabel("count (must be 0)")
    left.set_ylim(bottom=0, top=max(1, left.get_ylim()[1]))
    left.set_title("safety: what must be 0")
    left.legend(fontsize=7)
    lag = [r["audit"]["lag_during"]["p99_s"] or 0 for r in audited]
    rec = [r["audit"]["recover_s_max"] or 0 for r in audited]
    right.bar([x - 0.2 for x in xs], lag, 0.4, label="start lag p99, due during a fault (s)",
              color="tab:blue")  # fmt: skip
    right.bar([x + 0.2 for x in xs], rec, 0.4, label="time to recover after the heal, max (s)",
              color="tab:green")  # fmt: skip
    right.axhline(2.0, color="tab:red", linewidth=0.8, linestyle="--", label="2 s start target")
    right.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    right.set_ylabel("seconds")
    right.set_title("liveness: lag and recovery")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

"""A series of life_of_a_run runs, the baseline's and the candidate's side by side: every
run's start lag in a table (markdown) and a plot, never only the best.

    python benchmarks/life_of_a_run_series.py docs/benchmarks/life_of_a_run burst

reads DIR/burst-base-N.json and DIR/burst-new-N.json (what life_of_a_run.py --out wrote,
renamed per run) and writes DIR/burst-series.png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

LABELS = {"base": "baseline", "new": "candidate"}


def load(directory: Path, phase: str, kind: str) -> list[dict]:
    runs = sorted(directory.glob(f"{phase}-{kind}-*.json"), key=lambda p: p.stem)
    return [json.loads(p.read_text()) for p in runs]


def table(series: dict[str, list[dict]]) -> str:
    lines = [
        "| code | run | start lag p50 / p99 / max s | dispatch lag p99 s | "
        "succeeded | dropped | executed twice | published twice |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, runs in series.items():
        for i, r in enumerate(runs, 1):
            p50, p99, mx = r["start_lag_s"]
            lines.append(
                f"| {LABELS[kind]} | {i} | {p50:.2f} / **{p99:.2f}** / {mx:.2f} | "
                f"{r['dispatch_lag_s'][1]:.2f} | {r['succeeded']:,} | {r['dropped']} | "
                f"{r['executed_twice']} | {r['published_twice']} |"
            )
    return "\n".join(lines)


def plot(series: dict[str, list[dict]], phase: str, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = 0
    ticks, names = [], []
    for kind, runs in series.items():
        for i, r in enumerate(runs, 1):
            p50, p99, mx = r["start_lag_s"]
            ax.bar(x - 0.25, p50, 0.25, color="#9ecae1", label="p50" if x == 0 else None)
            ax.bar(x, p99, 0.25, color="#3182bd", label="p99" if x == 0 else None)
            ax.bar(x + 0.25, mx, 0.25, color="#08519c", label="max" if x == 0 else None)
            ticks.append(x)
            names.append(f"{LABELS[kind]}\nrun {i}")
            x += 1
    ax.set_xticks(ticks, names, fontsize=8)
    ax.set_ylabel("start lag, s")
    ax.set_title(f"{phase}: start lag of every run in the series")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("phase", help="file prefix: burst or sustain")
    args = ap.parse_args()
    series = {kind: load(args.directory, args.phase, kind) for kind in LABELS}
    if not any(series.values()):
        raise SystemExit(f"no {args.phase}-{{base,new}}-N.json in {args.directory}")
    print(table(series))
    out = args.directory / f"{args.phase}-series.png"
    plot(series, args.phase, out)
    print(f"\nplot: {out}")


if __name__ == "__main__":
    main()

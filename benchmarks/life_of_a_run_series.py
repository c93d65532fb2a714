"""A series of life_of_a_run runs, the baseline's and the candidate's side by side: every
run's start lag in a table (markdown) and a plot, never only the best.

    python benchmarks/life_of_a_run_series.py benchmarks/results/life_of_a_run burst

reads DIR/burst-base-N.json and DIR/burst-new-N.json (what life_of_a_run.py --out wrote,
renamed per run) and writes DIR/burst-series.png. `--labels A B` names the two sides
(default: baseline, candidate), e.g. `--labels "1 tenant" "100 tenants"`.
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
    runs = sorted(directory.glob(f"{phase}-{kind}-[0-9]*.json"), key=lambda p: p.stem)
    return [json.loads(p.read_text()) for p in runs]


def start_lags(r: dict) -> tuple[float, float, float]:
    """(p50, p99, max) from a burst's or a sustained run's JSON."""
    if "start_lag_s" in r:
        return tuple(r["start_lag_s"])  # type: ignore[return-value]
    return r["start_lag_p50_s"], r["start_lag_p99_s"], r["start_lag_max_s"]


def table(series: dict[str, list[dict]], labels: dict[str, str] = LABELS) -> str:
    lines = [
        "| code | run | start lag p50 / p99 / max s | succeeded | dropped | executed twice | "
        "CPU ms per run: services / PostgreSQL |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for kind, runs in series.items():
        for i, r in enumerate(runs, 1):
            p50, p99, mx = start_lags(r)
            expected = r.get("expected_runs", r.get("jobs", 0))
            pg = r.get("pg_cpu_ms_per_run")
            if pg is None:
                pg = r["cpu_s"]["postgres_backends"] * 1000 / max(1, expected)
            lines.append(
                f"| {labels[kind]} | {i} | {p50:.3f} / **{p99:.3f}** / {mx:.3f} | "
                f"{r['succeeded']:,} | {expected - r['succeeded']} | {r['executed_twice']} | "
                f"{r['cpu_ms_per_run']:.3f} / {pg:.3f} |"
            )
    return "\n".join(lines)


def plot(
    series: dict[str, list[dict]], phase: str, out: Path, labels: dict[str, str] = LABELS
) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = 0
    ticks, names = [], []
    for kind, runs in series.items():
        for i, r in enumerate(runs, 1):
            p50, p99, mx = start_lags(r)
            ax.bar(x - 0.25, p50, 0.25, color="#9ecae1", label="p50" if x == 0 else None)
            ax.bar(x, p99, 0.25, color="#3182bd", label="p99" if x == 0 else None)
            ax.bar(x + 0.25, mx, 0.25, color="#08519c", label="max" if x == 0 else None)
            ticks.append(x)
            names.append(f"{labels[kind]}\nrun {i}")
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
    ap.add_argument("--labels", nargs=2, metavar=("BASE", "NEW"), help="the two sides' names")
    args = ap.parse_args()
    labels = dict(zip(LABELS, args.labels, strict=True)) if args.labels else LABELS
    series = {kind: load(args.directory, args.phase, kind) for kind in LABELS}
    if not any(series.values()):
        raise SystemExit(f"no {args.phase}-{{base,new}}-N.json in {args.directory}")
    print(table(series, labels))
    out = args.directory / f"{args.phase}-series.png"
    plot(series, args.phase, out, labels)
    print(f"\nplot: {out}")


if __name__ == "__main__":
    main()

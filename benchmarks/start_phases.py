"""Where a run's start lag goes inside the worker, from what benchmarks/start_trace
recorded (STARTTRACE_DIR/<pid>.tsv, one file per worker process): for first attempts,
seconds after the run's second at which the hold thread released it, the task loop took
it, its task's first step ran, it had its connection (http) and its start was stamped;
every phase's p50 / p90 / p99 / max, and how the starts of one worker's second spread
(first, median, last).

    python benchmarks/start_phases.py STARTTRACE_DIR [--skip-s 60] [--window-s S] [--json OUT.json]

`--skip-s` leaves out runs due in the first seconds of the trace (the fleet warming up),
`--window-s` those due more than S seconds after that (a fault, another measurement).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

PHASES = ("released", "on_loop", "first_step", "connected", "began")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def read(folder: Path, skip_s: float, window_s: float) -> dict[str, list[tuple[float, ...]]]:
    """Each worker's rows: due, then each of PHASES (nan: the run did not pass there)."""
    rows: dict[str, list[tuple[float, ...]]] = {}
    for path in sorted(folder.glob("*.tsv")):
        mine: list[tuple[float, ...]] = []
        for line in path.read_text().splitlines():
            cells = line.split("\t")
            if len(cells) != 1 + len(PHASES):
                raise SystemExit(f"{path}: not a start trace line: {line!r}")
            mine.append(tuple(float(c or "nan") for c in cells))
        if mine:
            rows[path.stem] = mine
    if not rows:
        raise SystemExit(f"{folder}: no trace (STARTTRACE_DIR of a worker started with "
                         "benchmarks/start_trace on its PYTHONPATH)")  # fmt: skip
    first = min(r[0] for mine in rows.values() for r in mine)
    end = skip_s + window_s
    return {k: [r for r in v if skip_s <= r[0] - first < end] for k, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--skip-s", type=float, default=60.0)
    ap.add_argument("--window-s", type=float, default=float("inf"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = read(args.trace, args.skip_s, args.window_s)
    every = [r for mine in rows.values() for r in mine]
    if not every:
        raise SystemExit(f"no run due after the first {args.skip_s:g} s")
    window = "" if args.window_s == float("inf") else f" --window-s {args.window_s:g}"
    print(f"# python benchmarks/start_phases.py {args.trace} --skip-s {args.skip_s:g}{window}")
    print(f"{len(every)} first attempts, {len(rows)} worker process(es)")
    print(f"{'phase':<9} {'runs':>7} {'p50 s':>7} {'p90 s':>7} {'p99 s':>7} {'max s':>7}")
    summary: dict[str, object] = {"runs": len(every), "workers": len(rows)}
    for i, name in enumerate(PHASES, 1):
        values = [r[i] for r in every if r[i] == r[i]]  # not nan: off the loop
        if not values:
            continue
        cells = {q: round(pct(values, q), 4) for q in (0.5, 0.9, 0.99)}
        print(f"{name:<9} {len(values):>7} {cells[0.5]:>7.3f} {cells[0.9]:>7.3f}"
              f" {cells[0.99]:>7.3f} {max(values):>7.3f}")  # fmt: skip
        summary[name] = {"p50": cells[0.5], "p90": cells[0.9], "p99": cells[0.99],
                         "max": round(max(values), 4)}  # fmt: skip
    seconds: list[tuple[int, float, float, float]] = []  # runs, first, median, last
    for mine in rows.values():
        by_second: dict[float, list[float]] = defaultdict(list)
        for r in mine:
            by_second[r[0]].append(r[-1])
        for began in by_second.values():
            seconds.append((len(began), min(began), statistics.median(began), max(began)))
    if seconds:
        print(
            f"one worker's second ({len(seconds)}): runs, then the started-after-due of "
            "its first, median and last start, each as p50 over the seconds"
        )
        for i, name in enumerate(("runs", "first", "median", "last")):
            col = [s[i] for s in seconds]
            print(f"  {name:<6} p50 {statistics.median(col):.3f}  max {max(col):.3f}")
        summary["per_second"] = {
            name: round(statistics.median([s[i] for s in seconds]), 4)
            for i, name in enumerate(("runs", "first", "median", "last"))
        }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()

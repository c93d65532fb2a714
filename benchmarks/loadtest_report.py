"""The full-size load tests' figures (docs/loadtest.md) from the suites' summaries.

    python benchmarks/loadtest_report.py out/loadtest-full --docs benchmarks/results/loadtest

Reads OUT/*/summary.json (written by `bash scripts/loadtest_full.sh OUT ...`), prints one
table row per run (every run, in the order made), copies each run's summary.json and lag
plot into --docs and draws the storms' p50/p99/max side by side with the target.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any


def row(name: str, s: dict[str, Any]) -> str:
    start, publish = s["start_lag"], s["publish_lag"]
    cpu = s.get("cpu", {})
    spent = cpu.get("cpu_s", {})
    runs = max(1, s["expected"])
    per_run = ", ".join(f"{g} {1e6 * v / runs:.0f}" for g, v in sorted(spent.items()))
    verdict = "PASS" if s["passed"] else "FAIL"
    arrival = s.get("arrival_lag") or {}
    arrived = f" / arrived p99 {arrival['p99_s']:.2f}" if arrival else ""
    return (
        f"| {name} | {verdict} | {s['expected']:,} | {s['started']:,} | {s['dropped']} | "
        f"{s['started_twice']} | {start['p50_s']:.3f} / {start['p99_s']:.3f} / "
        f"{start['max_s']:.3f}{arrived} | {publish['p50_s']:.2f} | "
        f"{cpu.get('wall_s', 0):.0f} s: {per_run} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--docs", type=Path, default=None)
    args = parser.parse_args()
    summaries = {}
    for path in sorted(args.out.glob("*/summary.json"), key=lambda p: p.stat().st_mtime):
        summaries[path.parent.name] = json.loads(path.read_text())
    print(
        "| run | verdict | runs due | started | dropped | started twice | "
        "start lag p50 / p99 / max (s) | published p50 (s, <0 = ahead) | "
        "CPU from T-1 s: wall, µs per run |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for name, s in summaries.items():
        print(row(name, s))
    if args.docs is None:
        return
    args.docs.mkdir(parents=True, exist_ok=True)
    for name, s in summaries.items():
        (args.docs / f"{name}.json").write_text(json.dumps(s, indent=1))
        for png in (args.out / name).glob("*_lag.png"):
            shutil.copy(png, args.docs / f"{name}.png")
    storms = {n: s for n, s in summaries.items() if s["suite"] == "storm"}
    if storms:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 3.5))
        names = list(storms)
        for i, key in enumerate(("p50_s", "p99_s", "max_s")):
            ax.bar(
                [j + 0.27 * (i - 1) for j in range(len(names))],
                [storms[n]["start_lag"][key] for n in names],
                width=0.27,
                label=key.replace("_s", ""),
            )
        ax.axhline(1.0, color="red", linestyle="--", label="target p99 1 s")
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("scheduled -> started (s)")
        ax.set_title("storms on 2 cores: every run (start lag measured on the worker)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        fig.savefig(args.docs / "storms.png", dpi=110)


if __name__ == "__main__":
    main()

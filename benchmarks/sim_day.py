"""Wall time and memory of the `day` scenario at full scale (10 million schedules, ~170
million runs a day), or of several days (a week: --days 7, from the Monday before the
DST Sunday).

    python benchmarks/sim_day.py [--days N] [--seed N] [--set key=value ...] [--json PATH]

Prints a progress line per simulated hour (wall time, runs retired, runs held, RSS),
then the figures: wall time (workload and model together), peak resident memory
(getrusage), runs, events/s, the peak window's and the whole period's p99 start lag,
drops, duplicates and runs in flight at the end, against the targets (a day in at most
300 s and 4 GB). Run it alone on the machine when the
figures are to be reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from datetime import datetime, timedelta

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from sim.cli import rss_gb
from sim.metrics import summarise
from sim.model import Model
from sim.scenario import load_profile, load_scenario

DAY_S = 86_400


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    sets = list(args.overrides)
    if args.days != 1:
        dst_day = datetime(2026, 3, 8)
        start = dst_day - timedelta(days=args.days - 1)
        sets = [f"duration_s={args.days * DAY_S}", f"start={start:%Y-%m-%dT00:00:00Z}", *sets]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    s = load_scenario("day", sets)
    m = Model(s, load_profile(None, s["profile"]), args.seed)
    shown = {"hour": None}

    def progress(t: float, limit: float) -> None:
        hour = int(t // 3600) if t >= 0 else -1
        if hour != shown["hour"]:
            shown["hour"] = hour
            print(
                f"  sim {t / 3600:6.1f} h  wall {time.perf_counter() - t0:7.1f} s  "
                f"runs done {m.stats.counts['generated'] / 1e6:7.2f} M  "
                f"held {m.runs.live / 1e6:5.2f} M  RSS {rss_gb():4.2f} GB",
                file=sys.stderr,
                flush=True,
            )

    m.run(progress)
    wall = time.perf_counter() - t0
    r = summarise(m, wall)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    mdl = r["model"]
    events = mdl["simpy_events"] + mdl["model_events"]
    budget_s, budget_gb = 300 * args.days, 4.0
    pw, wm = r["peak_window"], r["worst_minute"]
    figures = {
        "command": "python benchmarks/sim_day.py"
        + (f" --days {args.days}" if args.days != 1 else "")
        + f" --seed {args.seed}"
        + "".join(f" --set {o}" for o in args.overrides),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, Python "
        f"{platform.python_version()}",
        "load_average_before": round(load0, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "wall_s": round(wall, 1),
        "peak_rss_gb": round(peak_rss, 2),
        "runs": mdl["runs"],
        "jobs": mdl["jobs"],
        "simulated_s": mdl["simulated_s"],
        "events": events,
        "events_per_s": round(events / wall),
        "peak_live_runs": mdl["peak_live_runs"],
        "peak_window": f"{pw['from']} ({pw['due']:,} due): p99 {pw['start_lag_s']['p99']} s",
        "worst_minute": f"{wm['from']}: p99 {wm['start_lag_s']['p99']} s",
        "whole_period_p99_s": r["start_lag_s"]["p99"],
        "dropped": r["audit"]["dropped"],
        "duplicated": r["audit"]["duplicated"],
        "in_flight_at_end": r["in_flight_at_end"],
        "target": f"{budget_s} s and {budget_gb} GB",
        "met": wall <= budget_s and peak_rss <= budget_gb,
    }
    for k, v in figures.items():
        print(f"{k + ':':<22}{v}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The notebooks' one door into the capacity model: the public `cronfleet sim` command, run
with --json, and the few numbers the notebooks read from its result. If the result's shape
changes, this file is the one place to follow it.

CRONFLEET_NOTEBOOK_SIZE=small (the tests) runs every notebook on a workload 50 times smaller
with a coarse grid; unset or `full`, the requirements' numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZE = os.environ.get("CRONFLEET_NOTEBOOK_SIZE", "full")
if SIZE not in ("full", "small"):
    raise ValueError(f"CRONFLEET_NOTEBOOK_SIZE: full or small, got {SIZE!r}")
SMALL = SIZE == "small"


@dataclass(frozen=True)
class ModelRun:
    nodes: int
    workers: int
    partitions: int
    p50_start_s: float
    p99_start_s: float
    max_start_s: float
    p99_dispatch_s: float  # scheduled time to the publish done
    fired: int
    dropped: int
    duplicated: int
    backlog_drain_s: float
    max_queue_depth: int
    wall_s: float
    command: str


def workload(schedules: int, runs_per_s: float, peak_runs_per_s: float) -> dict[str, object]:
    """Overrides of the top-of-hour workload (every-minute jobs scale with the schedules)."""
    return {
        "workload.schedules": schedules,
        "workload.runs_per_s": runs_per_s,
        "workload.peak_runs_per_s": peak_runs_per_s,
        "workload.frequent_jobs": max(1, schedules // 500),
    }


def around_the_peak(window_s: int = 90, lead_s: int = 20) -> dict[str, object]:
    """The window `cronfleet sim size` simulates: the peak `lead_s` into `window_s`."""
    return {"duration_s": window_s, "peak_at_s": lead_s, "drain_s": 600}


def simulate(scenario: str, sets: dict[str, object], seed: int = 1) -> ModelRun:
    """`cronfleet sim SCENARIO --set k=v ... --seed N --json FILE`, read back."""
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "kit.cli", "sim", scenario, *args, "--seed", str(seed),
               "--quiet", "--json", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        r = json.loads(out.read_text())
    lag, audit, fleet = r["start_lag_s"], r["audit"], r["fleet"]
    return ModelRun(
        nodes=int(fleet["nodes"]),
        workers=int(fleet["workers"]),
        partitions=int(fleet["partitions"]),
        p50_start_s=float(lag["p50"] or 0.0),
        p99_start_s=float(lag["p99"] or 0.0),
        max_start_s=float(lag["max"] or 0.0),
        p99_dispatch_s=float(r["dispatch_lag_s"]["p99"] or 0.0),
        fired=int(audit["fired"]),
        dropped=int(audit["dropped"]),
        duplicated=int(audit["duplicated"]),
        backlog_drain_s=float(r.get("backlog_drain_s") or 0.0),
        max_queue_depth=int(r["max_queue_depth"]),
        wall_s=float(r["model"]["wall_s"]),
        command=r["command"],
    )

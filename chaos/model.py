"""What the capacity model predicts for the fault a drill just injected: a scenario of the
drill's fleet (nodes, workers, concurrency, the drill's short leases), workload (its run
rate and peak) and fault (the same sim/faults.py kind, for the drill's measured mean
duration), run through the model's own CLI, `cronfleet sim SCENARIO --json`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.drill import Drill
    from chaos.runner import RunOptions

PEAK_AT_S = 60.0


def measured_faults(out: Path) -> dict[str, float]:
    """Mean duration (s) of each fault kind the drill recorded (read back from its
    result file's history written by the report), and the poison share of its fires."""
    path = out / "faults.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    spans: dict[str, list[float]] = defaultdict(list)
    for f in data.get("faults", []):
        spans[f["kind"]].append((f["heal_ms"] - f["start_ms"]) / 1000)
    measured = {k: round(sum(v) / len(v), 2) for k, v in spans.items()}
    if "worker_kill_mid_task" in measured:
        measured.setdefault("worker_kill_after_effect", measured["worker_kill_mid_task"])
    if data.get("poison_share") is not None:
        measured["poison_share"] = data["poison_share"]
    if data.get("skew_offset_s") is not None:
        measured["clock_skew_offset"] = data["skew_offset_s"]
    return measured


def scenario(drill: Drill, opts: RunOptions, rate_per_s: float, measured: dict[str, float]) -> str:
    t = opts.timings
    shape = drill.shape()
    faults = drill.model_faults(PEAK_AT_S, measured)
    lines = [
        f'name = "chaos-{drill.name}"',
        f'description = "the chaos drill {drill.name}: its fleet, workload and fault"',
        "duration_s = 120",
        f"peak_at_s = {PEAK_AT_S}",
        "drain_s = 120",
        "[workload]",
        "schedules = 2000",
        f"runs_per_s = {max(rate_per_s, 1.0):.2f}",
        f"peak_runs_per_s = {max(shape.burst, rate_per_s + 1):.1f}",
        "peak_spread_s = 1",
        "frequent_jobs = 6",
        'misfire = "run_all"',
        "[workload.retry]",
        "max_attempts = 25",
        "base_s = 0.2",
        "cap_s = 2.0",
        'jitter = "none"',
        "[workload.classes.http]",
        "share = 0.0",
        "[workload.classes.batch]",
        "share = 0.0",
        "[workload.classes.report]",
        "share = 1.0",
        'dist = "lognormal"',
        "mean_s = 0.15",
        "cv = 1.0",
        "fail_p = 0.0",
        "[fleet]",
        f"nodes = {drill.schedulers}",
        f"partitions = {t.partitions}",
        f"workers = {drill.workers}",
        f"concurrency = {drill.concurrency}",
        "db_connections = 20",
        f"kafka_partitions = {t.topic_partitions}",
        "[leases]",
        f"partition_ttl_s = {t.partition_lease_ttl_ms / 1000}",
        f"renew_s = {t.node_heartbeat_ms / 1000}",
        f"run_ttl_s = {t.run_lease_ttl_ms / 1000}",
        f"heartbeat_s = {t.run_lease_ttl_ms / 3000:.3f}",
        f"scan_ahead_s = {t.scan_ahead_ms / 1000}",
        f"unclaimed_grace_s = {t.unclaimed_grace_ms / 1000}",
        "[reaper]",
        f"period_s = {t.reaper_period_ms / 1000}",
    ]
    for fault in faults:
        lines.append("[[faults]]")
        for key, value in fault.items():
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def predict(drill: Drill, opts: RunOptions, out: Path) -> dict[str, Any] | None:
    """Run the model on the drill's scenario; None (said in the report) if it fails."""
    measured = measured_faults(out)
    rate = _rate(out)
    path = out / "model-scenario.toml"
    path.write_text(scenario(drill, opts, rate, measured))
    result_path = out / "model.json"
    argv = [sys.executable, "-m", "kit.cli", "sim", str(path), "--seed", str(opts.seed)]
    argv += ["--json", str(result_path), "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not result_path.exists():
        return {"error": (done.stderr or done.stdout).strip()[-500:], "command": " ".join(argv)}
    data = json.loads(result_path.read_text())
    audit = data["audit"]
    return {
        "command": f"cronfleet sim {path} --seed {opts.seed} --json {result_path}",
        "faults": [f for f in drill.model_faults(PEAK_AT_S, measured)],
        "expected": audit["expected"],
        "dropped": audit["dropped"],
        "duplicated": audit["duplicated"],
        "dead_lettered": audit["dead_lettered"],
        "executions": audit["executions"],
        "start_lag_s": data["start_lag_s"],
        "backlog_drain_s": data.get("backlog_drain_s"),
    }


def _rate(out: Path) -> float:
    path = out / "faults.json"
    if not path.exists():
        return 5.0
    return float(json.loads(path.read_text()).get("rate_per_s") or 5.0)

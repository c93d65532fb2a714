"""cronfleet calibrate's storm inputs: the worker's start, fence and lag paths measured on
kit.worker, and a burst sampled thread by thread (benchmarks/burst_at_t.py) turned into
each step's CPU per run for the storm model."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from sim.calibrate import (
    measure_worker_starts,
    median_by_key,
    storm_at_t,
    storm_cpu,
    update_profile,
)


def test_the_worker_start_path_is_measured_on_the_kits_own_worker():
    got = measure_worker_starts(2000, repeats=1)
    assert set(got) == {
        "worker_hold_add_s",
        "worker_wheel_pop_s",
        "worker_start_inline_s",
        "worker_fence_pass_per_run_s",
        "worker_observe_lag_s",
    }
    assert all(0 < v < 1e-3 for v in got.values())


def test_the_worker_paths_beside_the_starts_are_measured_on_the_kits_own_worker():
    got = measure_worker_starts(2000, repeats=1)
    assert 0 < got["worker_fence_pass_per_run_s"] < 1e-4
    assert 0 < got["worker_observe_lag_s"] < 1e-4


def _burst(tmp_path: Path, **phases: dict) -> Path:
    p = tmp_path / "burst.json"
    p.write_text(json.dumps({"succeeded": 1000, "cpu_by_phase_s": phases}))
    return p


IDLE = {"kafka_broker": 0.5, "wall_s": 10.0}  # the broker's idle rate: 50 ms a second
AHEAD = {"kafka_broker": 1.0, "wall_s": 10.5}
AFTER = {"kafka_broker": 0.2, "wall_s": 2.0}

WINDOWS = {
    "T-0.3..T": [-0.3, 0.0],
    "T..T+0.3": [0.0, 0.3],
    "T+0.3..T+1": [0.3, 1.0],
    "ahead": [-10.5, 0.0],
    "after": [0.0, 6.0],
}


def _cat(at_t: float = 0.0, ahead: float = 0.0, after: float = 0.0, before: float = 0.0):
    """ms on a core by window (and 1 ms waiting, which the calibration does not use)."""
    return {
        "T-0.3..T": [before, 1.0],
        "T..T+0.3": [at_t, 1.0],
        "T+0.3..T+1": [0.0, 1.0],
        "ahead": [ahead, 1.0],
        "after": [after, 1.0],
    }


def _sampled(tmp_path: Path, cats: dict, busy_ahead: float, sampler_ms: float = 0.0) -> Path:
    p = tmp_path / "all_at_t.json"
    p.write_text(
        json.dumps(
            {
                "windows": WINDOWS,
                "by_category_ms": cats,
                "machine_busy_ms": {"ahead": busy_ahead},
                "sampler_cpu_ms": sampler_ms,
            }
        )
    )
    return p


CATS = {
    "scheduler scan": _cat(ahead=50.0),
    "scheduler publish": _cat(ahead=10.0),
    "scheduler native": _cat(ahead=1.0),
    "postgres for scheduler": _cat(ahead=30.0),
    "postgres for worker-1": _cat(ahead=10.0, after=30.0, at_t=20.0),
    "postgres for worker-2": _cat(ahead=12.0, after=28.0, at_t=20.0),
    "worker-1 main": _cat(ahead=20.0),
    "worker-2 main": _cat(ahead=22.0),
    "worker-1 native": _cat(ahead=1.0),
    "worker-2 native": _cat(ahead=2.0),
    "worker-1 fence": _cat(ahead=3.0, at_t=1.0),
    "worker-1 hold": _cat(at_t=2.0, before=1.0),  # 1 + 2 = 3 ms
    "worker-2 hold": _cat(at_t=3.0),
    "worker-1 finisher": _cat(after=6.0, at_t=5.0),
    "worker-2 finisher": _cat(after=4.0, at_t=5.0),
    "worker-2 heartbeat": _cat(after=9.0, at_t=9.0),
    "broker": _cat(ahead=600.0, after=110.0, at_t=15.0),
    "postgres for the benchmark": _cat(ahead=40.0, at_t=20.0),
    "sampler": _cat(ahead=30.0, at_t=40.0),
    "worker-2 other": _cat(ahead=5.0, at_t=5.0),
    "other processes": _cat(ahead=100.0, at_t=10.0),
}


def test_each_step_of_a_sampled_storm_becomes_its_cpu_per_run(tmp_path):
    """burst_at_t.py's categories, thread by thread: the scan-ahead's steps per run from
    the `ahead` window, the finishes' from `after`, the broker less its idle rate."""
    at_t = storm_at_t(_sampled(tmp_path, CATS, busy_ahead=1000.0))
    got = storm_cpu(_burst(tmp_path, idle=IDLE, ahead=AHEAD, after=AFTER), at_t)
    per_run = {k: v * 1e6 for k, v in got.items() if k.endswith("_per_run_s")}  # us
    assert per_run["storm_ahead_scheduler_scan_cpu_per_run_s"] == pytest.approx(50.0)
    assert per_run["storm_ahead_scheduler_publish_cpu_per_run_s"] == pytest.approx(10.0)
    assert per_run["storm_ahead_scheduler_native_cpu_per_run_s"] == pytest.approx(1.0)
    assert per_run["storm_ahead_postgres_scan_cpu_per_run_s"] == pytest.approx(30.0)
    assert per_run["storm_ahead_postgres_claim_cpu_per_run_s"] == pytest.approx(22.0)
    assert per_run["storm_ahead_worker_claim_cpu_per_run_s"] == pytest.approx(42.0)
    assert per_run["storm_ahead_worker_native_cpu_per_run_s"] == pytest.approx(3.0)
    # the broker's 600 ms less its idle 50 ms a second over the 10.5 s
    assert per_run["storm_ahead_broker_cpu_per_run_s"] == pytest.approx(75.0)
    assert per_run["storm_after_worker_finish_cpu_per_run_s"] == pytest.approx(10.0)
    assert per_run["storm_after_postgres_cpu_per_run_s"] == pytest.approx(58.0)
    assert per_run["storm_after_broker_cpu_per_run_s"] == pytest.approx(0.0)  # 110 < 300 idle
    assert per_run["storm_at_t_start_cpu_per_run_s"] == pytest.approx(6.0)  # 3 + 3 ms
    # the rest of the machine in the scan-ahead: busy less the steps (the broker's idle rate
    # stays the rest's), the fence passes (the model's own) and the sampler, per second
    steps = 50 + 10 + 1 + 30 + 22 + 42 + 3 + 75 + 3
    assert got["storm_other_cpu_per_s"] == pytest.approx((1000.0 - steps - 30.0) / 1000 / 10.5)
    # at T: everything but the holds, finishers, fences, heartbeats, the workers' backends
    # and the sampler
    assert got["storm_at_t_cpu_s"] == pytest.approx((15 + 20 + 5 + 10) / 1000)
    assert got["storm_at_t_window_s"] == pytest.approx(0.3)


def test_the_rest_at_t_is_also_taken_100_ms_at_a_time(tmp_path):
    """burst_at_t.py's 20 ms slots (by slot start): the rest of the machine at T in each
    100 ms of the window, the model's own threads and the sampler left out."""
    path = _sampled(tmp_path, CATS, busy_ahead=1000.0)
    d = json.loads(path.read_text())
    d["slots_ms"] = {
        "scheduler scan": {"-0.02": 9.0, "+0.00": 12.0, "+0.04": 3.0},
        "broker": {"+0.08": 1.0, "+0.12": 2.0, "+0.28": 4.0, "+0.30": 50.0},
        "worker-1 hold": {"+0.00": 18.0},
        "postgres for worker-2": {"+0.20": 19.0},
        "sampler": {"+0.10": 5.0},
    }
    path.write_text(json.dumps(d))
    at_t = storm_at_t(path)
    assert at_t["storm_at_t_slot_s"] == pytest.approx(0.1)
    assert [at_t[f"storm_at_t_slot_{k}_cpu_s"] for k in range(3)] == pytest.approx(
        [0.016, 0.002, 0.004]
    )
    assert "storm_at_t_slot_3_cpu_s" not in at_t
    got = storm_cpu(_burst(tmp_path, idle=IDLE, ahead=AHEAD, after=AFTER), at_t)
    assert got["storm_at_t_slot_0_cpu_s"] == pytest.approx(0.016)


def test_a_storm_not_sampled_from_the_scan_ahead_to_the_last_finish_is_refused(tmp_path):
    burst = _burst(tmp_path, idle=IDLE, ahead=AHEAD, after=AFTER)
    short = tmp_path / "short.json"
    short.write_text(
        json.dumps(
            {
                "windows": {k: v for k, v in WINDOWS.items() if k.startswith("T")},
                "by_category_ms": {"worker-1 hold": _cat(at_t=1.0)},
            }
        )
    )
    with pytest.raises(SystemExit, match="scan-ahead's start"):
        storm_cpu(burst, storm_at_t(short))
    long_after = _burst(tmp_path, idle=IDLE, ahead=AHEAD, after={**AFTER, "wall_s": 9.0})
    with pytest.raises(SystemExit, match="--after"):
        storm_cpu(long_after, storm_at_t(_sampled(tmp_path, CATS, busy_ahead=1000.0)))
    with pytest.raises(SystemExit, match="cpu_by_phase_s"):
        storm_cpu(_burst(tmp_path, ahead=AHEAD), storm_at_t(_sampled(tmp_path, CATS, 1000.0)))
    with pytest.raises(SystemExit, match="hold thread"):
        storm_at_t(_sampled(tmp_path, {"broker": _cat(at_t=1.0)}, 1.0))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="by_category_ms"):
        storm_at_t(tmp_path / "bad.json")


def test_update_profile_replaces_only_what_it_measured(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text(
        "[service_times]\nclaim_s = 0.5\nworker_start_inline_s = 9\nstorm_old_s = 1\n\n"
        '[measured]\nsource = "x"\n'
    )
    update_profile(prof, {"worker_start_inline_s": 2e-6}, 10, {"storm_other_cpu_per_s": 0.1}, "b")
    text = prof.read_text()
    assert "claim_s = 0.5" in text
    assert "worker_start_inline_s = 0.000002000" in text and "= 9" not in text
    assert "storm_old_s" not in text and "storm_other_cpu_per_s = 0.100000000" in text
    assert 'source = "x"' in text and "worker_starts =" in text and "storm_cpu =" in text
    with pytest.raises(SystemExit, match="no such profile"):
        update_profile(tmp_path / "none.toml", {}, 1)


def test_only_the_storm_keys_leave_the_measured_start_path_and_its_note(tmp_path):
    """cronfleet calibrate --only-storm: no timing measurement, the start path's values and
    the note saying when they were measured stay."""
    prof = tmp_path / "p.toml"
    prof.write_text(
        "[service_times]\nworker_start_inline_s = 0.000001\nstorm_other_cpu_per_s = 9\n\n"
        '[measured]\nworker_starts = "measured at noon"\n'
    )
    update_profile(prof, {}, 0, {"storm_at_t_cpu_s": 0.065}, "b.json", starts_measured=False)
    text = prof.read_text()
    assert "worker_start_inline_s = 0.000001" in text
    assert 'worker_starts = "measured at noon"' in text and text.count("worker_starts =") == 1
    assert "storm_at_t_cpu_s = 0.065000000" in text and "storm_other_cpu_per_s" not in text


def test_several_sampled_runs_give_each_key_its_median():
    """One run's storm can carry what is not the kit's (an autovacuum at T): its keys are
    outvoted by the other runs', and a key only some runs have is the median of those."""
    runs = [
        {"storm_at_t_cpu_s": 0.060, "storm_at_t_slot_0_cpu_s": 0.02},
        {"storm_at_t_cpu_s": 0.183, "storm_at_t_slot_0_cpu_s": 0.09},  # autovacuum at T
        {"storm_at_t_cpu_s": 0.066},
    ]
    assert median_by_key(runs) == pytest.approx(
        {"storm_at_t_cpu_s": 0.066, "storm_at_t_slot_0_cpu_s": 0.055}
    )


def test_calibrate_takes_the_median_of_the_sampled_runs_it_is_given(tmp_path):
    """`cronfleet calibrate --only-storm` with three sampled runs, one of them with twice
    the PostgreSQL CPU in the scan-ahead: the profile gets the middle run's figure."""
    from kit.cli import main

    pairs = []
    for i, pg in enumerate((30.0, 60.0, 33.0)):
        d = tmp_path / f"s{i}"
        d.mkdir()
        burst = _burst(d, idle=IDLE, ahead=AHEAD, after=AFTER)
        sampled = _sampled(d, {**CATS, "postgres for scheduler": _cat(ahead=pg)}, 1000.0)
        pairs += ["--storm-cpu", str(burst), "--storm-at-t", str(sampled)]
    one = storm_cpu(Path(pairs[1]), storm_at_t(Path(pairs[3])))
    middle = storm_cpu(Path(pairs[9]), storm_at_t(Path(pairs[11])))
    prof = tmp_path / "p.toml"
    prof.write_text("[service_times]\nclaim_s = 0.5\n\n[measured]\n")
    assert main(["calibrate", "--only-storm", *pairs, "--out", str(prof)]) == 0
    got = tomllib.loads(prof.read_text())["service_times"]
    changed = [k for k in one if one[k] != middle[k]]
    assert changed  # the PostgreSQL CPU of the scan moved some keys
    for k in changed:
        assert got[k] == pytest.approx(middle[k], rel=1e-6)
    assert "median of the 3 runs" in tomllib.loads(prof.read_text())["measured"]["storm_cpu"]
    with pytest.raises(SystemExit, match="as many of one"):
        main(["calibrate", "--only-storm", *pairs[:6], "--storm-cpu", pairs[1], "--out", str(prof)])

"""cronfleet calibrate's storm inputs: the worker's start path measured on kit.worker,
and a burst's CPU by phase turned into per-run CPU for the storm model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.calibrate import measure_worker_starts, storm_at_t, storm_cpu, update_profile


def test_the_worker_start_path_is_measured_on_the_kits_own_worker():
    got = measure_worker_starts(2000, repeats=1)
    assert set(got) == {"worker_hold_add_s", "worker_wheel_pop_s", "worker_start_inline_s"}
    assert all(0 < v < 1e-3 for v in got.values())


def _burst(tmp_path: Path, **phases: dict) -> Path:
    p = tmp_path / "burst.json"
    p.write_text(json.dumps({"succeeded": 1000, "cpu_by_phase_s": phases}))
    return p


AHEAD = {
    "scheduler": 0.06,
    "worker": 0.07,
    "postgres_backends": 0.066,
    "kafka_broker": 0.014,
    "reaper": 0.0,
    "this_benchmark": 0.01,
    "machine_busy": 1.22,
    "wall_s": 10.0,
}
AFTER = {
    "scheduler": 0.0,
    "worker": 0.012,
    "postgres_backends": 0.056,
    "kafka_broker": 0.002,
    "reaper": 0.0,
    "this_benchmark": 0.0,
    "machine_busy": 0.47,
    "wall_s": 2.0,
}


def test_a_bursts_cpu_by_phase_becomes_cpu_per_run_and_the_rest_of_the_machine(tmp_path):
    got = storm_cpu(_burst(tmp_path, ahead=AHEAD, after=AFTER))
    assert got["storm_ahead_worker_cpu_per_run_s"] == pytest.approx(70e-6)
    assert got["storm_after_postgres_cpu_per_run_s"] == pytest.approx(56e-6)
    # (1.22 - 0.22) + (0.47 - 0.07) CPU seconds of others over 12 s
    assert got["storm_other_cpu_per_s"] == pytest.approx(1.4 / 12)


def test_a_burst_without_phases_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="cpu_by_phase_s"):
        storm_cpu(_burst(tmp_path, ahead=AHEAD))
    old = {k: v for k, v in AFTER.items() if k != "machine_busy"}
    with pytest.raises(SystemExit, match="machine_busy"):
        storm_cpu(_burst(tmp_path, ahead=AHEAD, after=old))


def _at_t(tmp_path: Path, cats: dict[str, dict[str, list[float]]], sampler_ms: float) -> Path:
    p = tmp_path / "all_at_t.json"
    windows = {"T-0.3..T": [-0.3, 0.0], "T..T+0.3": [0.0, 0.3], "T+0.3..T+1": [0.3, 1.0]}
    p.write_text(
        json.dumps({"windows": windows, "by_category_ms": cats, "sampler_cpu_ms": sampler_ms})
    )
    return p


def test_the_second_of_a_sampled_storm_becomes_start_cpu_per_run_and_the_rest_at_t(tmp_path):
    """burst_at_t.py's categories: the hold threads' CPU (all windows) per run started;
    from T to T + 0.3 s everything the model does not run itself, the sampler left out."""
    w = lambda on: {"T-0.3..T": [0.0, 0.0], "T..T+0.3": [on, 1.0], "T+0.3..T+1": [1.0, 0.0]}  # noqa: E731
    cats = {
        "worker-1 hold": {**w(2.0), "T-0.3..T": [1.0, 0.0]},  # 1 + 2 + 1 = 4 ms
        "worker-2 hold": w(3.0),  # 0 + 3 + 1 = 4 ms
        "worker-1 finisher": w(50.0),
        "postgres for worker-2": w(60.0),
        "sampler": w(40.0),
        "postgres for the benchmark": w(20.0),
        "broker": w(15.0),
        "worker-2": w(5.0),  # its fence, main and link threads
        "other processes": w(10.0),
    }
    at_t = storm_at_t(_at_t(tmp_path, cats, sampler_ms=300.0))
    assert at_t["hold_cpu_s"] == pytest.approx(0.008)
    assert at_t["storm_at_t_cpu_s"] == pytest.approx(0.050)
    assert at_t["storm_at_t_window_s"] == pytest.approx(0.3)
    got = storm_cpu(_burst(tmp_path, ahead=AHEAD, after=AFTER), at_t)
    assert got["storm_at_t_start_cpu_per_run_s"] == pytest.approx(8e-6)  # 8 ms / 1000 runs
    assert got["storm_at_t_cpu_s"] == pytest.approx(0.050)
    # the sampler's 0.3 s is not the rest of the machine's
    assert got["storm_other_cpu_per_s"] == pytest.approx((1.4 - 0.3) / 12)
    with pytest.raises(SystemExit, match="hold thread"):
        storm_at_t(_at_t(tmp_path, {"broker": w(1.0)}, 0.0))
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

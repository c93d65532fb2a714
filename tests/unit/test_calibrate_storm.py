"""cronfleet calibrate's storm inputs: the worker's start path measured on kit.worker,
and a burst's CPU by phase turned into per-run CPU for the storm model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.calibrate import measure_worker_starts, storm_cpu, update_profile


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

"""cronfleet calibrate's task costs (`--only-tasks`): the arithmetic that turns rounds of
http and command tasks into the CPU per task the storm model charges."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sim.calibrate import (
    HTTP_STORM_KEYS,
    TASK_KEYS,
    TaskRound,
    carried_over,
    http_storm_costs,
    task_costs,
)


def test_each_task_cost_is_the_median_per_task_over_the_rounds():
    http = [
        TaskRound(1000, loop_s=0.20, loop_unsent_s=0.05, submit_s=0.001, target_s=0.04),
        TaskRound(2000, loop_s=0.30, loop_unsent_s=0.08, submit_s=0.002, target_s=0.10),
        TaskRound(1000, loop_s=0.90, loop_unsent_s=0.06, submit_s=0.003, target_s=0.05),
    ]
    command = [
        TaskRound(100, submit_s=0.004, worker_s=0.2, target_s=0.08),
        TaskRound(100, submit_s=0.006, worker_s=0.3, target_s=0.10),
        TaskRound(100, submit_s=0.005, worker_s=0.1, target_s=0.09),
    ]
    got = task_costs(http, command)
    assert set(got) == set(TASK_KEYS)
    assert got["worker_http_loop_cpu_s"] == pytest.approx(200e-6)  # 200, 150, 900 us
    assert got["worker_http_loop_before_send_s"] == pytest.approx(50e-6)  # 50, 40, 60
    assert got["worker_http_submit_s"] == pytest.approx(1e-6)  # 1, 1, 3
    assert got["http_target_cpu_s"] == pytest.approx(50e-6)  # 40, 50, 50
    assert got["worker_command_cpu_s"] == pytest.approx(2e-3)
    assert got["worker_command_submit_s"] == pytest.approx(50e-6)
    assert got["command_child_cpu_s"] == pytest.approx(0.9e-3)


def test_a_part_before_the_send_larger_than_the_whole_request_is_refused():
    with pytest.raises(RuntimeError, match="exceeds"):
        task_costs([TaskRound(10, loop_s=0.001, loop_unsent_s=0.002)], [])


def test_only_the_kinds_measured_are_returned():
    got = task_costs([], [TaskRound(10, submit_s=0.0, worker_s=0.01, target_s=0.005)])
    assert set(got) == {"worker_command_cpu_s", "worker_command_submit_s", "command_child_cpu_s"}


def test_a_full_calibration_keeps_the_task_costs_and_their_note():
    old = {
        "service_times": {
            "worker_http_loop_cpu_s": 1e-4,
            "claim_s": 1.0,
            "worker_hold_add_s": 1e-6,
        },
        "measured": {"task_costs": "how", "scan": "old"},
    }
    numbers, notes = carried_over(old, keep_worker_starts=False)
    assert numbers == {"worker_http_loop_cpu_s": 1e-4}
    assert notes == {"task_costs": "how"}


def _burst(tmp_path, name: str, **fields) -> str:
    r = {"task": "http", "mode": "burst", "arrived": 5000, "lag_s": [0.5, 1.0, 1.1]} | fields
    path = tmp_path / name
    path.write_text(json.dumps(r))
    return str(path)


def test_the_http_storm_costs_are_the_median_over_the_bursts_given(tmp_path):
    runs = [
        _burst(tmp_path, f"b{i}.json", task_loop_cpu_ms_per_task=loop, target_cpu_ms_per_request=t)
        for i, (loop, t) in enumerate([(0.30, 0.08), (0.45, 0.12), (0.35, 0.09)])
    ]
    costs, note = http_storm_costs([Path(r) for r in runs], "here")
    assert set(costs) == set(HTTP_STORM_KEYS)
    assert costs["http_storm_loop_cpu_s"] == pytest.approx(350e-6)
    assert costs["http_storm_target_cpu_s"] == pytest.approx(90e-6)
    assert "b0.json" in note and "b2.json" in note and "here" in note


def test_a_file_that_is_not_an_http_burst_or_lacks_the_costs_is_refused(tmp_path):
    noop = _burst(tmp_path, "n.json", task="command", task_loop_cpu_ms_per_task=0.3)
    with pytest.raises(SystemExit, match="not an http burst"):
        http_storm_costs([Path(noop)], "here")
    old = _burst(tmp_path, "old.json")
    with pytest.raises(SystemExit, match="task_loop_cpu_ms_per_task"):
        http_storm_costs([Path(old)], "here")
    with pytest.raises(SystemExit, match=r"missing\.json"):
        http_storm_costs([tmp_path / "missing.json"], "here")


def test_the_cli_sets_the_http_storm_keys_and_a_full_calibration_keeps_them(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text(
        "[service_times]\nworker_http_loop_cpu_s = 0.0001\nclaim_s = 1.0\n\n"
        '[measured]\nscan = "x"\n'
    )
    run = _burst(tmp_path, "b.json", task_loop_cpu_ms_per_task=0.4, target_cpu_ms_per_request=0.1)
    p = subprocess.run(
        [sys.executable, "-m", "kit.cli", "calibrate", "--out", str(profile), "--http-storm", run],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    data = tomllib.loads(profile.read_text())
    assert data["service_times"]["http_storm_loop_cpu_s"] == pytest.approx(400e-6)
    assert data["service_times"]["http_storm_target_cpu_s"] == pytest.approx(100e-6)
    assert data["service_times"]["worker_http_loop_cpu_s"] == pytest.approx(1e-4)  # kept
    assert "b.json" in data["measured"]["http_storm"]
    old = {"service_times": data["service_times"], "measured": data["measured"]}
    numbers, notes = carried_over(old, keep_worker_starts=False)
    assert set(HTTP_STORM_KEYS) <= set(numbers) and "http_storm" in notes

"""cronfleet calibrate's task costs (`--only-tasks`): the arithmetic that turns rounds of
http and command tasks into the CPU per task the storm model charges."""

from __future__ import annotations

import pytest

from kit.calibrate import TASK_KEYS, TaskRound, carried_over, task_costs


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

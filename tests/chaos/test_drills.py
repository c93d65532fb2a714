"""Every drill for a few cycles on the real stack (its own PostgreSQL and Kafka, real
processes, real faults), audited: nothing lost, no duplicate effect, no stale write
accepted, and the fault did happen. Then the drills must be able to fail: a planted bug
(chaos.plants) is reported as lost or stale, and a drill that cannot set up its fault
fails saying so.

`cronfleet chaos run all --cycles 100` is the full drill (docs/chaos.md); CI runs this
short set."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.drills import DRILLS
from chaos.ledger import leftover_tasks
from chaos.stack import ChaosStack
from tests.chaos.conftest import drill_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CI_CYCLES = 1  # CI's time goes to the drills; the plants below run the cycles they need
SEED = 1012
# worker-kill runs as README.md writes it (2 cycles, default options): test_readme_drill.py
SHORT_SET = [name for name in DRILLS if name != "worker-kill"]


@pytest.mark.parametrize("name", SHORT_SET)
def test_drill_passes_and_its_fault_happened(
    name: str, chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    result = drill_run(DRILLS[name](), chaos_stack, tmp_path, CI_CYCLES, SEED)
    print("\n".join(result.notes))  # shown by pytest if the test fails: the drill's diagnosis
    assert result.error is None, result.error
    assert result.audit is not None and result.history is not None
    a = result.audit
    assert a.expected > 0 and a.effects > 0
    assert all(isinstance(r.scheduled_ms, int) for r in result.history.runs)
    assert a.lost == [], a.lost[:5]
    assert a.duplicate_effects == [], a.duplicate_effects[:5]
    assert a.stale_writes == [], a.stale_writes[:5]
    assert a.unexpected_effects == [] and a.unexpected_runs == []
    assert len(result.history.faults) >= CI_CYCLES, "the drill never injected its fault"
    report = (tmp_path / name / "report.md").read_text()
    assert all(f"({plot})" in report for plot in ("lag.png", "starts.png", "cycles.png"))
    assert all((tmp_path / name / plot).stat().st_size > 0 for plot in ("lag.png", "starts.png"))
    assert result.passed
    assert leftover_tasks(tmp_path / name / "ledger") == [], "the drill left tasks running"


def test_a_worker_acking_before_the_effect_is_caught_as_lost(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    plants = {"worker": "chaos.plants.ack_before_effect"}
    result = drill_run(DRILLS["worker-kill"](), chaos_stack, tmp_path, 2, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("marked succeeded" in f.why for f in result.audit.lost), result.audit.lost[:5]


def test_a_scheduler_without_its_epoch_check_is_caught_as_stale(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    plants = {"scheduler": "chaos.plants.no_epoch_check"}
    result = drill_run(DRILLS["scheduler-kill"](), chaos_stack, tmp_path, 1, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("fired a trigger of partition" in w for w in result.audit.stale_writes)


def test_a_reaper_ignoring_the_lease_is_caught_as_stale(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    plants = {"reaper": "chaos.plants.reaper_ignores_lease"}
    result = drill_run(DRILLS["worker-kill"](), chaos_stack, tmp_path, 1, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("before its lease expired" in w for w in result.audit.stale_writes)


def test_a_drill_that_cannot_set_up_its_fault_fails_saying_so(
    chaos_stack: ChaosStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONFLEET_CHAOS_LIBFAKETIME", str(tmp_path / "no-libfaketime.so"))
    result = drill_run(DRILLS["clock-skew"](), chaos_stack, tmp_path, 1, SEED)
    assert not result.passed
    assert result.error is not None and result.error.startswith("cannot set up the fault")
    assert "libfaketime" in result.error


def test_the_one_look_a_beat_heartbeat_is_caught_running_runs_twice_in_a_short_stall(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    """Cycles 0 and 2 stall PostgreSQL for less than a run lease less a beat."""
    plants = {"worker": "chaos.plants.one_look_a_beat"}
    result = drill_run(DRILLS["postgres-stall"](), chaos_stack, tmp_path, 3, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("the leases outlive" in f.why for f in result.audit.started_twice_once)


def test_a_reaper_that_never_republishes_is_caught_losing_runs_to_a_broker_stall(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    """Cycle 1 freezes the broker past the publish timeout: publishes fail."""
    plants = {"reaper": "chaos.plants.reaper_never_republishes"}
    result = drill_run(DRILLS["broker-stall"](), chaos_stack, tmp_path, 2, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("last published never" in f.why for f in result.audit.lost), result.audit.lost[:3]


def test_a_keeper_without_deadlines_is_caught_letting_a_frozen_workers_task_run_on(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    plants = {"worker": "chaos.plants.keeper_ignores_deadlines"}
    result = drill_run(DRILLS["worker-freeze"](), chaos_stack, tmp_path, 2, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("after attempt" in f.why for f in result.audit.overlapping)


def test_a_scheduler_without_its_epoch_check_is_caught_writing_after_a_freeze(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    plants = {"scheduler": "chaos.plants.no_epoch_check"}
    result = drill_run(DRILLS["node-freeze"](), chaos_stack, tmp_path, 2, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("fired a trigger of partition" in w for w in result.audit.stale_writes)


def test_an_api_that_calls_a_full_disk_unavailable_fails_the_disk_full_drill(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    plants = {"api": "chaos.plants.api_unclear_refusals"}
    result = drill_run(DRILLS["disk-full"](), chaos_stack, tmp_path, 1, SEED, plants)
    assert not result.passed
    assert result.error is not None and "without saying why" in result.error, result.error


def test_a_worker_that_does_not_fence_is_caught_overlapping_when_cut_off(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    """Cycle 0 cuts the worker off from PostgreSQL while its long task runs."""
    plants = {"worker": "chaos.plants.no_fence"}
    result = drill_run(DRILLS["worker-cut"](), chaos_stack, tmp_path, 1, SEED, plants)
    assert result.error is None, result.error
    assert result.audit is not None
    assert not result.passed
    assert any("after attempt" in f.why for f in result.audit.overlapping)

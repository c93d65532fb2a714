"""Crash consistency: a real scheduler, worker, reaper, maintenance and API process killed
(SIGKILL from inside) at every crash point of kit.core.crash_points in turn, restarted,
and the fleet's history judged by the drills' auditor (chaos.audit) over the effect
ledger its tasks write: nothing lost, no effect twice for a key-honouring task, no stale
write accepted (the drills' witness in the database). The run history's days and the
pull queue, which the ledger does not see, are checked on their own.

docs/testing.md lists the points and what a crash at each leaves behind.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine

from chaos.fleet import wait_for
from kit.core.crash_points import NAMES
from kit.settings import load_settings
from tests.crash.harness import CrashFleet, explain, judge, step
from tests.crash.scenes import (
    SCHEDULER_STEPS,
    WORKER_STEPS,
    History,
    QueueClient,
    a_alone,
    api_steps,
    maintenance_steps,
)
from tests.plants import by_name, scratch_copy

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_crash_at_any_point_loses_nothing_and_doubles_no_effect(
    db_url: str, engine: Engine, out_dir: Path
) -> None:
    fleet = CrashFleet(
        db_url, engine, load_settings().kafka_bootstrap, out_dir, uuid.uuid4().hex[:8]
    )
    days = History(engine)
    queue = QueueClient(fleet)
    steps = (*SCHEDULER_STEPS, *WORKER_STEPS, *maintenance_steps(days), *api_steps(queue))
    assert {a.point for s in steps for a in s.arms} == NAMES, "a crash point no step arms"
    try:
        fleet.setup()
        fleet.run_steps(steps)
        queue_problems = queue.finish()
        with contextlib.suppress(TimeoutError):  # the maintenance, started again, ends the day
            wait_for("the run history's days", lambda: not days.check(), 30, 0.5)
        history_problems = days.check()
        history = fleet.settle_and_read()
    finally:
        fleet.close()
    assert {r.point for r in fleet.reached} == NAMES
    verdict = judge(history)
    print(explain(verdict, fleet))  # what the fleet did, in the test's output
    for r in fleet.reached:
        print(f"{r.service} died at {r.point} after {r.waited_s} s")
    assert verdict.passed, explain(verdict, fleet)
    assert queue_problems == []
    assert history_problems == []
    # the fleet worked through the crashes: runs of every kind took effect
    summary = verdict.audit.summary()
    assert summary["expected"] >= 200 and summary["effects"] >= 200, summary
    assert summary["poison_dead_lettered"] >= 5, summary
    assert verdict.audit.writes_checked.get("reap", 0) >= 1, verdict.audit.writes_checked


def test_a_scan_that_commits_its_triggers_apart_from_its_runs_is_caught(
    db_url: str, engine: Engine, out_dir: Path
) -> None:
    """The suite can fail: with the scan split in two transactions (the trigger advance
    committed, then the runs inserted: tests/plants.py), one scheduler killed where the
    runs are written loses the fires whose triggers had moved on."""
    planted = scratch_copy(out_dir / "planted", names=("kit",))
    by_name("scan_split_transaction").apply(planted)
    bootstrap = load_settings().kafka_bootstrap
    fleet = CrashFleet(db_url, engine, bootstrap, out_dir, uuid.uuid4().hex[:8])
    fleet.code = {"sched-a": planted, "sched-b": planted}
    try:
        fleet.setup()
        fleet.run_steps([step(("sched-a", "scan.runs_written"), before=a_alone)])
        history = fleet.settle_and_read(quiet_timeout_s=10)  # stuck retries never end
    finally:
        fleet.close()
    verdict = judge(history)
    never = [f for f in verdict.lost if f.why == "never fired: no run"]
    print(explain(verdict, fleet))
    assert not verdict.passed and never, explain(verdict, fleet)

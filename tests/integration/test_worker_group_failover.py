"""A worker killed outright (SIGKILL: no leave-group) must not stop its consumer group for
long: the chaos drill `worker-kill` found every run of the fleet starting ~90 s late after
two worker kills, because each worker's consumers kept librdkafka's default session
timeout (45 s) and the restarted worker's join made the group wait for the dead member
(an eager rebalance stops every member until it completes).

Real worker processes on the real broker; the wait has a deadline, nothing is timed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.transport import RunMessage, RunPublisher
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration
# Long enough for a worker to start on a busy machine, join and run a task; well short
# of the 45 s a dead member used to hold the group.
DEADLINE_S = 30.0


def _publish(publisher: RunPublisher, engine: Engine, run_id: str) -> None:
    row = run_row(engine, run_id)
    at = to_epoch_ms(row.scheduled_at)
    publisher.publish([RunMessage(run_id, str(row.job_id), row.attempt, at, row.priority)])


def _worker(env: dict[str, str], name: str, prefix: str, group: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "kit.cli", "worker", "--worker-id", name]
    argv += ["--topic-prefix", prefix, "--group-id", group, "--drain-s", "1"]
    return subprocess.Popen(argv, env=env, start_new_session=True)


def _wait_done(engine: Engine, run_id: str, deadline_s: float, procs: list) -> None:
    def done() -> bool:
        for proc in procs:
            assert proc.poll() is None, "a worker exited"
        return run_row(engine, run_id).status == "succeeded"

    wait_until(
        f"run {run_id} to succeed after the replacement worker started",
        done,
        deadline_s,
        lambda: "the group is still waiting for the killed worker",
        poll_s=0.2,
    )


def test_a_killed_worker_does_not_hold_the_group_for_its_default_session(
    engine: Engine,
    publisher: RunPublisher,
    settings: Settings,
    db_url: str,
    prefix: str,
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_TASK_POLICY_FILE": settings.task_policy_file,
        "CRONFLEET_TENANT_POLICY_FILE": settings.tenant_policy_file,
        "CRONFLEET_LOG_LEVEL": "WARNING",
    }
    group = f"g-{uuid.uuid4().hex[:8]}"
    job = make_job(engine)
    first = make_run(engine, job)
    doomed = _worker(env, "doomed", prefix, group)
    procs = [doomed]
    try:
        _publish(publisher, engine, first)
        _wait_done(engine, first, 90.0, procs)  # it is in the group and working
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
        procs = []
        later = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        second = make_run(engine, job, scheduled_at=later)
        replacement = _worker(env, "replacement", prefix, group)
        procs = [replacement]
        _publish(publisher, engine, second)
        _wait_done(engine, second, DEADLINE_S, procs)
    finally:
        for proc in (doomed, *procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

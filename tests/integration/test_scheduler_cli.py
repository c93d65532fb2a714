"""`cronfleet scheduler` as a process: it takes the partitions, fires a job, and on
SIGTERM publishes what it committed, releases its leases and leaves, exit code 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest
from sqlalchemy import Engine, text

from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import parse_schedule
from kit.settings import Settings
from kit.store.jobs import JobCreate, JobSpec, job_create
from tests.integration.test_scheduler import messages
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration


def _scalar(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def test_scheduler_process_fires_and_leaves_on_sigterm(engine: Engine, settings: Settings):
    with engine.connect() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
    tick = JobSpec(
        name="tick",
        schedule=parse_schedule({"every_s": 1}, now=now),
        task={"type": "noop"},
        retry=RetryPolicy().to_dict(),
        misfire=MisfirePolicy().to_dict(),
    )
    job_create(engine, JobCreate("acme", tick, now=now))
    prefix = f"cf_test_cli.{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "CRONFLEET_DATABASE_URL": settings.database_url,
        "CRONFLEET_RUN_TOPIC_PARTITIONS": "1",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kit.scheduler.cli",
            "--node-id",
            "cli-node",
            "--topic-prefix",
            prefix,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def fired_twice() -> bool:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            return _scalar(engine, "SELECT count(*) FROM runs") >= 2

        wait_until("the node to fire two runs", fired_twice, 60, poll_s=0.2)
        assert (
            _scalar(engine, "SELECT count(*) FROM partition_leases WHERE owner = 'cli-node'")
            == settings.partitions
        )
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert _scalar(engine, "SELECT count(*) FROM partition_leases WHERE owner IS NOT NULL") == 0
    assert _scalar(engine, "SELECT count(*) FROM scheduler_nodes") == 0
    # everything it committed it also published, once: nothing is left for the reaper
    with engine.connect() as conn:
        committed = sorted(conn.execute(text("SELECT run_id::text FROM runs")).scalars())
    assert sorted(m.run_id for m in messages(settings, prefix)) == committed

"""Workers and the reaper on the real PostgreSQL and Kafka, with real command tasks.

Runs are inserted and published by the test (no scheduler); the scheduler's retry
re-arm is applied with the contract's SQL. Each test has its own topic prefix and
consumer group. Waits poll the database up to a generous limit; nothing asserts speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from kit.core.timeutil import to_epoch_ms
from kit.reaper.reaper import Reaper
from kit.settings import Settings
from kit.store.schema import jobs, triggers
from kit.tasks.command import group_alive
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.worker.worker import Worker, WorkerMetrics, task_executor
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import COMMANDS, make_job, make_run, rearm_retry, run_row

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]
WAIT_S = 30.0


class Running:
    def __init__(self, worker: Worker, consumer: TieredConsumer) -> None:
        self.worker = worker
        self.consumer = consumer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=worker.run, args=(self.stop, 5.0), daemon=True)

    @property
    def metrics(self) -> WorkerMetrics:
        return self.worker.metrics


@pytest.fixture
def start_worker(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(ttl_ms: int = 30_000, heartbeat_ms: int | None = None, name: str = "w1") -> Running:
        consumer = TieredConsumer(
            settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
        )
        worker = Worker(
            engine,
            consumer,
            publisher,
            name,
            concurrency=2,
            lease_ttl_ms=ttl_ms,
            heartbeat_ms=heartbeat_ms,
            execute=task_executor(COMMANDS),
        )
        running = Running(worker, consumer)
        running.thread.start()
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop.set()
    for running in started:
        running.thread.join(timeout=20)
        running.consumer.close()


def publish(publisher: RunPublisher, engine: Engine, run_id: str) -> None:
    row = run_row(engine, run_id)
    publisher.publish(
        [
            RunMessage(
                run_id, str(row.job_id), row.attempt, to_epoch_ms(row.scheduled_at), row.priority
            )
        ]
    )


def wait_for(engine: Engine, run_id: str, *statuses: str) -> object:
    def reached() -> object:
        row = run_row(engine, run_id)
        return row if row.status in statuses else None

    return wait_until(
        f"run {run_id} to be {' or '.join(statuses)}",
        reached,
        WAIT_S,
        lambda: f"it is still {run_row(engine, run_id).status}",
        poll_s=0.1,
    )


def started_by(proc: subprocess.Popen[bytes], path: Path) -> Callable[[], bool]:
    """The task of `proc` (a worker process) has written `path`; the worker is still up."""

    def started() -> bool:
        assert proc.poll() is None, f"the worker exited ({proc.returncode})"
        return path.exists()

    return started


def ledger_task(ledger: Path, script: str = "") -> dict:
    """A command that appends its idempotency key to the ledger after `script` passes."""
    body = f'{script}\necho "$CRONFLEET_IDEMPOTENCY_KEY" >> "{ledger}"'
    return {"type": "command", "argv": ["/bin/sh", "-c", body]}


def test_run_succeeds_once_and_a_duplicate_delivery_is_skipped(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., Running], shared_dir: Path
) -> None:
    ledger = shared_dir / "ledger"
    job = make_job(engine, task=ledger_task(ledger))
    rid = make_run(engine, job)
    publish(publisher, engine, rid)
    publish(publisher, engine, rid)  # delivered twice
    running = start_worker()
    row = wait_for(engine, rid, "succeeded")
    assert row.started_at is not None and row.finished_at >= row.started_at
    assert row.worker_id == "w1"
    wait_until(
        "the duplicate delivery to be counted",
        lambda: running.metrics.value("cronfleet_worker_duplicate_deliveries_total") >= 1,
    )
    assert ledger.read_text().split() == [rid]
    assert running.metrics.value("cronfleet_worker_runs_total", outcome="succeeded") == 1
    assert running.metrics.value("cronfleet_worker_start_lag_seconds_count") == 1


def test_failing_task_retries_with_backoff_then_succeeds(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., Running], shared_dir: Path
) -> None:
    tries = shared_dir / "tries"
    # fails on its first two attempts (counted in a file), succeeds on the third
    script = f'echo x >> "{tries}"; [ "$(wc -l < "{tries}")" -ge 3 ] || exit 3'
    retry = {"max_attempts": 3, "base_s": 0.5, "cap_s": 10.0, "jitter": "none"}
    job = make_job(engine, task=ledger_task(shared_dir / "ledger", script), retry=retry)
    rid = make_run(engine, job)
    start_worker()
    for attempt, backoff_s in ((1, 0.5), (2, 1.0)):
        publish(publisher, engine, rid)
        row = wait_for(engine, rid, "retry_scheduled")
        # retry_scheduled at the attempt it will retry with; the history names the failed one
        assert row.attempt == attempt + 1 and "exit" in row.error
        assert row.errors[-1]["attempt"] == attempt
        assert abs((row.retry_at - row.finished_at).total_seconds() - backoff_s) < 0.05
        with engine.begin() as conn:
            trig = conn.execute(select(triggers).where(triggers.c.kind == "retry")).one()
        assert (trig.attempt, trig.fire_at) == (attempt + 1, row.retry_at)
        assert rearm_retry(engine, rid) == attempt + 1
    publish(publisher, engine, rid)
    row = wait_for(engine, rid, "succeeded")
    assert row.attempt == 3 and [e["attempt"] for e in row.errors] == [1, 2]
    assert (shared_dir / "ledger").read_text().split() == [rid]


def test_always_failing_goes_dead_pauses_the_job_and_replays(
    engine: Engine,
    publisher: RunPublisher,
    start_worker: Callable[..., Running],
    shared_dir: Path,
    client: TestClient,
    auth: Headers,
    settings: Settings,
) -> None:
    broken = shared_dir / "broken"
    broken.write_text("yes")
    task = ledger_task(shared_dir / "ledger", f'[ -e "{broken}" ] && exit 7')
    job = make_job(engine, task=task, retry={"max_attempts": 1}, pause_after_dead=2)
    first = make_run(engine, job)
    second = make_run(
        engine, job, scheduled_at=run_row(engine, first).scheduled_at - timedelta(minutes=1)
    )
    start_worker()
    publish(publisher, engine, first)
    wait_for(engine, first, "dead")
    with engine.begin() as conn:
        assert conn.execute(select(jobs.c.paused)).scalar_one() is False
    publish(publisher, engine, second)
    wait_for(engine, second, "dead")
    with engine.begin() as conn:
        assert conn.execute(select(jobs.c.paused, jobs.c.dead_streak)).one() == (True, 2)
    headers = auth()
    letter = client.get(f"/v1/dead-letters/{first}", headers=headers).json()
    assert letter["errors"][0]["error"].startswith("exit") or "7" in letter["errors"][0]["error"]
    broken.unlink()  # the target is fixed; replay
    assert client.post(f"/v1/dead-letters/{first}:replay", headers=headers).status_code == 200
    reaper_pub = RunPublisher(settings.kafka_bootstrap, topic_prefix=publisher.topic_prefix)
    try:
        counts = Reaper(engine, reaper_pub, settings.unclaimed_grace_ms).tick()
    finally:
        reaper_pub.close()
    assert counts.republished == 1
    row = wait_for(engine, first, "succeeded")
    assert row.attempt == 2 and (shared_dir / "ledger").read_text().split() == [first]


def test_a_worker_that_cannot_confirm_its_lease_stops_the_task_and_gives_it_back(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., Running], shared_dir: Path
) -> None:
    """It never heartbeats, so its lease runs out while the task sleeps: the worker stops
    the task before the lease ends and gives the run back (it used to run on and find
    its finish refused, after the reaper had handed the run to someone else)."""
    ledger = shared_dir / "ledger"
    running, rid = fenced_run(engine, publisher, start_worker, ledger_task(ledger, "sleep 2"))
    requeued(engine, publisher, rid)  # given back: the reaper sees the lease over
    assert running.metrics.value("cronfleet_worker_stale_finishes_total") == 0
    assert not ledger.exists()  # the stopped task never reached its effect


def test_a_task_with_no_keeper_is_stopped_by_the_workers_own_fence(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., Running]
) -> None:
    """A `sleep` task has no keeper (kit.tasks.command's stops only commands), so only the
    worker's fence stops it once the lease can no longer be confirmed (no heartbeats here),
    and the run is released, not finished. With the fence gone (`Worker._fence_pass`
    never fencing) this test fails; the test above does not: its command task's keeper
    stops the task at the same deadline, and the run is released as stopped."""
    task = {"type": "sleep", "seconds": 5}
    running, rid = fenced_run(engine, publisher, start_worker, task, timeout_s=3.0)
    requeued(engine, publisher, rid)
    assert running.metrics.value("cronfleet_worker_stale_finishes_total") == 0


def fenced_run(
    engine: Engine,
    publisher: RunPublisher,
    start_worker: Callable[..., Running],
    task: dict[str, Any],
    **wait: float,
) -> tuple[Running, str]:
    """A run of `task` on a worker that never beats (its 1 s lease runs out while the task
    works), once the worker has fenced it."""
    rid = make_run(engine, make_job(engine, task=task))
    running = start_worker(ttl_ms=1000, heartbeat_ms=600_000)
    publish(publisher, engine, rid)
    wait_for(engine, rid, "running")
    wait_until(
        "the worker to fence itself",
        lambda: running.metrics.value("cronfleet_worker_fenced_total") >= 1,
        **wait,
    )
    return running, rid


def requeued(engine: Engine, publisher: RunPublisher, rid: str) -> None:
    """The reaper re-queues the run its worker released (attempt + 1, 'lease expired')."""
    reaper = Reaper(engine, publisher, 10_000)

    def reaped() -> int:
        counts = reaper.tick()
        return counts.requeued + counts.dead

    wait_until("the reaper to re-queue the run given back", reaped, poll_s=0.1)
    row = run_row(engine, rid)
    assert row.attempt >= 2 and row.errors[0]["error"].startswith("lease expired")


def worker_process(
    worker_id: str, settings: Settings, db_url: str, prefix: str
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of a worker process on this test's database and topics."""
    env = {
        **os.environ,
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_TASK_POLICY_FILE": settings.task_policy_file,
        "CRONFLEET_TENANT_POLICY_FILE": settings.tenant_policy_file,
    }
    argv = [sys.executable, "-m", "kit.worker.cli", "--worker-id", worker_id]
    argv += ["--topic-prefix", prefix, "--group-id", f"g-{uuid.uuid4().hex[:8]}"]
    return argv, env


def test_sigkilled_worker_run_is_recovered_and_its_effect_happens_once(
    engine: Engine,
    publisher: RunPublisher,
    start_worker: Callable[..., Running],
    shared_dir: Path,
    settings: Settings,
    db_url: str,
    prefix: str,
) -> None:
    ledger = shared_dir / "ledger"
    started = shared_dir / "started"
    task = ledger_task(
        ledger, f'echo $$ > "{started}.tmp"; mv "{started}.tmp" "{started}"; sleep 3'
    )
    job = make_job(engine, task=task)
    rid = make_run(engine, job)
    argv, env = worker_process("doomed", settings, db_url, prefix)
    env["CRONFLEET_RUN_LEASE_TTL_MS"] = "2000"
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        publish(publisher, engine, rid)
        wait_until("the task to start", started_by(proc, started))
        assert run_row(engine, rid).worker_id == "doomed"
        # the machine dies: the worker and its task (in its own process group), mid-run
        os.killpg(proc.pid, signal.SIGKILL)
        os.killpg(os.getpgid(int(started.read_text())), signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert not ledger.exists()
    reaper = Reaper(engine, publisher, 10_000)
    requeued = wait_until(
        "the dead worker's lease (2 s) to run out and the reaper to re-queue its run",
        lambda: reaper.tick().requeued,
        poll_s=0.1,
    )
    assert requeued == 1
    start_worker(name="rescuer")
    row = wait_for(engine, rid, "succeeded")
    assert (row.worker_id, row.attempt) == ("rescuer", 2)
    assert ledger.read_text().split() == [rid]  # the effect, once


def _sigkill_worker_running_hung_tasks(
    engine: Engine,
    publisher: RunPublisher,
    shared_dir: Path,
    settings: Settings,
    db_url: str,
    prefix: str,
    tasks: int,
) -> None:
    """A worker process runs `tasks` shells whose `sleep` hangs, all at once, and is
    SIGKILLed: every one of their groups must end (its keeper stops them)."""
    started = [shared_dir / f"started-{i}" for i in range(tasks)]
    argv, env = worker_process("doomed", settings, db_url, prefix)
    argv += ["--concurrency", str(tasks)]
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    pgids: list[int] = []
    try:
        for path in started:
            # says it started a moment after it did: the worker registers its group right
            # after the spawn, and a kill inside that window is the documented one
            script = f'sleep 0.3; echo $$ > "{path}.tmp"; mv "{path}.tmp" "{path}"; sleep 3600; :'
            task = {"type": "command", "argv": ["/bin/sh", "-c", script]}
            job = make_job(engine, task=task, name=path.name)
            publish(publisher, engine, make_run(engine, job))
        for path in started:
            wait_until(f"the task writing {path.name} to start", started_by(proc, path))
            pgids.append(os.getpgid(int(path.read_text())))
        assert len(set(pgids)) == tasks and all(group_alive(g) for g in pgids)
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own group: not the tasks'
        proc.wait(timeout=10)
        wait_until(
            "the killed worker's task groups (each sh and its sleep) to end",
            lambda: not any(group_alive(g) for g in pgids),
            WAIT_S,
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        for pgid in pgids:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)  # do not leave it behind for the next test


def test_a_sigkilled_worker_takes_its_hung_task_group_with_it(
    engine: Engine,
    publisher: RunPublisher,
    shared_dir: Path,
    settings: Settings,
    db_url: str,
    prefix: str,
) -> None:
    """Only the worker dies (not its host): the task it ran, a shell whose `sleep` hangs,
    must not run on as an orphan (the chaos drill poison-flood left 21 `sleep 3600`)."""
    _sigkill_worker_running_hung_tasks(engine, publisher, shared_dir, settings, db_url, prefix, 1)


def test_a_sigkilled_worker_takes_all_its_hung_task_groups_with_it(
    engine: Engine,
    publisher: RunPublisher,
    shared_dir: Path,
    settings: Settings,
    db_url: str,
    prefix: str,
) -> None:
    """Two hung tasks of one worker share its one keeper: both groups end."""
    _sigkill_worker_running_hung_tasks(engine, publisher, shared_dir, settings, db_url, prefix, 2)


def test_sigterm_finishes_the_in_flight_run_and_exits(
    engine: Engine,
    publisher: RunPublisher,
    shared_dir: Path,
    settings: Settings,
    db_url: str,
    prefix: str,
) -> None:
    import socket
    import urllib.request

    started = shared_dir / "started"
    job = make_job(engine, task=ledger_task(shared_dir / "ledger", f'touch "{started}"; sleep 1'))
    rid = make_run(engine, job)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv, env = worker_process("polite", settings, db_url, prefix)
    argv += ["--metrics-port", str(port)]
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        publish(publisher, engine, rid)
        wait_until("the task to start", started_by(proc, started))
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b"cronfleet_worker_start_lag_seconds_count 1.0" in scraped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    row = run_row(engine, rid)
    assert (row.status, row.worker_id) == ("succeeded", "polite")


def test_sigusr1_and_sigusr2_write_stacks_and_consumer_state_and_the_worker_runs_on(
    shared_dir: Path, settings: Settings, db_url: str, prefix: str
) -> None:
    """Where a stuck worker waits and what its consumer holds, without stopping it (the
    chaos drills ask each worker both when the fleet does not go quiet)."""
    log_path = shared_dir / "worker.log"
    argv, env = worker_process("dumper", settings, db_url, prefix)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stderr=log, start_new_session=True)
    try:
        # in its loop: its consumers are assigned from within the loop's polls
        wait_until("the worker's loop", lambda: b"assigned" in log_path.read_bytes())
        proc.send_signal(signal.SIGUSR1)
        wait_until("the stacks in its log", lambda: b"Current thread" in log_path.read_bytes())
        dump = log_path.read_text(errors="replace").split("Current thread", 1)[1]
        assert "kit/worker/worker.py" in dump  # the main thread is in the worker's loop
        proc.send_signal(signal.SIGUSR2)
        wait_until("its consumer's state", lambda: b"consumer state: " in log_path.read_bytes())
        state = log_path.read_text(errors="replace").split("consumer state: ", 1)[1]
        assert "critical [0: read to None, position" in state.splitlines()[0]
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

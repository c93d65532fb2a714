"""Leases sized from what runs take (kit.core.durations, kit.store.durations): each job
keeps its measured p50/p99 (the API's job and the console's job page show them), its
runs are claimed with 1.5 x p99 within the operator's bounds, a job whose runs take
three times the fleet's default lease is never run twice while its worker lives, and a
dead worker's short runs are taken back one p99 and one beat after they began."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, update

from kit.core.durations import MIN_SAMPLES, LeaseBounds
from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.store.claims import Claim, runs_claim
from kit.store.durations import job_durations_refresh
from kit.store.reaping import runs_reap_expired
from kit.store.schema import jobs, runs
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.worker.worker import Worker, task_executor
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import COMMANDS, make_job, make_run, run_row

pytestmark = pytest.mark.integration


def measured_runs(engine: Engine, job_id: str, durations_ms: list[int]) -> None:
    """Runs of the job that succeeded at their first attempt, taking `durations_ms`."""
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    for i, ms in enumerate(durations_ms):
        at = base + timedelta(seconds=10 * i)
        rid = make_run(engine, job_id, scheduled_at=at, status="succeeded")
        with engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.run_id == rid)
                .values(started_at=at, finished_at=at + timedelta(milliseconds=ms))
            )


def test_a_jobs_durations_and_lease_are_measured_and_shown(
    engine: Engine, client: TestClient, auth: Callable[..., dict[str, str]]
) -> None:
    job = make_job(engine, name="measured")
    measured_runs(engine, job, [300] * 95 + [2_000] * 5)
    written = job_durations_refresh(engine, [job], LeaseBounds(1_000, 60_000))
    durations, lease = written[job]
    assert (durations.p50_ms, durations.p99_ms, durations.samples, lease) == (
        300,
        2_000,
        100,
        3_000,
    )
    headers = auth("acme")
    shown = client.get(f"/v1/jobs/{job}", headers=headers).json()["durations"]
    assert {k: shown[k] for k in ("p50_ms", "p99_ms", "samples", "run_lease_ms")} == {
        "p50_ms": 300,
        "p99_ms": 2_000,
        "samples": 100,
        "run_lease_ms": 3_000,
    }
    fresh = make_job(engine, name="fresh")
    assert client.get(f"/v1/jobs/{fresh}", headers=headers).json()["durations"] is None


def test_a_dead_workers_short_runs_are_taken_back_one_p99_and_one_beat_after_they_began(
    engine: Engine,
) -> None:
    """Runs of 1 s at p99: leased 1.5 s, so a worker that claims one and dies leaves it
    to the reaper 1.5 s after its second (p99 + a beat of a third of the lease), where the
    fleet's default lease (30 s) kept it 30 s."""
    bounds = LeaseBounds(500, 60_000)
    job = make_job(engine)
    measured_runs(engine, job, [1_000] * 10)
    job_durations_refresh(engine, [job], bounds)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    rid = make_run(engine, job, scheduled_at=due)
    [claimed] = runs_claim(engine, [Claim(rid, 1)], "dead-worker", 30_000, bounds=bounds)
    assert claimed.lease_ttl_ms == 1_500
    expires = run_row(engine, rid).lease_expires_at
    assert expires - due == timedelta(milliseconds=1_500)  # p99 1 s + a beat of 0.5 s
    published: list[object] = []
    before = runs_reap_expired(engine, published.extend, now=expires - timedelta(milliseconds=1))
    assert before.requeued == []
    after = runs_reap_expired(engine, published.extend, now=expires)
    assert [r.run_id for r in after.requeued] == [rid]
    assert run_row(engine, rid).status == "pending"


@pytest.fixture
def worker_run(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Callable[..., Worker]]:
    started: list[tuple[Worker, threading.Event, threading.Thread, TieredConsumer]] = []

    def start(ttl_ms: int, bounds: LeaseBounds) -> Worker:
        consumer = TieredConsumer(
            settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
        )
        worker = Worker(
            engine,
            consumer,
            publisher,
            "w1",
            concurrency=2,
            lease_ttl_ms=ttl_ms,
            lease_bounds=bounds,
            execute=task_executor(COMMANDS),
        )
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
        thread.start()
        started.append((worker, stop, thread, consumer))
        return worker

    yield start
    for _, stop, _, _ in started:
        stop.set()
    for _, _, thread, consumer in started:
        thread.join(timeout=30)
        consumer.close()


def test_runs_three_times_the_default_lease_are_never_run_twice_while_the_worker_lives(
    engine: Engine, publisher: RunPublisher, worker_run: Callable[..., Worker], shared_dir: Path
) -> None:
    """Default lease 2 s, runs of 6 s: the first run is kept by its beats; once measured,
    the job's runs are claimed with 1.5 x their p99 (9 s), beaten rarely, never run twice."""
    ledger = shared_dir / "ledger"
    script = f'echo "$CRONFLEET_RUN_ID $CRONFLEET_ATTEMPT" >> {ledger}; sleep 6'
    job = make_job(engine, task={"type": "command", "argv": ["/bin/sh", "-c", script]})
    measured_runs(engine, job, [6_000] * 4)  # one short of MIN_SAMPLES
    worker = worker_run(2_000, LeaseBounds(1_000, 60_000))

    def run_once(at: datetime) -> str:
        rid = make_run(engine, job, scheduled_at=at)
        row = run_row(engine, rid)
        publisher.publish(
            [RunMessage(rid, job, row.attempt, to_epoch_ms(row.scheduled_at), "normal")]
        )
        wait_until("the run to succeed", lambda: run_row(engine, rid).status == "succeeded", 60)
        return rid

    first = run_once(datetime.now(UTC).replace(microsecond=0))
    worker._refresh_durations(force=True)  # the worker measures the jobs it ran
    second = run_once(datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1))
    lines = ledger.read_text().split()
    assert lines == [first, "1", second, "1"], "a run was executed twice"
    for rid in (first, second):
        assert run_row(engine, rid).attempt == 1
    assert worker.metrics.value("cronfleet_worker_fenced_total") == 0
    row = run_row(engine, second)
    assert row.finished_at - row.started_at >= timedelta(seconds=6)
    with engine.begin() as conn:
        sized = conn.execute(select(jobs.c.lease_ttl_ms).where(jobs.c.job_id == job)).scalar_one()
    assert sized is not None and sized >= 9_000  # 1.5 x p99 of runs of 6 s and more


def test_a_worker_measures_a_job_with_enough_samples_again_only_minutes_later(
    engine: Engine, worker_run: Callable[..., Worker]
) -> None:
    """A measure reads up to RECENT runs of the job: a job measured with MIN_SAMPLES is
    not measured again at the worker's next refresh (REMEASURE_MS), one short of them is."""
    sampled = make_job(engine, name="sampled")
    measured_runs(engine, sampled, [300] * MIN_SAMPLES)
    young = make_job(engine, name="young")
    measured_runs(engine, young, [300] * (MIN_SAMPLES - 1))
    worker = worker_run(2_000, LeaseBounds(1_000, 60_000))

    def measured_at() -> dict[str, datetime]:
        with engine.begin() as conn:
            rows = conn.execute(
                select(jobs.c.job_id, jobs.c.durations_at).where(
                    jobs.c.job_id.in_([sampled, young])
                )
            ).all()
        return {str(r.job_id): r.durations_at for r in rows}

    worker._finished_jobs |= {sampled, young}  # their runs succeeded here
    worker._refresh_durations(force=True)
    first = measured_at()
    assert first[sampled] is not None and first[young] is not None
    worker._finished_jobs |= {sampled, young}  # and succeeded again
    worker._refresh_durations(force=True)
    again = measured_at()
    assert again[sampled] == first[sampled], "measured again within REMEASURE_MS"
    assert again[young] > first[young], "a job short of MIN_SAMPLES waits for its next measure"

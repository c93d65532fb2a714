"""Defects of the worker that ran a run twice or never (issue 7): it must fence itself
when it cannot confirm its lease, never start a run before its second by the database's
clock, never give back a run it already finished, and move past a message it cannot use.

Real PostgreSQL and Kafka; the link to PostgreSQL is cut with a forwarder on loopback
(tests/integration/netcut.py), so calls hang as behind a dead network.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.store.db import engine_for
from kit.transport import RunMessage, RunPublisher, TieredConsumer, topic_for
from kit.transport.message import dead_letter_topic
from kit.worker.worker import Worker, task_executor
from tests.integration.netcut import CuttableLink
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import COMMANDS, make_job, make_run, run_row

pytestmark = pytest.mark.integration
WAIT_S = 30.0


class Started:
    def __init__(self, worker: Worker, consumer: TieredConsumer, drain_s: float) -> None:
        self.worker = worker
        self.consumer = consumer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=worker.run, args=(self.stop, drain_s), daemon=True)
        self.thread.start()

    def stopped(self, timeout_s: float = WAIT_S) -> None:
        self.stop.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the worker did not stop"


@pytest.fixture
def run_worker(
    settings: Settings,
    engine: Engine,
    prefix: str,
    publisher: RunPublisher,
) -> Iterator[Callable[..., Started]]:
    started: list[Started] = []

    def start(
        ttl_ms: int = 30_000,
        heartbeat_ms: int | None = None,
        drain_s: float = 5.0,
        via: Engine | None = None,
        concurrency: int = 2,
        fair_share: bool = True,
    ) -> Started:
        consumer = TieredConsumer(
            settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
        )
        worker = Worker(
            via or engine,
            consumer,
            publisher,
            "w1",
            concurrency=concurrency,
            lease_ttl_ms=ttl_ms,
            heartbeat_ms=heartbeat_ms,
            execute=task_executor(COMMANDS),
            fair_share=fair_share,
        )
        running = Started(worker, consumer, drain_s)
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
        [RunMessage(run_id, str(row.job_id), row.attempt, to_epoch_ms(row.scheduled_at), "normal")]
    )


def lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def test_a_worker_cut_off_from_postgresql_stops_its_task_before_the_lease_ends(
    engine: Engine,
    db_url: str,
    publisher: RunPublisher,
    run_worker,
    shared_dir: Path,
) -> None:
    """Item 6: heartbeats hang (the link is dead), so the lease cannot be confirmed; the
    worker must stop the task before the lease it last confirmed runs out, or the reaper
    hands the run to another worker while this one still runs it."""
    ledger = shared_dir / "ledger"
    # Both the worker's fence and the keeper's lease clock may SIGTERM the group; the trap
    # ignores the second one, or it would kill `date` and leave "stopped" with no time.
    script = (
        f"trap 'trap \"\" TERM; echo stopped $(date +%s.%N) >> {ledger}; exit 143' TERM; "
        f"echo started >> {ledger}; sleep 20 & wait; echo finished >> {ledger}"
    )
    job = make_job(engine, task={"type": "command", "argv": ["/bin/sh", "-c", script]})
    rid = make_run(engine, job)
    url = make_url(db_url)
    link = CuttableLink(url.host or "127.0.0.1", url.port or 5432)
    via = engine_for(url.set(port=link.port).render_as_string(hide_password=False), pool_size=4)
    try:
        running = run_worker(ttl_ms=3000, heartbeat_ms=500, drain_s=0, via=via)
        publish(publisher, engine, rid)
        wait_until("the task to start", lambda: "started" in lines(ledger))
        link.cut()
        stopped = wait_until(
            "the task to be stopped",
            lambda: [ln for ln in lines(ledger) if ln.startswith("stopped")],
            timeout_s=15,
        )
        stopped_at = float(stopped[0].split()[1])  # type: ignore[index]
        expires = run_row(engine, rid).lease_expires_at.timestamp()
        assert stopped_at < expires, "the task ran on past its lease"
        assert "finished" not in lines(ledger)
        running.stop.set()
    finally:
        link.close()
        via.dispose()


def test_a_run_published_early_does_not_start_before_its_second(
    engine: Engine,
    publisher: RunPublisher,
    run_worker,
    shared_dir: Path,
) -> None:
    """Item 9: a scheduler node whose clock runs fast publishes early; the worker starts
    the run at its scheduled time by the database's clock, not on arrival."""
    ledger = shared_dir / "ledger"
    script = f"date +%s.%N >> {ledger}"
    job = make_job(engine, task={"type": "command", "argv": ["/bin/sh", "-c", script]})
    with engine.begin() as conn:
        db_now = conn.execute(text("SELECT now()")).scalar_one()
    at = db_now.replace(microsecond=0) + timedelta(seconds=3)
    rid = make_run(engine, job, scheduled_at=at)
    run_worker()
    publish(publisher, engine, rid)
    started = wait_until("the run to start", lambda: lines(ledger))
    assert float(started[0]) >= at.timestamp()  # type: ignore[index]
    row = wait_until(
        "the run to succeed", lambda: (r := run_row(engine, rid)).status == "succeeded" and r
    )
    assert row.started_at >= at  # type: ignore[union-attr]


def test_a_graceful_stop_never_gives_back_a_run_that_already_succeeded(
    engine: Engine,
    publisher: RunPublisher,
    run_worker,
    shared_dir: Path,
) -> None:
    """Item 7: with --drain-s 0, or a finisher slowed by the database, the stop released
    runs whose task had succeeded but whose success was not written yet: they ran again."""
    ledger = shared_dir / "ledger"
    a_task = {"type": "command", "argv": ["/bin/sh", "-c", f"sleep 1; echo a >> {ledger}"]}
    b_task = {"type": "command", "argv": ["/bin/sh", "-c", f"sleep 2; echo b >> {ledger}"]}
    a = make_run(engine, make_job(engine, task=a_task))
    b = make_run(engine, make_job(engine, name="b", task=b_task))
    hiccup = engine.connect()  # the database hiccup: a's row is locked by someone else
    tx = hiccup.begin()
    running = run_worker(drain_s=0)
    try:
        publish(publisher, engine, a)
        publish(publisher, engine, b)
        wait_until("the claims", lambda: {run_row(engine, r).status for r in (a, b)} == {"running"})
        hiccup.execute(text("SELECT 1 FROM runs WHERE run_id = :r FOR UPDATE"), {"r": a})
        locker = hiccup.execute(text("SELECT pg_backend_pid()")).scalar_one()
        # a's success reaches the finisher, which blocks on the lock; b's waits behind it
        wait_until("both tasks to succeed", lambda: sorted(lines(ledger)) == ["a", "b"])
        wait_until("the finisher to block on a's row", lambda: _blocked_by(engine, locker))
        running.stop.set()  # no drain time: the stop gives up on what is left
        assert running.worker._finisher_stop.wait(WAIT_S), (
            "the stop's drain did not end while a's row was locked: it tried to give back a "
            "run whose task had finished"
        )
    finally:
        tx.rollback()
        hiccup.close()
    running.stopped()
    assert [run_row(engine, r).status for r in (a, b)] == ["succeeded", "succeeded"]
    assert sorted(lines(ledger)) == ["a", "b"]


def _blocked_by(engine: Engine, pid: int) -> bool:
    """Whether some backend waits for a lock `pid` holds."""
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
                ),
                {"pid": pid},
            ).scalar_one()
        )


def test_a_message_the_worker_cannot_use_goes_to_the_dead_letter_topic(
    engine: Engine,
    settings: Settings,
    prefix: str,
    publisher: RunPublisher,
    run_worker,
) -> None:
    """Item 11: valid JSON, a run id that is no UUID: the claim failed and was retried
    forever, the offset was never committed, and the partition stalled for good."""
    job = make_job(engine)
    good = make_run(engine, job)
    poison = json.dumps(
        {
            "v": 1,
            "run_id": "not-a-uuid",
            "job_id": job,
            "attempt": 1,
            "scheduled_at_ms": 0,
            "tier": "normal",
        }
    ).encode()
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    producer.produce(topic_for("normal", prefix), poison, key=job.encode())
    producer.flush(10)
    publish(publisher, engine, good)  # behind the poison, same partition (1 per topic)
    run_worker()
    wait_until("the good run to succeed", lambda: run_row(engine, good).status == "succeeded")
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"dlq-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([dead_letter_topic(prefix)])
    try:
        got = wait_until("the dead letter", lambda: consumer.consume(1, 1.0))
    finally:
        consumer.close()
    [msg] = got  # type: ignore[misc]
    assert msg.value() == poison
    headers = dict(msg.headers() or [])
    assert (
        b"run_id" in headers["reason"] and headers["topic"] == topic_for("normal", prefix).encode()
    )


def test_a_database_stall_shorter_than_a_lease_less_a_beat_runs_nothing_twice(
    engine: Engine,
    db_url: str,
    publisher: RunPublisher,
    run_worker,
    shared_dir: Path,
) -> None:
    """PostgreSQL stops answering (every byte held, none lost) for 2.3 s, less than one
    run-lease (4 s) less one beat (1.33 s), at the worst moment the worker's rule allows:
    when its running lease is at its shortest, just before a beat would renew it. The
    beat hangs through the stall and lands after it; the lease never ended in the
    database, so the worker must not have fenced the task (its confirmed lease less the
    margin, 1 s): the run executes once, attempt 1, never stopped. The two-and-a-half-beat
    rule renewed a running lease once a beat and let it fall to ttl - beat, 2.67 s, then
    fenced it 1 s before that: 1.7 s into the stall."""
    ledger = shared_dir / "ledger"
    script = (
        f"trap 'echo stopped >> {ledger}; exit 143' TERM; "
        f"echo started >> {ledger}; sleep 6 & wait; echo finished >> {ledger}"
    )
    job = make_job(engine, task={"type": "command", "argv": ["/bin/sh", "-c", script]})
    rid = make_run(engine, job)
    url = make_url(db_url)
    link = CuttableLink(url.host or "127.0.0.1", url.port or 5432)
    via = engine_for(url.set(port=link.port).render_as_string(hide_password=False), pool_size=4)
    ttl_ms, stall_s = 4000, 2.3
    try:
        running = run_worker(ttl_ms=ttl_ms, drain_s=10, via=via)
        worker = running.worker
        beat_s = worker.heartbeat_s
        assert stall_s < ttl_ms / 1000 - beat_s
        publish(publisher, engine, rid)
        wait_until("the task to start", lambda: "started" in lines(ledger))
        entry = worker._in_flight[rid]

        def shortest() -> bool:  # the lease a beat old: the next beat is due
            return entry.confirmed_until - time.monotonic() < ttl_ms / 1000 - beat_s + 0.15

        with contextlib.suppress(AssertionError):  # a rule that never lets it get so short
            wait_until("the lease at its shortest", shortest, timeout_s=2.0, poll_s=0.005)
        link.hold()
        time.sleep(stall_s)  # the fault's length, not a wait for a condition
        link.release()
        wait_until("the task to end", lambda: {"finished", "stopped"} & set(lines(ledger)))
        assert lines(ledger) == ["started", "finished"], "the stall stopped the task"
        row = wait_until(
            "the run to be written", lambda: (r := run_row(engine, rid)).status != "running" and r
        )
        assert (row.status, row.attempt) == ("succeeded", 1)  # type: ignore[union-attr]
        assert worker.metrics.value("cronfleet_worker_fenced_total") == 0
    finally:
        link.close()
        via.dispose()


def test_a_worker_holds_no_more_unstarted_runs_than_it_starts_in_half_its_lease(
    engine: Engine, publisher: RunPublisher, run_worker
) -> None:
    """The start budget (kit.core.backlog.start_budget), as the worker applies it: 2 slots
    and a 4 s lease start 4 runs in half a lease, so of 12 runs published 5 s ahead of
    their second it claims 4 and leaves the rest to the queue (another worker's, or its
    own once those start). Held past the budget, runs would wait for a slot while their
    leases ran out. Then every run is started and succeeds: the budget loses none.
    Fair shares off: on, one tenant with more behind it holds only its share of the
    budget (test_worker_fair_share.py::test_a_tenant_behind_a_backlog_in_the_topic_is_
    read_past_it); the budget is the bound either way."""
    job = make_job(engine, task={"type": "sleep", "seconds": 0.2})
    with engine.connect() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
    due = now.replace(microsecond=0) + timedelta(seconds=5)
    runs = [make_run(engine, job, scheduled_at=due + timedelta(milliseconds=i)) for i in range(12)]
    run_worker(ttl_ms=4000, concurrency=2, fair_share=False)
    for rid in runs:
        publish(publisher, engine, rid)

    def claimed() -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM runs WHERE status <> 'pending' AND job_id = :j"),
                    {"j": job},
                ).scalar_one()
            )

    wait_until("the worker's first claims", lambda: claimed() >= 4)
    with engine.connect() as conn:
        waited = conn.execute(text("SELECT now() < :due"), {"due": due}).scalar_one()
    assert waited, "the machine was too slow to see the runs held before their second"
    assert claimed() == 4  # the budget, not the prefetch (10,000)
    wait_until(
        "every run to succeed",
        lambda: all(run_row(engine, r).status == "succeeded" for r in runs),
        timeout_s=60,
    )

"""Fair shares between tenants on one worker, on the real PostgreSQL and Kafka.

Runs are inserted and published by the test (no scheduler), the noisy tenant's first and
due a second earlier, so a worker handing slots first come, first served starts every one
of them before the other tenant's. The task is the test's own executor: it records the
order in which runs start and how many of each tenant run at once (the worker's pool
path; the task loop's places are the same queue, kit.worker.shares.FairSlots). Nothing
asserts a duration: only orders and counts."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

from kit.core.fair_share import MAX_LAPS
from kit.core.tenancy import TenantLimits, TenantsPolicy
from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.tasks.context import CancelFlag
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.worker.worker import Outcome, Worker, task_executor
from tests.integration.test_worker_http import LOOPBACK, Target, http_task
from tests.integration.test_worker_http import target as target  # the fixture
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration
WAIT_S = 60.0
LONG_LEASE_MS = 600_000  # a start budget (half a lease of starts) far above these runs


@dataclass
class Recorder:
    """The tasks: each sleeps `seconds` of its spec, recording its start and how many of
    its tenant ran at once."""

    starts: list[str] = field(default_factory=list)  # tenant of each start, in order
    running: dict[str, int] = field(default_factory=dict)
    most: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(
        self,
        spec: dict[str, Any],
        run_id: str,
        attempt: int,
        timeout_s: int,
        cancel: CancelFlag,
        tenant: str,
    ) -> Outcome:
        with self.lock:
            self.starts.append(tenant)
            self.running[tenant] = self.running.get(tenant, 0) + 1
            self.most[tenant] = max(self.most.get(tenant, 0), self.running[tenant])
        cancel.wait(float(spec["seconds"]))
        with self.lock:
            self.running[tenant] -= 1
        return True, None, None


@pytest.fixture
def start_worker(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Callable[..., tuple[Worker, Recorder]]]:
    started: list[tuple[Worker, TieredConsumer, threading.Event, threading.Thread]] = []

    def start(
        concurrency: int, policy: TenantsPolicy, lease_ttl_ms: int = LONG_LEASE_MS
    ) -> tuple[Worker, Recorder]:
        consumer = TieredConsumer(
            settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
        )
        recorder = Recorder()
        worker = Worker(
            engine,
            consumer,
            publisher,
            f"w-{uuid.uuid4().hex[:6]}",
            concurrency=concurrency,
            lease_ttl_ms=lease_ttl_ms,
            execute=recorder,
            tenants=lambda: policy,
        )
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
        thread.start()
        started.append((worker, consumer, stop, thread))
        return worker, recorder

    yield start
    for _, _, stop, _ in started:
        stop.set()
    for _, consumer, _, thread in started:
        thread.join(timeout=30)
        consumer.close()


def plant(engine: Engine, tenant: str, n: int, seconds: float, at: datetime) -> list[RunMessage]:
    """`n` runs of one job of `tenant` due at `at` (one run per millisecond after it: a
    job's run ids are made of its second), and their messages."""
    job = make_job(engine, {"type": "sleep", "seconds": seconds}, tenant=tenant, name=tenant)
    out = []
    for i in range(n):
        when = at + timedelta(milliseconds=i)
        rid = make_run(engine, job, when, tenant=tenant)
        out.append(RunMessage(rid, job, 1, to_epoch_ms(when), "normal"))
    return out


def all_succeeded(engine: Engine, n: int) -> Callable[[], bool]:
    def done() -> bool:
        with engine.connect() as conn:
            ok = conn.execute(text("SELECT count(*) FROM runs WHERE status = 'succeeded'"))
            return int(ok.scalar_one()) == n

    return done


def test_a_burst_of_one_tenant_does_not_hold_back_another(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., tuple[Worker, Recorder]]
) -> None:
    """20 slow runs of `noisy`, published first and due a second earlier, then 2 of
    `quiet`, on a worker of 2 slots: first come, first served starts the 20 first; fair
    shares start `quiet`'s two among the first few."""
    now = datetime.now(UTC).replace(microsecond=0)
    noisy = plant(engine, "noisy", 20, 0.5, now - timedelta(seconds=3))
    quiet = plant(engine, "quiet", 2, 0.1, now - timedelta(seconds=2))
    publisher.publish(noisy + quiet)
    worker, rec = start_worker(2, TenantsPolicy())
    wait_until("every run succeeded", all_succeeded(engine, 22), WAIT_S, lambda: str(rec.starts))
    last_quiet = max(i for i, t in enumerate(rec.starts) if t == "quiet")
    assert last_quiet < 6, rec.starts  # first come, first served: 21
    assert rec.starts[-1] == "noisy"
    assert worker.metrics.value("cronfleet_worker_tenant_started_total", tenant="quiet") == 2


def test_a_tenant_at_its_running_limit_runs_no_more_and_nothing_is_dropped(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., tuple[Worker, Recorder]]
) -> None:
    """`capped` may run 1 at once (the fleet is this one worker): of its 6 runs never two
    at once, while `free` uses the other slots; every run succeeds (waited, not dropped),
    and the wait is counted with its reason."""
    now = datetime.now(UTC).replace(microsecond=0)
    capped = plant(engine, "capped", 6, 0.3, now - timedelta(seconds=3))
    other = plant(engine, "other", 6, 0.3, now - timedelta(seconds=2))
    publisher.publish(capped + other)
    policy = TenantsPolicy(tenants={"capped": TenantLimits(max_running=1)})
    worker, rec = start_worker(3, policy)
    wait_until("every run succeeded", all_succeeded(engine, 12), WAIT_S, lambda: str(rec.starts))
    assert rec.most["capped"] == 1, rec.most  # first come, first served: 3
    assert rec.most["other"] >= 2, rec.most
    limited = worker.metrics.value(
        "cronfleet_worker_tenant_limited_total", tenant="capped", reason="max_running"
    )
    assert limited > 0


def test_weights_of_3_and_1_share_the_starts_about_3_to_1(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., tuple[Worker, Recorder]]
) -> None:
    """`heavy` (weight 3) and `light` (weight 1), 40 runs each, one slot: while both have
    runs waiting, `heavy` starts 3 of every 4 (start-time fair queuing keeps each within
    one start per unit of weight: 14 to 16 of 20)."""
    now = datetime.now(UTC).replace(microsecond=0)
    light = plant(engine, "light", 40, 0.02, now - timedelta(seconds=3))
    heavy = plant(engine, "heavy", 40, 0.02, now - timedelta(seconds=2))
    publisher.publish(light + heavy)
    policy = TenantsPolicy(tenants={"heavy": TenantLimits(weight=3)})
    _, rec = start_worker(1, policy)
    wait_until("every run succeeded", all_succeeded(engine, 80), WAIT_S, lambda: str(rec.starts))
    # from the first start of the later of the two to come, both have runs waiting
    first = max(rec.starts.index("heavy"), rec.starts.index("light"))
    both = rec.starts[first : first + 20]
    assert 14 <= both.count("heavy") <= 16, rec.starts  # first come, first served: 0


def test_a_tenant_behind_a_backlog_in_the_topic_is_read_past_it(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., tuple[Worker, Recorder]]
) -> None:
    """60 runs of `noisy` ahead of 2 of `quiet` in the topic's one partition, one slot and
    a lease whose start budget is 10 runs: the worker holds `noisy`'s share of it (5),
    sends the rest back to the tail and reads on, so `quiet`'s runs start among the first
    few; first come, first served reads them only once `noisy`'s are claimed. Every run
    succeeds once (sent back runs are claimed again, at the same attempt)."""
    now = datetime.now(UTC).replace(microsecond=0)
    noisy = plant(engine, "noisy", 60, 0.1, now - timedelta(seconds=3))
    quiet = plant(engine, "quiet", 2, 0.05, now - timedelta(seconds=2))
    publisher.publish(noisy + quiet)
    worker, rec = start_worker(1, TenantsPolicy(), lease_ttl_ms=20_000)
    wait_until("every run succeeded", all_succeeded(engine, 62), WAIT_S, lambda: str(rec.starts))
    last_quiet = max(i for i, t in enumerate(rec.starts) if t == "quiet")
    assert last_quiet < 12, rec.starts  # first come, first served: past 20
    assert len(rec.starts) == 62  # none ran twice
    with engine.connect() as conn:
        attempts = conn.execute(text("SELECT max(attempt) FROM runs")).scalar_one()
    assert attempts == 1
    sent_back = worker.metrics.value("cronfleet_worker_tenant_sent_back_total", tenant="noisy")
    assert sent_back > 0


def test_a_tenant_alone_in_a_backlog_has_each_run_sent_round_at_most_max_laps(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., tuple[Worker, Recorder]]
) -> None:
    """One tenant's 120 runs due at once, one slot, a start budget of 10: the worker holds
    the tenant's share (5) and sends the rest round, but a run sent round MAX_LAPS times is
    kept the next time, whatever the tenant holds. With nobody else behind, send-backs
    only fed themselves: runs went round a dozen times in the worker-cut drill and started
    20 minutes late (docs/chaos.md). Every run succeeds once, at attempt 1."""
    now = datetime.now(UTC).replace(microsecond=0)
    alone = plant(engine, "alone", 120, 0.02, now - timedelta(seconds=3))
    publisher.publish(alone)
    worker, rec = start_worker(1, TenantsPolicy(), lease_ttl_ms=20_000)
    wait_until("every run succeeded", all_succeeded(engine, 120), WAIT_S, lambda: str(rec.starts))
    assert len(rec.starts) == 120  # none ran twice
    sent_round = worker.metrics.value("cronfleet_worker_tenant_sent_back_total", tenant="alone")
    assert 0 < sent_round <= MAX_LAPS * 120
    assert all(laps <= MAX_LAPS for _, laps in worker._sent_back.values())
    with engine.connect() as conn:
        assert conn.execute(text("SELECT max(attempt) FROM runs")).scalar_one() == 1


def test_a_tenant_alone_whose_runs_come_ahead_of_their_second_has_none_sent_back(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., tuple[Worker, Recorder]]
) -> None:
    """100 runs of one tenant due one every 50 ms from 3 s on, published at once (as a
    scheduler publishes its scan-ahead), 4 slots and a start budget of 40: the worker
    claims 40 ahead and more behind them wait in the topic, but a run claimed before its
    second is no backlog. Counting held runs against the tenant's share (half the budget)
    sent 20 of the first 40 round the topic, and at a steady 500 runs/s the drills' soak
    sent runs round all the time."""
    now = datetime.now(UTC).replace(microsecond=0)
    job = make_job(engine, {"type": "sleep", "seconds": 0.01}, tenant="steady", name="steady")
    messages = []
    for i in range(100):
        when = now + timedelta(seconds=3, milliseconds=50 * i)
        rid = make_run(engine, job, when, tenant="steady")
        messages.append(RunMessage(rid, job, 1, to_epoch_ms(when), "normal"))
    publisher.publish(messages)
    worker, rec = start_worker(4, TenantsPolicy(), lease_ttl_ms=20_000)
    wait_until("every run succeeded", all_succeeded(engine, 100), WAIT_S, lambda: str(rec.starts))
    assert len(rec.starts) == 100
    assert worker.metrics.value("cronfleet_worker_tenant_sent_back_total", tenant="steady") == 0


def test_http_runs_take_the_task_loops_places_by_fair_share(
    settings: Settings,
    engine: Engine,
    prefix: str,
    publisher: RunPublisher,
    target: Target,
) -> None:
    """The task loop's places (http tasks): 16 slow requests of `noisy` ahead of 2 of
    `quiet`, 2 places; the target records the order in which requests arrive: `quiet`'s
    arrive among the first few (first come, first served: after all of `noisy`'s)."""
    now = datetime.now(UTC).replace(microsecond=0)
    loud = make_job(engine, http_task(target.url("/slow")), tenant="noisy", name="noisy")
    soft = make_job(engine, http_task(target.url("/quick")), tenant="quiet", name="quiet")
    messages = []
    for job, tenant, n, at in ((loud, "noisy", 16, 3), (soft, "quiet", 2, 2)):
        for i in range(n):
            when = now - timedelta(seconds=at) + timedelta(milliseconds=i)
            rid = make_run(engine, job, when, tenant=tenant)
            messages.append(RunMessage(rid, job, 1, to_epoch_ms(when), "normal"))
    quiet_ids = {m.run_id for m in messages if m.job_id == soft}
    publisher.publish(messages)
    consumer = TieredConsumer(
        settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
    )
    worker = Worker(
        engine,
        consumer,
        publisher,
        "w-http-fair",
        concurrency=2,
        lease_ttl_ms=LONG_LEASE_MS,
        execute=task_executor(LOOPBACK),
        tenants=lambda: TenantsPolicy(),
    )
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
    thread.start()
    try:
        wait_until(
            "every run succeeded", all_succeeded(engine, 18), WAIT_S, lambda: str(target.keys)
        )
    finally:
        stop.set()
        thread.join(timeout=30)
        consumer.close()
    last_quiet = max(i for i, key in enumerate(target.keys) if key in quiet_ids)
    assert last_quiet < 6, target.keys  # first come, first served: 17
    assert len(target.keys) == 18  # each request once

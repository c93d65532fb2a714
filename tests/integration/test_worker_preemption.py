"""Paid ahead of free with preemption, on the real PostgreSQL and Kafka: a worker whose
slots are all running a free tenant's commands takes one back for a paid tenant's run
due now (kit.core.preemption). The preempted command is stopped as a cancel stops it
(SIGTERM to its process group, SIGKILL after the grace) and its run goes back to pending
at the same attempt: it runs again and succeeds, with no retry, no dead letter. The same
for the task loop's places, held by free http runs against a target that answers only
when told to. Nothing asserts a duration: the paid run's start is compared with the
free runs' ends, or happens while the free runs' requests cannot have been answered."""

from __future__ import annotations

import threading
import tomllib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import Engine, text

from kit.core.task_policy import TaskPolicy
from kit.core.tenancy import TenantClass, TenantLimits, TenantsPolicy
from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.store.run_detail import run_detail
from kit.tasks.policy import PolicySource, local_policy_toml
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.worker.worker import Worker, task_executor
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration
FREE, PAID = "freeco", "paidco"
SLOTS = 2
FREE_S = 15  # each free command; the paid run must start long before any ends
COMMANDS = PolicySource.fixed(
    TaskPolicy.parse(
        tomllib.loads(local_policy_toml(FREE, ["/bin/sh"]) + local_policy_toml(PAID, ["/bin/sh"])),
        http_allow_hosts="127.0.0.1",  # the http runs' target below
    )
)
TENANTS = TenantsPolicy(tenants={PAID: TenantLimits(tenant_class=TenantClass.paid)})


@pytest.fixture
def start_worker(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Callable[..., Worker]]:
    """Start a worker of `slots` slots under `tenants` (stopped at the test's end)."""
    stops: list[tuple[threading.Event, threading.Thread, TieredConsumer]] = []

    def start(slots: int = SLOTS, tenants: TenantsPolicy = TENANTS) -> Worker:
        consumer = TieredConsumer(
            settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
        )
        w = Worker(
            engine,
            consumer,
            publisher,
            f"w-{uuid.uuid4().hex[:6]}",
            concurrency=slots,
            lease_ttl_ms=30_000,
            execute=task_executor(COMMANDS),
            tenants=lambda: tenants,
        )
        stop = threading.Event()
        thread = threading.Thread(target=w.run, args=(stop, 5.0), daemon=True)
        thread.start()
        stops.append((stop, thread, consumer))
        return w

    yield start
    for stop, thread, consumer in stops:
        stop.set()
        thread.join(timeout=30)
        consumer.close()


@pytest.fixture
def worker(start_worker: Callable[..., Worker]) -> Worker:
    return start_worker()


def command_runs(engine: Engine, tenant: str, seconds: int, n: int) -> list[RunMessage]:
    """`n` runs due now of a job of `tenant` running `sleep seconds` in /bin/sh, then
    printing `done` (what a run that ran to its end printed)."""
    task = {"type": "command", "argv": ["/bin/sh", "-c", f"sleep {seconds}; echo done"]}
    job = make_job(
        engine, task, tenant=tenant, name=f"{tenant}-{uuid.uuid4().hex[:6]}", timeout_s=120
    )
    now = datetime.now(UTC)
    out = []
    for i in range(n):
        when = now + timedelta(milliseconds=i)
        rid = make_run(engine, job, when, tenant=tenant)
        out.append(RunMessage(rid, job, 1, to_epoch_ms(when), "normal"))
    return out


def rows(engine: Engine) -> dict[str, dict[str, object]]:
    with engine.connect() as conn:
        got = conn.execute(
            text(
                "SELECT run_id::text AS run_id, tenant, status, attempt, started_at, "
                "finished_at, errors FROM runs"
            )
        ).mappings()
        return {r["run_id"]: dict(r) for r in got}


def first_start(row: dict[str, object]) -> datetime:
    """When the run's first attempt began: its preempted attempt's, if it was preempted."""
    for e in row["errors"]:  # type: ignore[attr-defined]
        return datetime.fromisoformat(str(e["started_at"]))
    return row["started_at"]  # type: ignore[return-value]


def test_a_paid_run_due_on_a_worker_full_of_free_runs_takes_a_slot_back(
    engine: Engine, publisher: RunPublisher, worker: Worker
) -> None:
    started = "cronfleet_worker_tenant_started_total"
    free = command_runs(engine, FREE, FREE_S, SLOTS)
    publisher.publish(free)
    wait_until("the free runs fill the slots", lambda: worker.metrics.value(started, tenant=FREE))
    wait_until(
        "both slots run a free run",
        lambda: worker.metrics.value(started, tenant=FREE) == SLOTS,
        detail=lambda: str(rows(engine)),
    )
    paid = command_runs(engine, PAID, 1, 1)
    publisher.publish(paid)

    def succeeded() -> bool:
        return all(r["status"] == "succeeded" for r in rows(engine).values())

    wait_until("every run succeeded", succeeded, 90.0, lambda: str(rows(engine)))
    got = rows(engine)
    paid_row = got[paid[0].run_id]
    free_rows = [got[m.run_id] for m in free]
    # the paid run started while every free command was still running its first attempt:
    # a `sleep FREE_S` cannot end sooner than FREE_S after it began (without preemption
    # the paid run starts only once one has ended)
    assert paid_row["attempt"] == 1 and paid_row["errors"] == []
    first_starts = [first_start(r) for r in free_rows]
    ends = [start + timedelta(seconds=FREE_S) for start in first_starts]
    assert paid_row["started_at"] < min(ends), (paid_row, first_starts)  # type: ignore[operator]
    # one free run was preempted: stopped, given back at the same attempt, run again
    preempted = [r for r in free_rows if r["errors"]]
    assert len(preempted) == 1, got
    [entry] = preempted[0]["errors"]  # type: ignore[misc]
    assert entry["preempted"] is True and entry["attempt"] == 1
    assert entry["error"].startswith("preempted: "), entry
    assert all(r["attempt"] == 1 for r in free_rows), got  # no attempt cost
    detail = run_detail(engine, FREE, str(preempted[0]["run_id"]))
    assert [(a.attempt, a.outcome) for a in detail.attempts] == [
        (1, "preempted"),
        (1, "succeeded"),
    ]
    # the output kept under attempt 1 is the run's that ended, never shown as the
    # stopped attempt's (which printed nothing: it was stopped in its sleep)
    assert [a.output for a in detail.attempts] == [None, "done\n"], detail.attempts
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM dead_letters")).scalar_one() == 0
    assert worker.metrics.value("cronfleet_tenant_preempted_total", tenant=FREE) == 1
    assert worker.metrics.value("cronfleet_tenant_preempted_total", tenant=PAID) == 0
    assert worker.metrics.value(started, tenant=FREE) == SLOTS + 1  # the preempted one twice


def test_a_run_preempted_as_often_as_its_tenants_bound_keeps_its_slot(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., Worker]
) -> None:
    """With `max_preemptions = 1` for the free tenant, one slot: the free run is
    preempted for a first paid run, runs again, and is not preempted for a second paid
    run, which waits for it to end."""
    free_s = 6
    tenants = TenantsPolicy(
        tenants={
            PAID: TenantLimits(tenant_class=TenantClass.paid),
            FREE: TenantLimits(max_preemptions=1),
        }
    )
    worker = start_worker(slots=1, tenants=tenants)
    started = "cronfleet_worker_tenant_started_total"
    [free] = command_runs(engine, FREE, free_s, 1)
    publisher.publish([free])
    wait_until("the free run fills the slot", lambda: worker.metrics.value(started, tenant=FREE))
    first = command_runs(engine, PAID, 1, 1)
    publisher.publish(first)
    wait_until(
        "the free run runs again after the first paid run",
        lambda: worker.metrics.value(started, tenant=FREE) == 2,
        60.0,
        lambda: str(rows(engine)),
    )
    second = command_runs(engine, PAID, 1, 1)
    publisher.publish(second)

    def succeeded() -> bool:
        return all(r["status"] == "succeeded" for r in rows(engine).values())

    wait_until("every run succeeded", succeeded, 90.0, lambda: str(rows(engine)))
    got = rows(engine)
    free_row = got[free.run_id]
    # preempted once, not twice: its second run went to its end, at attempt 1
    assert [e["preempted"] for e in free_row["errors"]] == [True], free_row  # type: ignore[attr-defined]
    assert free_row["attempt"] == 1
    # the second paid run waited for the free run's end: its `sleep` cannot end sooner
    # than free_s after it began (a second less for the two starts' clock estimates)
    end = free_row["started_at"] + timedelta(seconds=free_s - 1)  # type: ignore[operator]
    assert got[second[0].run_id]["started_at"] >= end, got
    detail = run_detail(engine, FREE, free.run_id)
    assert [(a.attempt, a.outcome) for a in detail.attempts] == [
        (1, "preempted"),
        (1, "succeeded"),
    ]
    assert worker.metrics.value("cronfleet_tenant_preempted_total", tenant=FREE) == 1


@dataclass
class Target:
    """A local HTTP target: `/hang` answers once `release` is set, `/` at once; every
    request's idempotency key is kept in arrival order."""

    port: int = 0
    keys: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def target() -> Iterator[Target]:
    state = Target()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.keys.append(self.headers.get("Idempotency-Key", ""))
            if self.path.startswith("/hang"):
                state.release.wait(120)  # bounded: the fixture sets it at the end
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


def http_runs(engine: Engine, tenant: str, url: str, n: int) -> list[RunMessage]:
    """`n` http runs due now of a job of `tenant` posting to `url`."""
    task = {"type": "http", "method": "POST", "url": url, "body": "{}"}
    job = make_job(engine, task, tenant=tenant, name=f"{tenant}-{uuid.uuid4().hex[:6]}")
    now = datetime.now(UTC)
    out = []
    for i in range(n):
        when = now + timedelta(milliseconds=i)
        rid = make_run(engine, job, when, tenant=tenant)
        out.append(RunMessage(rid, job, 1, to_epoch_ms(when), "normal"))
    return out


def test_a_paid_http_run_takes_a_task_loop_place_back_from_a_free_one(
    engine: Engine, publisher: RunPublisher, start_worker: Callable[..., Worker], target: Target
) -> None:
    """The task loop's places all held by free http runs whose target does not answer:
    a paid http run due now takes one back (its request abandoned mid-flight), succeeds
    while the free requests still hang, and the free run is run again at the same
    attempt with the same idempotency key."""
    worker = start_worker(slots=SLOTS)
    assert worker._task_loop is not None  # http runs on the loop, not the pool
    free = http_runs(engine, FREE, target.url("/hang"), SLOTS)
    publisher.publish(free)
    wait_until(
        "the free requests hold every place",
        lambda: len(target.keys) == SLOTS,
        detail=lambda: str(rows(engine)),
    )
    [paid] = http_runs(engine, PAID, target.url("/"), 1)
    publisher.publish([paid])
    # the free requests cannot be answered before `release`: a paid run that succeeds
    # now took a place back
    wait_until(
        "the paid run succeeded while every free request hangs",
        lambda: rows(engine)[paid.run_id]["status"] == "succeeded",
        60.0,
        lambda: str(rows(engine)),
    )
    got = rows(engine)
    preempted = [got[m.run_id] for m in free if got[m.run_id]["errors"]]
    assert len(preempted) == 1, got
    [entry] = preempted[0]["errors"]  # type: ignore[misc]
    assert entry["preempted"] is True and entry["attempt"] == 1, entry
    assert worker.metrics.value("cronfleet_tenant_preempted_total", tenant=FREE) == 1
    again = str(preempted[0]["run_id"])
    # run again, at the same attempt, with the same key: its target sees it twice
    wait_until(
        "the preempted run's request is sent again",
        lambda: target.keys.count(again) == 2,
        60.0,
        lambda: f"{target.keys} {rows(engine)}",
    )
    target.release.set()

    def succeeded() -> bool:
        return all(r["status"] == "succeeded" for r in rows(engine).values())

    wait_until("every run succeeded", succeeded, 60.0, lambda: str(rows(engine)))
    got = rows(engine)
    assert all(got[m.run_id]["attempt"] == 1 for m in free), got  # no attempt cost
    detail = run_detail(engine, FREE, again)
    assert [(a.attempt, a.outcome) for a in detail.attempts] == [
        (1, "preempted"),
        (1, "succeeded"),
    ]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM dead_letters")).scalar_one() == 0

"""http tasks through a real worker's task loop (kit.worker.task_loop), on the real
PostgreSQL and Kafka, against a local HTTP server that records every request.

What the loop must keep from the thread-per-run design: each run's request leaves once
with its idempotency key, at most `concurrency` requests are out at once, a failure is
recorded through the retry path, a cancel or a lease the worker can no longer confirm
stops the request at once, and a graceful stop gives back what has not finished."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import Engine, text

from kit.core.task_policy import TaskPolicy
from kit.reaper.reaper import Reaper
from kit.settings import Settings
from kit.tasks.policy import PolicySource
from kit.transport import RunPublisher, TieredConsumer
from kit.worker.worker import Worker, task_executor
from tests.integration.leaks import plant
from tests.integration.test_worker_e2e import Running, publish, wait_for
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration
LOOPBACK = PolicySource.fixed(TaskPolicy.parse({}, http_allow_hosts="127.0.0.1"))


@dataclass
class Target:
    port: int = 0
    keys: list[str] = field(default_factory=list)
    now: int = 0  # requests being answered
    most: int = 0  # the most at once
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def target() -> Iterator[Target]:
    state = Target()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real targets do

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            with state.lock:
                state.keys.append(self.headers.get("Idempotency-Key", ""))
                state.now += 1
                state.most = max(state.most, state.now)
            try:
                if self.path.startswith("/slow2"):
                    time.sleep(0.6)
                elif self.path.startswith("/slow"):
                    time.sleep(0.3)
                if self.path.startswith("/hang"):
                    state.release.wait(30)
            finally:
                # counted out before the answer leaves: once the worker has it, its slot
                # may send the next request before this thread runs again
                with state.lock:
                    state.now -= 1
            status, payload = (500, b"broken") if self.path == "/fail" else (200, b"ok")
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def http_worker(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(
        concurrency: int = 4, ttl_ms: int = 30_000, heartbeat_ms: int | None = None
    ) -> Running:
        consumer = TieredConsumer(
            settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
        )
        worker = Worker(
            engine,
            consumer,
            publisher,
            "w-http",
            concurrency=concurrency,
            lease_ttl_ms=ttl_ms,
            heartbeat_ms=heartbeat_ms,
            execute=task_executor(LOOPBACK),
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


def http_task(url: str) -> dict:
    return {"type": "http", "method": "POST", "url": url, "body": "{}"}


def test_http_runs_leave_once_each_at_most_concurrency_at_once(
    engine: Engine, publisher: RunPublisher, http_worker: Callable[..., Running], target: Target
) -> None:
    job = make_job(engine, task=http_task(target.url("/slow")))
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    runs = [make_run(engine, job, scheduled_at=base - timedelta(seconds=i)) for i in range(10)]
    running = http_worker(concurrency=3)
    assert running.worker._task_loop is not None  # http runs on the loop, not the pool
    for rid in runs:
        publish(publisher, engine, rid)
    for rid in runs:
        wait_for(engine, rid, "succeeded")
    assert sorted(target.keys) == sorted(runs)  # each once, with its run id as the key
    assert 1 < target.most <= 3, f"{target.most} requests were out at once (concurrency 3)"
    assert running.metrics.value("cronfleet_worker_runs_total", outcome="succeeded") == 10


def test_a_failed_response_goes_through_the_retry_path(
    engine: Engine, publisher: RunPublisher, http_worker: Callable[..., Running], target: Target
) -> None:
    retry = {"max_attempts": 3, "base_s": 60.0, "cap_s": 60.0, "jitter": "none"}
    task = http_task(target.url("/fail"))
    task["headers"] = {"Authorization": f"Bearer {plant('a failing http task header')}"}
    rid = make_run(engine, make_job(engine, task=task, retry=retry))
    http_worker()
    publish(publisher, engine, rid)
    row = wait_for(engine, rid, "retry_scheduled")
    assert row.errors[-1]["error"] == "HTTP 500; body: broken"
    assert target.keys == [rid]


def test_a_cancel_stops_the_request_at_once(
    engine: Engine, publisher: RunPublisher, http_worker: Callable[..., Running], target: Target
) -> None:
    rid = make_run(engine, make_job(engine, task=http_task(target.url("/hang"))))
    running = http_worker()
    publish(publisher, engine, rid)
    wait_until("the request to arrive", lambda: target.keys == [rid])
    assert running.worker.stop_cancelled([rid]) == {rid}
    wait_until("the request to be abandoned", lambda: running.worker.in_flight() == 0, 5.0)


def test_a_lease_not_confirmed_stops_the_request_and_gives_the_run_back(
    engine: Engine, publisher: RunPublisher, http_worker: Callable[..., Running], target: Target
) -> None:
    """It never heartbeats, so its lease runs out while the target hangs: the worker
    stops the request before the lease ends and gives the run back to the reaper."""
    rid = make_run(engine, make_job(engine, task=http_task(target.url("/hang"))))
    running = http_worker(ttl_ms=1000, heartbeat_ms=600_000)
    publish(publisher, engine, rid)
    wait_until("the request to arrive", lambda: target.keys == [rid])
    wait_until(
        "the worker to fence itself",
        lambda: running.metrics.value("cronfleet_worker_fenced_total") >= 1,
    )
    wait_until("the request to be abandoned", lambda: running.worker.in_flight() == 0, 5.0)
    reaper = Reaper(engine, publisher, 10_000)
    wait_until("the reaper to re-queue it", lambda: reaper.tick().requeued, poll_s=0.1)
    assert running.metrics.value("cronfleet_worker_stale_finishes_total") == 0
    row = run_row(engine, rid)
    assert row.attempt == 2 and row.errors[0]["error"].startswith("lease expired")


def test_a_graceful_stop_gives_back_a_request_still_out(
    engine: Engine, publisher: RunPublisher, http_worker: Callable[..., Running], target: Target
) -> None:
    """The drain (5 s here) ends with the target still holding the request: the run is
    released to the reaper, not recorded as a failure of its task."""
    rid = make_run(engine, make_job(engine, task=http_task(target.url("/hang"))))
    running = http_worker()
    publish(publisher, engine, rid)
    wait_until("the request to arrive", lambda: target.keys == [rid])
    running.stop.set()
    running.thread.join(timeout=20)
    assert not running.thread.is_alive()
    row = run_row(engine, rid)
    assert (row.status, row.errors) == ("running", []), row
    reaper = Reaper(engine, publisher, 10_000)
    assert reaper.tick().requeued == 1  # its lease was ended at the stop
    assert run_row(engine, rid).attempt == 2


def test_waiting_for_a_connection_does_not_spend_the_runs_timeout(
    engine: Engine,
    publisher: RunPublisher,
    http_worker: Callable[..., Running],
    target: Target,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One connection to a target that takes 0.6 s, two runs of timeout 1 s due at once:
    the second waits 0.6 s for the connection and then has its whole second for the
    request. When the wait counted against the timeout, the second run timed out while
    its request was at the target, and its retry reached the target twice."""
    from kit.tasks import http

    monkeypatch.setattr(http, "CONNECTIONS_PER_TARGET", 1)
    job = make_job(engine, task=http_task(target.url("/slow2")), timeout_s=1)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    runs = [make_run(engine, job, scheduled_at=base - timedelta(seconds=i)) for i in range(2)]
    http_worker(concurrency=4)
    for rid in runs:
        publish(publisher, engine, rid)
    for rid in runs:
        row = wait_for(engine, rid, "succeeded", "retry_scheduled")
        assert row.status == "succeeded", row.errors
    assert sorted(target.keys) == sorted(runs)
    assert target.most == 1


def test_a_worker_takes_on_only_what_it_can_start_within_half_its_lease(
    settings: Settings, engine: Engine
) -> None:
    """40 runs of 0.5 s due at once (40 jobs, spread over the topic's partitions), two
    workers of 2 slots and a 4 s lease: each holds unstarted at most its budget
    (kit.core.backlog: 2 slots turned over once a second until measured, then the
    measured ~4 starts a second, for half the lease: ~8; the bound below allows the
    moving average half again) and leaves the rest in the queue: the other worker takes
    its share; every run once. Without the budget a worker held all it was sent."""
    from kit.transport import ensure_topics

    prefix = f"cf.wk.{uuid.uuid4().hex[:10]}"
    ensure_topics(settings.kafka_bootstrap, 4, prefix=prefix)  # room for two consumers
    publisher = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix)
    group = f"g-{uuid.uuid4().hex[:8]}"
    workers: list[Running] = []
    for name in ("w-a", "w-b"):
        consumer = TieredConsumer(settings.kafka_bootstrap, group, topic_prefix=prefix)
        worker = Worker(
            engine, consumer, publisher, name, concurrency=2, lease_ttl_ms=4000,
            execute=task_executor(LOOPBACK),
        )  # fmt: skip
        workers.append(Running(worker, consumer))
    for running in workers:
        running.thread.start()
    most = {r.worker.worker_id: 0 for r in workers}
    try:

        def normal_tier(running: Running) -> set[int]:
            tier = next(t for t in running.consumer._tiers if t.name == "normal")
            return tier.assigned or set()

        wait_until(  # both in the group before anything is sent
            "both workers to be assigned partitions",
            lambda: all(normal_tier(r) for r in workers),
            60.0,
        )
        base = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        sleep = {"type": "sleep", "seconds": 0.5}
        runs = [
            make_run(engine, make_job(engine, task=sleep, name=f"j{i}"), scheduled_at=base)
            for i in range(40)
        ]
        for rid in runs:
            publish(publisher, engine, rid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for running in workers:
                name = running.worker.worker_id
                most[name] = max(most[name], running.worker._slotted_waiting)
            with engine.begin() as conn:
                left = conn.execute(
                    text("SELECT count(*) FROM runs WHERE status <> 'succeeded'")
                ).scalar_one()
            if left == 0:
                break
            time.sleep(0.02)
        rows = [run_row(engine, rid) for rid in runs]
        assert [r.status for r in rows] == ["succeeded"] * 40
        assert all(r.attempt == 1 for r in rows)
        assert max(most.values()) <= 12, most
        assert {r.worker_id for r in rows} == {"w-a", "w-b"}
    finally:
        for running in workers:
            running.stop.set()
        for running in workers:
            running.thread.join(timeout=20)
            running.consumer.close()
        publisher.close()


def test_a_task_that_will_not_stop_loses_its_lease_after_its_timeout(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> None:
    """The lease follows the task's timeout (kit.core.leases.beat_wanted): a task that
    ignores its cancel is beaten until its timeout and the time to stop it have passed,
    then no more, so the reaper takes the run back while the task still hangs, instead of
    the run being held for as long as the worker lives."""
    release = threading.Event()
    entered = threading.Event()

    def stubborn(*_args: object) -> tuple[bool, str | None, None]:
        entered.set()
        release.wait(60)  # ignores the run's cancel
        return True, None, None

    rid = make_run(engine, make_job(engine, task={"type": "sleep", "seconds": 0}, timeout_s=1))
    consumer = TieredConsumer(
        settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
    )
    worker = Worker(
        engine, consumer, publisher, "w-stuck", concurrency=1, lease_ttl_ms=2000,
        heartbeat_ms=300, execute=stubborn,
    )  # fmt: skip
    running = Running(worker, consumer)
    running.thread.start()
    try:
        publish(publisher, engine, rid)
        wait_until("the task to start", entered.is_set)
        reaper = Reaper(engine, publisher, 10_000)
        # timeout 1 s + 5 s to stop it, then at most one lease: well before the task ends
        wait_until("the reaper to take the run back", lambda: reaper.tick().requeued, 20.0)
        assert not release.is_set() and worker.in_flight() == 1  # the task still hangs
        assert run_row(engine, rid).attempt == 2
    finally:
        release.set()
        running.stop.set()
        running.thread.join(timeout=20)
        consumer.close()


@pytest.fixture
def listener() -> Iterator[dict[str, int]]:
    """A TCP port that counts the connections made to it and answers none."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.1)
    seen = {"port": sock.getsockname()[1], "accepted": 0}
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            seen["accepted"] += 1
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield seen
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    sock.close()


def _slot_waiters(worker: Worker) -> int:
    """Runs on the task loop waiting for a slot."""
    return worker.slot_waiters()


def test_an_http_run_does_no_network_work_before_it_holds_a_slot(
    engine: Engine,
    publisher: RunPublisher,
    http_worker: Callable[..., Running],
    target: Target,
    listener: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One slot, held by a request the target keeps: a second run, to another target,
    waits for the slot without resolving its host or connecting. Once the first ends,
    the second runs. (They used to look up and connect first, however many were due:
    a burst opened as many connections as runs, whatever the worker's concurrency.)"""
    from kit.tasks import http

    looked_up: list[str] = []
    real_lookup = http.checked_address_async

    async def lookup(host: str, *args: object) -> object:
        looked_up.append(host)
        return await real_lookup(host, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(http, "checked_address_async", lookup)
    first = make_run(engine, make_job(engine, task=http_task(target.url("/hang")), name="a"))
    second_url = f"http://127.0.0.1:{listener['port']}/x"
    second = make_run(engine, make_job(engine, task=http_task(second_url), name="b", timeout_s=2))
    running = http_worker(concurrency=1)
    publish(publisher, engine, first)
    wait_until("the first request to arrive", lambda: target.keys == [first])
    publish(publisher, engine, second)
    wait_until("the second run to wait for the slot", lambda: _slot_waiters(running.worker) == 1)
    assert listener["accepted"] == 0, "the second run connected before it held a slot"
    assert looked_up == ["127.0.0.1"], "the second run resolved its host before a slot"
    target.release.set()
    wait_for(engine, first, "succeeded")
    wait_until("the second run to connect", lambda: listener["accepted"] == 1)
    assert looked_up == ["127.0.0.1", "127.0.0.1"]


def test_a_failed_http_run_is_written_while_commands_fill_the_pool(
    engine: Engine, publisher: RunPublisher, http_worker: Callable[..., Running], target: Target
) -> None:
    """A thread-based task holds the worker's only pool thread for seconds; an http run
    that fails meanwhile has its failure written at once, not after that task ends (its
    write used to wait on the same pool, and its lease with it)."""
    busy = make_run(engine, make_job(engine, task={"type": "sleep", "seconds": 8}, name="busy"))
    retry = {"max_attempts": 3, "base_s": 60.0, "cap_s": 60.0, "jitter": "none"}
    failing = make_run(
        engine, make_job(engine, task=http_task(target.url("/fail")), retry=retry, name="f")
    )
    http_worker(concurrency=1)
    publish(publisher, engine, busy)
    wait_for(engine, busy, "running")
    publish(publisher, engine, failing)
    wait_until(
        "the http failure to be written or the sleep to end",
        lambda: (
            run_row(engine, failing).status == "retry_scheduled"
            or run_row(engine, busy).status != "running"
        ),
    )
    assert run_row(engine, failing).status == "retry_scheduled"
    assert run_row(engine, busy).status == "running", "the failure waited for the pool"

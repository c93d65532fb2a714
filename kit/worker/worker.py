"""A worker: consume a batch, claim it in one statement, commit offsets, execute in a
bounded pool, heartbeat every in-flight lease in one statement, finish under the token.

At-least-once: offsets are committed only after the claim committed, so a crash before
that redelivers the batch; a crash after it leaves claimed runs whose leases expire and
the reaper re-queues them. The run id is the task's idempotency key, so a second
execution of the same run can be recognised by the task's target.

Throughput at a burst: successes are written by one finisher thread, many runs per
transaction (each still conditional on its own lease token), and a run's slot is
freed only once its outcome is written. Tasks with no effect and no wait (`noop`)
execute on the consume thread instead of a pool hop. Failures and cancellations keep
their one-transaction-per-run path (retry triggers, dead letters).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy import Engine

from kit.core.partitions import PARTITION_COUNT
from kit.reaper.reaper import publish_pointers
from kit.store.claims import (
    Claim,
    ClaimedRun,
    FinishResult,
    RunPointer,
    run_finish_cancelled,
    run_finish_failed,
    runs_claim,
    runs_finish_ok,
    runs_heartbeat,
    runs_mark_dispatched,
    runs_release,
)
from kit.transport import RunPublisher, TieredConsumer

if TYPE_CHECKING:
    from kit.tasks.policy import PolicySource

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# (task spec, run id, attempt, timeout_s, cancel, tenant) -> (ok, error)
Execute = Callable[[dict[str, Any], str, int, int, threading.Event, str], tuple[bool, str | None]]

_RETRY_DB_S = 1.0
_LAG_EVERY_S = 5.0
_TIMEOUT_GRACE_S = 5.0  # the task kills itself at its timeout; this is the backstop
FINISH_BATCH = 1000  # successes written per transaction, at most
INLINE_TASKS = frozenset({"noop"})  # kit.tasks types run on the consume thread


def task_executor(
    policy: PolicySource | None = None, worker_secrets: tuple[str, ...] = ()
) -> Execute:
    """Run tasks of kit.tasks with the run id as their idempotency key, each as the
    operator's task policy allows its tenant now (no policy: no commands, public HTTP)."""
    from kit.tasks import RunContext
    from kit.tasks.policy import PolicySource, run_task

    source = policy or PolicySource(None)

    def run(
        spec: dict[str, Any],
        run_id: str,
        attempt: int,
        timeout_s: int,
        cancel: threading.Event,
        tenant: str,
    ) -> tuple[bool, str | None]:
        ctx = RunContext(run_id, attempt, timeout_s, cancel, tenant=tenant)
        result = run_task(spec, ctx, source.current(), worker_secrets)
        return bool(result.ok), result.error

    run.inline_tasks = INLINE_TASKS  # type: ignore[attr-defined]
    return run


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.start_lag = Histogram(
            "cronfleet_worker_start_lag_seconds",
            "Scheduled time to start, first attempts (database clock)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.runs = Counter(
            "cronfleet_worker_runs", "Finished runs by outcome", ["outcome"], registry=r
        )
        self.duplicates = Counter(
            "cronfleet_worker_duplicate_deliveries",
            "Messages that claimed nothing (duplicate or stale), skipped",
            registry=r,
        )
        self.stale_finishes = Counter(
            "cronfleet_worker_stale_finishes",
            "Finishes rejected: the lease token was no longer this worker's",
            registry=r,
        )
        self.leases_lost = Counter(
            "cronfleet_worker_leases_lost", "Heartbeats that found the lease gone", registry=r
        )
        self.consumer_lag = Gauge(
            "cronfleet_worker_consumer_lag",
            "Messages not yet consumed, per tier",
            ["tier"],
            registry=r,
        )
        self.in_flight = Gauge("cronfleet_worker_in_flight", "Runs executing now", registry=r)

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels or None) or 0.0


@dataclass
class _InFlight:
    run: ClaimedRun
    cancel: threading.Event = field(default_factory=threading.Event)
    deadline: float = 0.0  # monotonic; the backstop for the task's own timeout
    releasing: bool = False  # shutdown gave up on it: release, do not finish


class Worker:
    def __init__(
        self,
        engine: Engine,
        consumer: TieredConsumer,
        publisher: RunPublisher,
        worker_id: str,
        concurrency: int,
        lease_ttl_ms: int,
        *,
        heartbeat_ms: int | None = None,
        partitions: int = PARTITION_COUNT,
        execute: Execute | None = None,
        rng: random.Random | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.engine = engine
        self.consumer = consumer
        self.publisher = publisher
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.lease_ttl_ms = lease_ttl_ms
        self.heartbeat_s = (heartbeat_ms or max(200, lease_ttl_ms // 3)) / 1000
        self.partitions = partitions
        self.execute = execute or task_executor()
        # task types the executor runs without effect or wait: no pool hop for them
        self.inline_tasks: frozenset[str] = getattr(self.execute, "inline_tasks", frozenset())
        self.rng = rng or random.Random()
        self.metrics = metrics or WorkerMetrics()
        self._rng_lock = threading.Lock()
        self._lock = threading.Lock()
        self._in_flight: dict[str, _InFlight] = {}
        self._slot = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="run")
        self._beating = threading.Event()
        self._succeeded: queue.Queue[_InFlight] = queue.Queue()
        self._finisher_stop = threading.Event()

    # -- the consume loop -------------------------------------------------------------

    def run(self, stop: threading.Event, drain_s: float = 30.0) -> None:
        """Until `stop`: consume, claim, execute. Then stop consuming, let in-flight runs
        finish for up to `drain_s`, cancel and release the rest."""
        beat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        finisher = threading.Thread(target=self._finish_loop, name="finisher", daemon=True)
        finisher.start()
        last_lag = 0.0
        try:
            while not stop.is_set():
                free = self._wait_for_slot(stop)
                if free == 0:
                    continue
                messages = self.consumer.poll_batch(max_messages=free, timeout_s=0.5)
                if time.monotonic() - last_lag > _LAG_EVERY_S:
                    last_lag = time.monotonic()
                    for tier, lag in self.consumer.lag_by_tier().items():
                        self.metrics.consumer_lag.labels(tier).set(lag)
                if not messages:
                    continue
                claimed = self._claim(messages, stop)
                if claimed is None:
                    break  # stopping before the claim committed: the batch is redelivered
                self.consumer.commit()
                self.metrics.duplicates.inc(len(messages) - len(claimed))
                for run in claimed:
                    self._start(run)
        finally:
            self._drain(drain_s)
            self._finisher_stop.set()
            finisher.join(timeout=30)
            self._beating.set()
            beat.join(timeout=5)

    def _wait_for_slot(self, stop: threading.Event) -> int:
        with self._slot:
            free = self.concurrency - len(self._in_flight)
            if free <= 0:
                self._slot.wait(0.2)
                free = self.concurrency - len(self._in_flight)
            return max(0, free) if not stop.is_set() else 0

    def _claim(self, messages: list[Any], stop: threading.Event) -> list[ClaimedRun] | None:
        claims = [Claim(m.run_id, m.attempt) for m in messages]
        while True:
            try:
                return runs_claim(self.engine, claims, self.worker_id, self.lease_ttl_ms)
            except Exception:
                log.exception("claim failed; retrying")
                if stop.wait(_RETRY_DB_S):
                    return None

    def _start(self, run: ClaimedRun) -> None:
        if run.attempt == 1:
            lag_s = (run.started_at - run.scheduled_at).total_seconds()
            self.metrics.start_lag.observe(max(0.0, lag_s))
        timeout_s = run.timeout_s or 3600
        entry = _InFlight(run, deadline=time.monotonic() + timeout_s + _TIMEOUT_GRACE_S)
        with self._lock:
            self._in_flight[run.run_id] = entry
            self.metrics.in_flight.set(len(self._in_flight))
        spec = run.task_spec
        if spec is not None and spec.get("type") in self.inline_tasks:
            self._execute(entry)
        else:
            self._pool.submit(self._execute, entry)

    # -- one run ------------------------------------------------------------------------

    def _execute(self, entry: _InFlight) -> None:
        run = entry.run
        handed_off = False  # a success goes to the finisher, which frees the slot
        try:
            if run.task_spec is None:
                result = self._finish(
                    lambda: run_finish_cancelled(
                        self.engine, run.run_id, run.lease_token, "job deleted"
                    )
                )
            else:
                try:
                    ok, error = self.execute(
                        dict(run.task_spec),
                        run.run_id,
                        run.attempt,
                        run.timeout_s or 3600,
                        entry.cancel,
                        run.tenant,
                    )
                except Exception as exc:  # a task bug is a failed attempt, not a dead worker
                    log.exception("task of run %s raised", run.run_id)
                    ok, error = False, f"{type(exc).__name__}: {exc}"
                if entry.releasing:
                    return
                if ok:
                    self._succeeded.put(entry)
                    handed_off = True
                    return
                else:
                    result = self._finish(lambda: self._fail(run, error or "failed"))
            if result is None:
                return
            if not result.accepted:
                self.metrics.stale_finishes.inc()
                self.metrics.runs.labels("stale").inc()
                log.info("stale finish of run %s rejected (lease lost)", run.run_id)
                return
            self.metrics.runs.labels(result.status or "unknown").inc()
            if result.job_paused:
                log.warning("job %s auto-paused after repeated dead letters", run.job_id)
            if result.queued_next is not None:
                self._publish_queued([result.queued_next])
        finally:
            if not handed_off:
                self._free([entry])

    def _free(self, entries: list[_InFlight]) -> None:
        with self._slot:
            for entry in entries:
                self._in_flight.pop(entry.run.run_id, None)
            self.metrics.in_flight.set(len(self._in_flight))
            self._slot.notify_all()

    def _finish_loop(self) -> None:
        """Write successes in batches until stopped and nothing is left to write."""
        while True:
            try:
                batch = [self._succeeded.get(timeout=0.1)]
            except queue.Empty:
                if self._finisher_stop.is_set():
                    return
                continue
            while len(batch) < FINISH_BATCH:
                try:
                    batch.append(self._succeeded.get_nowait())
                except queue.Empty:
                    break
            try:
                self._finish_ok(batch)
            except Exception:  # never lose the slots: the reaper takes the runs over
                log.exception("finishing %d runs failed", len(batch))
            finally:
                self._free(batch)

    def _finish_ok(self, batch: list[_InFlight]) -> None:
        live = [e for e in batch if not e.releasing]
        if not live:
            return
        leases = sorted((e.run.run_id, e.run.lease_token) for e in live)
        outcome = self._finish(lambda: runs_finish_ok(self.engine, leases))
        if outcome is None:
            return
        accepted, queued = outcome
        stale = len(live) - len(accepted)
        self.metrics.runs.labels("succeeded").inc(len(accepted))
        if stale:
            self.metrics.stale_finishes.inc(stale)
            self.metrics.runs.labels("stale").inc(stale)
            log.info("%d stale finishes rejected (lease lost)", stale)
        if queued:
            self._publish_queued(queued)

    def _fail(self, run: ClaimedRun, error: str) -> FinishResult:
        with self._rng_lock:
            rng = random.Random(self.rng.getrandbits(64))
        return run_finish_failed(
            self.engine, run.run_id, run.lease_token, error, rng, self.partitions
        )

    def _finish(self, write: Callable[[], _T]) -> _T | None:
        """Write the outcome, retrying a database hiccup while the lease would still
        hold; after that the reaper takes over."""
        deadline = time.monotonic() + self.lease_ttl_ms / 1000
        while True:
            try:
                return write()
            except Exception:
                log.exception("finish failed; retrying")
                if time.monotonic() + _RETRY_DB_S > deadline:
                    return None
                time.sleep(_RETRY_DB_S)

    def _publish_queued(self, queued: list[RunPointer]) -> None:
        try:
            publish_pointers(self.publisher, queued)
            runs_mark_dispatched(self.engine, [q.run_id for q in queued])
        except Exception:  # the reaper publishes an undispatched run after its grace
            log.exception("publishing queued runs %s failed", [q.run_id for q in queued])

    # -- leases -------------------------------------------------------------------------

    def heartbeat(self) -> set[str]:
        """Extend every in-flight lease in one statement; stop the runs that lost it.
        Returns the run ids told to stop."""
        with self._lock:
            entries = list(self._in_flight.values())
        now = time.monotonic()
        for entry in entries:
            if now > entry.deadline and not entry.cancel.is_set():
                log.warning("run %s overran its timeout; cancelling", entry.run.run_id)
                entry.cancel.set()
        if not entries:
            return set()
        _kept, lost = runs_heartbeat(
            self.engine, [(e.run.run_id, e.run.lease_token) for e in entries], self.lease_ttl_ms
        )
        stopped: set[str] = set()
        with self._lock:
            for entry in entries:
                # a run that finished meanwhile also shows as lost: only stop live ones
                if entry.run.run_id in lost and entry.run.run_id in self._in_flight:
                    entry.cancel.set()
                    stopped.add(entry.run.run_id)
        if stopped:
            self.metrics.leases_lost.inc(len(stopped))
            log.warning("leases lost (reaped or cancelled), stopping: %s", sorted(stopped))
        return stopped

    def _heartbeat_loop(self) -> None:
        while not self._beating.wait(self.heartbeat_s):
            try:
                self.heartbeat()
            except Exception:
                log.exception("heartbeat failed; retrying")

    def _drain(self, drain_s: float) -> None:
        deadline = time.monotonic() + drain_s
        with self._slot:
            while self._in_flight and time.monotonic() < deadline:
                self._slot.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            left = list(self._in_flight.values())
            for entry in left:
                entry.releasing = True
                entry.cancel.set()
        if left:
            released = runs_release(self.engine, [(e.run.run_id, e.run.lease_token) for e in left])
            log.warning("shutdown: released %d unfinished runs to the reaper", released)
        self._pool.shutdown(wait=True, cancel_futures=False)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

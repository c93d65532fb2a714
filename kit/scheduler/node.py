"""A scheduler node: a scan thread (leases, then a fenced scan every second) and a
dispatch thread (publish each held run at its second, then mark it dispatched).

Tests drive the same object step by step: `lease_pass()`, `scan_once(now=...)`,
`dispatch_due(now_ms)`; `start()`/`stop()` run the threads. Several nodes can live in
one process (metrics are labelled by node id).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import Engine

from kit.core.defaults import SCAN_PERIOD_MS, misfire_grace_ms
from kit.core.dispatch import TimerWheel, catch_up_order
from kit.scheduler import metrics as m
from kit.scheduler.leases import LeasePass, PartitionLeases
from kit.scheduler.scan import DEFAULT_BATCH, HeldRun, JobViews, ScanResult, scan_partitions
from kit.store import scheduling as sql
from kit.transport import PublishError, RunMessage
from kit.transport.publisher import EncodedRun, encode

log = logging.getLogger(__name__)

# Runs per produce+flush. Each chunk is marked dispatched on a second thread while the
# next one is produced, so a burst reaches the queue without waiting on the database.
PUBLISH_CHUNK = 5000


class Publisher(Protocol):
    def publish(self, messages: Sequence[RunMessage], timeout_s: float = 10.0) -> None: ...

    def publish_encoded(self, messages: Sequence[EncodedRun], timeout_s: float = 10.0) -> None: ...


@dataclass(frozen=True)
class NodeConfig:
    partitions: int = 1024
    scan_ahead_ms: int = 5000
    lease_ttl_ms: int = 10_000
    heartbeat_ms: int = 2000
    scan_batch: int = DEFAULT_BATCH
    scan_period_ms: int = SCAN_PERIOD_MS
    # The running dispatch loop records dispatched_at this long after the publish: by
    # then most runs of a burst were claimed (the claim sets dispatched_at), so the mark
    # finds nothing to write instead of competing with the claims for the database
    # (a 50,000-run burst: start lag p99 3.7-4.1 s -> 3.4-3.6 s). Far below the reaper's
    # undispatched grace. dispatch_due() called directly marks at once.
    mark_delay_ms: int = 1000

    @property
    def misfire_grace_ms(self) -> int:
        """Fires later than this are missed; anything a failover of these timings can
        delay is not (kit.core.defaults.misfire_grace_ms)."""
        return misfire_grace_ms(self.lease_ttl_ms, self.heartbeat_ms, self.scan_period_ms)

    @classmethod
    def from_settings(cls, settings: object) -> NodeConfig:
        return cls(
            partitions=settings.partitions,  # type: ignore[attr-defined]
            scan_ahead_ms=settings.scan_ahead_ms,  # type: ignore[attr-defined]
            lease_ttl_ms=settings.partition_lease_ttl_ms,  # type: ignore[attr-defined]
            heartbeat_ms=settings.node_heartbeat_ms,  # type: ignore[attr-defined]
        )


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class SchedulerNode:
    def __init__(
        self, engine: Engine, publisher: Publisher, node_id: str, config: NodeConfig
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.node_id = node_id
        self.config = config
        self.leases = PartitionLeases(engine, node_id, config.partitions, config.lease_ttl_ms)
        self.jobs = JobViews()
        self._wheel: TimerWheel[HeldRun] = TimerWheel()
        self._held: Counter[int] = Counter()  # partition -> runs in the wheel
        self._lock = threading.Lock()
        self._stop_scanning = threading.Event()
        self._stopped = threading.Event()
        self._killed = threading.Event()
        self._threads: list[threading.Thread] = []
        self.last_scan: ScanResult | None = None
        self.published = 0
        self._marker = ThreadPoolExecutor(1, thread_name_prefix=f"{node_id}-mark")
        self._marks: list[Future[list[HeldRun]]] = []  # delayed marks not yet settled
        self._hurry = threading.Event()

    # -- steps --------------------------------------------------------------------------

    def lease_pass(self) -> LeasePass:
        with self._lock:
            held = dict(self._held)
        result = self.leases.refresh(lambda p: held.get(p, 0))
        if result.lost:
            log.warning("%s lost partitions %s", self.node_id, sorted(result.lost)[:20])
        m.PARTITIONS_OWNED.labels(self.node_id).set(len(self.leases.epochs))
        return result

    def scan_once(self, now: datetime | None = None) -> ScanResult:
        """One fenced scan of the partitions this node holds and is not draining; the
        runs it committed go into the timer wheel."""
        started = time.perf_counter()
        epochs = self.leases.scannable()
        result = scan_partitions(
            self.engine,
            self.node_id,
            epochs,
            scan_ahead_ms=self.config.scan_ahead_ms,
            now=now,
            batch=self.config.scan_batch,
            jobs=self.jobs,
            misfire_grace_ms=self.config.misfire_grace_ms,
        )
        m.SCAN_SECONDS.labels(self.node_id).observe(time.perf_counter() - started)
        if result.refused:
            m.FENCED_REFUSED.labels(self.node_id).inc(len(result.refused))
            self.leases.drop(result.refused)
            log.warning("%s fenced off partitions %s", self.node_id, sorted(result.refused)[:20])
        with self._lock:
            for run in result.held:
                self._wheel.add(run.due_ms, run, run.tier)
                self._held[run.partition_id] += 1
        m.RUNS_FIRED.labels(self.node_id).inc(len(result.held))
        for reason, n in result.skipped.items():
            m.RUNS_SKIPPED.labels(self.node_id, reason).inc(n)
        if result.dropped:
            m.TRIGGERS_DROPPED.labels(self.node_id).inc(result.dropped)
        self.last_scan = result
        return result

    def held(self) -> int:
        with self._lock:
            return len(self._wheel)

    def dispatch_due(self, now_ms: int | None = None, mark_delay_ms: int = 0) -> list[HeldRun]:
        """Publish every held run due by `now_ms` (a backlog highest priority first),
        then mark the confirmed ones dispatched; with `mark_delay_ms`, the marks are
        left to the marker thread (`settle_marks()` waits for them). Runs of partitions
        this node lost are dropped: the reaper re-publishes them if they were never
        dispatched."""
        now_ms = wall_ms() if now_ms is None else now_ms
        with self._lock:
            due = self._wheel.pop_due(now_ms)
            for run in due:
                self._held[run.partition_id] -= 1
                if self._held[run.partition_id] <= 0:
                    del self._held[run.partition_id]
        if not due:
            return []
        epochs = self.leases.epochs
        due = [r for r in due if epochs.get(r.partition_id) == r.epoch]
        if len({r.due_ms // 1000 for r in due}) > 1:
            due = catch_up_order(due, lambda r: r.tier, lambda r: r.due_ms)
        if mark_delay_ms > 0:
            sent: list[HeldRun] = []
            for i in range(0, len(due), PUBLISH_CHUNK):
                ok = self._publish(due[i : i + PUBLISH_CHUNK])
                mark = self._marker.submit(self._mark, ok, wall_ms(), mark_delay_ms)
                with self._lock:
                    done = [f for f in self._marks if f.done()]
                    self._marks = [f for f in self._marks if not f.done()]
                    self._marks.append(mark)
                for f in done:
                    if f.exception() is not None:  # the reaper re-publishes what stayed unmarked
                        log.error(
                            "%s: marking dispatched runs failed: %s", self.node_id, f.exception()
                        )
                sent += ok
            return sent
        marks: list[Future[list[HeldRun]]] = []
        try:
            for i in range(0, len(due), PUBLISH_CHUNK):
                ok = self._publish(due[i : i + PUBLISH_CHUNK])
                marks.append(self._marker.submit(self._mark, ok, wall_ms()))
        finally:
            sent = []
            for f in marks:  # every publish is marked (or has failed) before returning
                sent += f.result()
        return sent

    def settle_marks(self) -> None:
        """Mark the runs already published now, without waiting out the delay."""
        self._hurry.set()
        with self._lock:
            marks, self._marks = self._marks, []
        for f in marks:
            try:
                f.result()
            except Exception:  # the reaper re-publishes what stayed unmarked
                log.exception("%s: marking dispatched runs failed", self.node_id)
        self._hurry.clear()

    def _publish(self, runs: list[HeldRun]) -> list[HeldRun]:
        """Produce and flush; the runs whose delivery was confirmed."""
        messages = [
            r.message
            or encode(RunMessage(r.run_id, r.job_id, r.attempt, r.scheduled_at_ms, r.tier))
            for r in runs
        ]
        try:
            self.publisher.publish_encoded(messages)
        except PublishError as exc:
            failed = set(exc.failed_run_ids)
            m.PUBLISH_FAILED.labels(self.node_id).inc(len(failed))
            log.error("%s: %s", self.node_id, exc)
            return [r for r in runs if r.run_id not in failed]
        return runs

    def _mark(self, ok: list[HeldRun], published_ms: int, delay_ms: int = 0) -> list[HeldRun]:
        wait_ms = published_ms + delay_ms - wall_ms()
        if wait_ms > 0:
            self._hurry.wait(wait_ms / 1000)  # stop()/kill() mark at once
        with self.engine.begin() as conn:
            sql.runs_mark_dispatched(conn, [(r.run_id, r.attempt) for r in ok])
        lag = m.DISPATCH_LAG.labels(self.node_id)
        for r in ok:
            lag.observe(max(0, published_ms - r.due_ms) / 1000)
        m.RUNS_PUBLISHED.labels(self.node_id).inc(len(ok))
        with self._lock:
            self.published += len(ok)
        return ok

    # -- threads ------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._scan_loop, "scan"), (self._dispatch_loop, "dispatch")):
            t = threading.Thread(target=target, name=f"{self.node_id}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 30.0, release: bool = True) -> None:
        """Graceful: stop scanning, dispatch what is held (at its second), release the
        leases. release=False leaves them to expire (as a crash would)."""
        self._stop_scanning.set()
        for t in self._threads[:1]:
            t.join(timeout_s)
        self._stopped.set()
        for t in self._threads[1:]:
            t.join(timeout_s)
        self._threads.clear()
        self.settle_marks()
        if release:
            self.leases.leave()
        m.PARTITIONS_OWNED.labels(self.node_id).set(0 if release else len(self.leases.epochs))

    def kill(self) -> None:
        """Stop both threads at once, dispatching nothing more and releasing nothing:
        what a SIGKILL leaves behind (held runs are the reaper's)."""
        self._killed.set()
        self._stop_scanning.set()
        self._stopped.set()
        for t in self._threads:
            t.join(10)
        self._threads.clear()
        self.settle_marks()  # what was published is marked, as before the kill
        with self._lock:
            self._wheel = TimerWheel()
            self._held.clear()

    def _scan_loop(self) -> None:
        period_s = self.config.scan_period_ms / 1000
        next_lease = 0.0
        while not self._stop_scanning.is_set():
            tick = time.monotonic()
            try:
                if tick >= next_lease:
                    self.lease_pass()
                    next_lease = tick + self.config.heartbeat_ms / 1000
                result = self.scan_once()
                if result.full:
                    continue  # more is due: scan again at once
            except Exception:
                log.exception("%s: scan pass failed; retrying", self.node_id)
            # wake at the next wall-clock second boundary (scans align with fire seconds)
            wait = period_s - (time.time() % period_s)
            self._stop_scanning.wait(wait)

    def _dispatch_loop(self) -> None:
        while not self._killed.is_set():
            stopping = self._stopped.is_set()
            try:
                self.dispatch_due(mark_delay_ms=self.config.mark_delay_ms)
            except Exception:
                log.exception("%s: dispatch failed; runs left to the reaper", self.node_id)
            with self._lock:
                nxt = self._wheel.next_due_ms()
            if stopping and nxt is None:
                return
            wait_ms = 50 if nxt is None else min(50, max(0, nxt - wall_ms()))
            time.sleep(wait_ms / 1000)

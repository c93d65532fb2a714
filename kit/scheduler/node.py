"""A scheduler node: a scan thread (leases, then a fenced scan every second) and a publish
thread that sends what each scan committed to the run queue at once.

A run is published as soon as it is committed, up to the scan-ahead before its second: a
worker claims it ahead and starts it at its second by the database's clock
(kit/worker). So at a top-of-hour burst the node's work (scan, insert, publish) and the
workers' claims happen before the second, and what is left after it is the task and its
finish. A run the broker does not confirm is kept and sent again as soon as the broker
answers (kit.core.unsent), and marked as published then; should the node die between
commit and publish, the reaper finds the run unclaimed once the workers have read past
where its message would be (kit.core.recovery) and publishes it.

Tests drive the same object step by step: `lease_pass()`, `scan_once(now=...)`,
`publish_held()`; `start()`/`stop()` run the threads. Several nodes can live in one
process (metrics are labelled by node id).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import Engine

from kit.core.defaults import SCAN_AHEAD_MS, SCAN_PERIOD_MS, misfire_grace_ms
from kit.core.dispatch import catch_up_order, next_scan_at_ms
from kit.core.unsent import UNSENT_LIMIT, Unsent
from kit.crash import crash_point
from kit.scheduler import metrics as m
from kit.scheduler.leases import LeasePass, PartitionLeases
from kit.scheduler.scan import DEFAULT_BATCH, HeldRun, JobViews, ScanResult, scan_partitions
from kit.store.claims import runs_mark_published_in
from kit.transport import PublishError, RunMessage
from kit.transport.publisher import Encoded

log = logging.getLogger(__name__)

PUBLISH_CHUNK = 5000  # runs per produce + flush
MARK_CHUNK = 500  # runs marked published again per transaction (kit.core.unsent)


class Publisher(Protocol):
    def publish(self, messages: Sequence[RunMessage], timeout_s: float = 10.0) -> None: ...

    def publish_encoded(
        self, messages: Sequence[Encoded], timeout_s: float = 10.0
    ) -> dict[str, int] | None: ...


@dataclass(frozen=True)
class NodeConfig:
    partitions: int = 1024
    scan_ahead_ms: int = SCAN_AHEAD_MS
    lease_ttl_ms: int = 10_000
    heartbeat_ms: int = 2000
    scan_batch: int = DEFAULT_BATCH
    scan_period_ms: int = SCAN_PERIOD_MS
    unsent_limit: int = UNSENT_LIMIT  # runs kept to send again while the broker is away

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


def scheduler_engine(database_url: str, config: NodeConfig, pool_size: int = 4) -> Engine:
    """The node's connection pool. A scan holds its lease rows FOR SHARE until it commits,
    so that no takeover lands mid-scan; should the node's link die mid-scan, PostgreSQL
    must end that transaction soon, or every other node's lease pass waits on those rows
    (and their own leases run out meanwhile) for as long as the server believes the dead
    client lives: hours of TCP keepalive. So the server ends a node's transaction left
    idle for half a lease, and a connection whose sent data goes unacknowledged that long
    (found by the chaos drill `scheduler-partition`). A scan's Python work between two
    statements grows with its batch (5-9 s for 20,000 varied cron triggers on 2 cores,
    benchmarks/scan_gap.py), so the scan touches the server every
    `scan_idle_budget_ms` of it (kit.scheduler.scan.IdleGuard)."""
    from kit.store.db import engine_for

    session = {
        "idle_in_transaction_session_timeout": idle_timeout_ms(config),
        "tcp_user_timeout": idle_timeout_ms(config),
    }
    return engine_for(database_url, pool_size=pool_size, session=session)


def idle_timeout_ms(config: NodeConfig) -> int:
    """The scheduler sessions' idle-in-transaction (and unacknowledged-send) timeout:
    half a lease, so a dead node's locks go well before its lease would."""
    return max(500, config.lease_ttl_ms // 2)


def scan_idle_budget_ms(config: NodeConfig) -> int:
    """The longest a scan lets its transaction sit idle while it computes: a fifth of
    the timeout, so a chunk of work past the budget, a GC pause or a busy core still
    leave most of the timeout (1 s of 5 s with the defaults)."""
    return idle_timeout_ms(config) // 5


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
        self._committed: queue.SimpleQueue[list[HeldRun] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._unpublished = 0  # committed runs not yet handed to the broker
        self._unsent: Unsent[HeldRun] = Unsent(config.unsent_limit)  # the publish thread's
        self._stop_scanning = threading.Event()
        self._killed = threading.Event()
        self._threads: list[threading.Thread] = []
        self.last_scan: ScanResult | None = None
        self.published = 0

    # -- steps --------------------------------------------------------------------------

    def lease_pass(self) -> LeasePass:
        result = self.leases.refresh()
        if result.lost:
            log.warning("%s lost partitions %s", self.node_id, sorted(result.lost)[:20])
        m.PARTITIONS_OWNED.labels(self.node_id).set(len(self.leases.epochs))
        return result

    def scan_once(self, now: datetime | None = None) -> ScanResult:
        """One fenced scan of the partitions this node holds and is not draining; the
        runs it committed are queued for the publish thread (`publish_held()` when
        stepping)."""
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
            idle_budget_ms=scan_idle_budget_ms(self.config),
        )
        crash_point("scan.committed", result.held)
        m.SCAN_SECONDS.labels(self.node_id).observe(time.perf_counter() - started)
        if result.refused:
            m.FENCED_REFUSED.labels(self.node_id).inc(len(result.refused))
            self.leases.drop(result.refused)
            log.warning("%s fenced off partitions %s", self.node_id, sorted(result.refused)[:20])
        if result.held:
            with self._lock:
                self._unpublished += len(result.held)
            self._committed.put(result.held)
        m.RUNS_FIRED.labels(self.node_id).inc(len(result.held))
        for reason, n in result.skipped.items():
            m.RUNS_SKIPPED.labels(self.node_id, reason).inc(n)
        if result.dropped:
            m.TRIGGERS_DROPPED.labels(self.node_id).inc(result.dropped)
        self.last_scan = result
        return result

    def held(self) -> int:
        """Committed runs not yet handed to the broker, or kept to send again."""
        with self._lock:
            return self._unpublished + len(self._unsent)

    def publish_held(self) -> list[HeldRun]:
        """Publish every run the scans committed so far, and those kept from a failed
        publish whose time to try again has come, highest tier first (then oldest);
        returns those the broker confirmed."""
        due: list[HeldRun] = []
        while True:
            try:
                batch = self._committed.get_nowait()
            except queue.Empty:
                break
            if batch is not None:
                due += batch
        return self._publish_all(due)

    def _publish_all(self, runs: list[HeldRun], final: bool = False) -> list[HeldRun]:
        """Send `runs` with the kept ones that are due (all of them when `final`); what
        the broker does not confirm is kept for the next try, past the limit left to the
        reaper."""
        now_ms = wall_ms()
        again = self._unsent.take_all() if final else self._unsent.due(now_ms)
        if not runs and not again:
            return []
        ordered = catch_up_order(runs + again, lambda r: r.tier, lambda r: r.due_ms)
        sent: list[HeldRun] = []
        failed: list[HeldRun] = []
        left: list[HeldRun] = []
        try:
            for i in range(0, len(ordered), PUBLISH_CHUNK):
                chunk = ordered[i : i + PUBLISH_CHUNK]
                try:
                    ok = self._publish(chunk)
                except Exception:
                    log.exception("%s: publish failed; its runs are kept", self.node_id)
                    ok = []
                sent += ok
                if len(ok) < len(chunk):
                    confirmed = {r.run_id for r in ok}
                    failed += [r for r in chunk if r.run_id not in confirmed]
        finally:
            with self._lock:
                self._unpublished -= len(runs)
                if failed:
                    left = self._unsent.failed(failed, wall_ms())
                elif sent:
                    self._unsent.sent()
            m.RUNS_UNSENT.labels(self.node_id).set(len(self._unsent))
        if failed:
            m.PUBLISH_FAILED.labels(self.node_id).inc(len(failed))
            log.error(
                "%s: %d runs not confirmed by the broker, kept to send again (%d kept%s)",
                self.node_id,
                len(failed),
                len(self._unsent),
                f"; {len(left)} past the limit left to the reaper" if left else "",
            )
        if again:
            self._mark_resent(again, sent)
        return sent

    def _mark_resent(self, again: list[HeldRun], sent: list[HeldRun]) -> None:
        """Runs sent again are marked published now, so that the reaper, which counts a
        lost message from a run's last publish, does not send them a third time while
        they wait in a backlog. The workers claim them meanwhile: each mark is a short
        transaction of `MARK_CHUNK` runs, so that no claim waits long on its row locks.
        Should a mark fail, the reaper may send a duplicate message, which claims
        nothing."""
        kept = {r.run_id for r in again}
        resent = [r.run_id for r in sent if r.run_id in kept]
        if not resent:
            return
        m.RUNS_RESENT.labels(self.node_id).inc(len(resent))
        log.warning("%s: %d runs kept from a failed publish sent again", self.node_id, len(resent))
        for i in range(0, len(resent), MARK_CHUNK):
            chunk = resent[i : i + MARK_CHUNK]
            try:
                with self.engine.begin() as conn:
                    runs_mark_published_in(conn, chunk)
            except Exception:
                log.exception("%s: could not mark %d runs sent again", self.node_id, len(chunk))

    def _publish(self, runs: list[HeldRun]) -> list[HeldRun]:
        """Produce and flush; the runs whose delivery was confirmed. A held run is its
        own message (kit.scheduler.scan.HeldRun)."""
        try:
            acked = self.publisher.publish_encoded(runs) or {}
            ok = runs
        except PublishError as exc:
            failed = set(exc.failed_run_ids)
            log.error("%s: %s", self.node_id, exc)
            ok = [r for r in runs if r.run_id not in failed]
            acked = exc.acked_ms
        # Dispatch lag (docs/life-of-a-run.md, "Lags"): the broker's acknowledgement of
        # the message minus the time it is due. Signed: runs are published up to the
        # scan-ahead before their second, so it is negative by design.
        now_ms = wall_ms()
        lag = m.DISPATCH_LAG.labels(self.node_id)
        for r in ok:
            lag.observe((acked.get(r.run_id, now_ms) - r.due_ms) / 1000)
        m.RUNS_PUBLISHED.labels(self.node_id).inc(len(ok))
        with self._lock:
            self.published += len(ok)
        return ok

    # -- threads ------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._scan_loop, "scan"), (self._publish_loop, "publish")):
            t = threading.Thread(target=target, name=f"{self.node_id}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 30.0, release: bool = True) -> None:
        """Graceful: stop scanning, publish what was committed, release the leases.
        release=False leaves them to expire (as a crash would)."""
        self._stop_scanning.set()
        for t in self._threads[:1]:
            t.join(timeout_s)
        self._committed.put(None)  # the publish thread ends once all before it is sent
        for t in self._threads[1:]:
            t.join(timeout_s)
        self._threads.clear()
        if release:
            self.leases.leave()
        m.PARTITIONS_OWNED.labels(self.node_id).set(0 if release else len(self.leases.epochs))

    def kill(self) -> None:
        """Stop both threads at once, publishing nothing more and releasing nothing:
        what a SIGKILL leaves behind (committed runs unpublished or kept unsent are the
        reaper's)."""
        self._killed.set()
        self._stop_scanning.set()
        self._committed.put(None)
        for t in self._threads:
            t.join(10)
        self._threads.clear()

    def _scan_loop(self) -> None:
        period_ms = self.config.scan_period_ms
        next_lease = 0.0
        while not self._stop_scanning.is_set():
            tick = time.monotonic()
            try:
                if tick >= next_lease:
                    self.lease_pass()
                    next_lease = tick + self.config.heartbeat_ms / 1000
                result = self.scan_once()
                if result.rescan:
                    continue  # full and it took some: more is due, scan again at once
            except Exception:
                log.exception("%s: scan pass failed; retrying", self.node_id)
            # wake at the next wall-clock second boundary (scans align with fire seconds)
            now_ms = time.time() * 1000
            self._stop_scanning.wait((next_scan_at_ms(int(now_ms), period_ms) - now_ms) / 1000)

    def _publish_loop(self) -> None:
        """Publish each scan's runs as soon as they are committed; a burst's next scan
        batch proceeds meanwhile. Batches already waiting are published together, and
        runs kept from a failed publish go with them once their time comes."""
        while not self._killed.is_set():
            wait_ms = self._unsent.wait_ms(wall_ms())
            try:
                batch = self._committed.get(timeout=None if wait_ms < 0 else wait_ms / 1000)
            except queue.Empty:
                batch = []  # only the kept runs are due
            if self._killed.is_set():
                return
            end = batch is None
            runs = batch or []
            while True:
                try:
                    more = self._committed.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    end = True
                else:
                    runs += more
            try:
                self._publish_all(runs, final=end)
            except Exception:
                log.exception("%s: publish failed; runs left to the reaper", self.node_id)
            if end:
                return

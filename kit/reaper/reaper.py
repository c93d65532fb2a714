"""One reaper pass: expired leases back to the queue (or dead), never-published runs
published. Any number of reapers may run: the store locks rows FOR UPDATE SKIP LOCKED."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import Engine

from kit.core.partitions import PARTITION_COUNT
from kit.core.timeutil import to_epoch_ms
from kit.store.claims import RunPointer
from kit.store.fleet_health import fleet_health_read
from kit.store.reaping import DEFAULT_BATCH, runs_reap_expired, runs_republish_undispatched
from kit.transport import RunMessage, RunPublisher

log = logging.getLogger(__name__)


def message_of(pointer: RunPointer) -> RunMessage:
    return RunMessage(
        run_id=pointer.run_id,
        job_id=pointer.job_id,
        attempt=pointer.attempt,
        scheduled_at_ms=to_epoch_ms(pointer.scheduled_at),
        tier=pointer.priority,
    )


def publish_pointers(publisher: RunPublisher, pointers: Sequence[RunPointer]) -> None:
    if pointers:
        publisher.publish([message_of(p) for p in pointers])


class ReaperMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reaped = Counter(
            "cronfleet_reaper_runs",
            "Runs the reaper acted on, by action",
            ["action"],  # lease_expired_requeued | lease_expired_dead | undispatched_republished
            registry=self.registry,
        )
        self.auto_paused = Counter(
            "cronfleet_reaper_jobs_auto_paused",
            "Jobs paused by their dead streak",
            registry=self.registry,
        )
        self.errors = Counter(
            "cronfleet_reaper_pass_errors",
            "Passes that failed (retried next period)",
            registry=self.registry,
        )
        # Fleet-wide, from the database: the alarms' view of what no node can report itself.
        self.partitions_unowned = Gauge(
            "cronfleet_partitions_unowned",
            "Trigger partitions no scheduler node holds an unexpired lease on",
            registry=self.registry,
        )
        self.dead_letters_waiting = Gauge(
            "cronfleet_dead_letters_waiting",
            "Dead-lettered runs not replayed",
            registry=self.registry,
        )


@dataclass(frozen=True)
class ReapCounts:
    requeued: int
    dead: int
    republished: int

    @property
    def total(self) -> int:
        return self.requeued + self.dead + self.republished


class Reaper:
    def __init__(
        self,
        engine: Engine,
        publisher: RunPublisher,
        undispatched_grace_ms: int,
        metrics: ReaperMetrics | None = None,
        batch: int = DEFAULT_BATCH,
        partitions: int = PARTITION_COUNT,
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.grace_ms = undispatched_grace_ms
        self.metrics = metrics or ReaperMetrics()
        self.batch = batch
        self.partitions = partitions

    def _publish(self, pointers: Sequence[RunPointer]) -> None:
        publish_pointers(self.publisher, pointers)

    def tick(self) -> ReapCounts:
        """One pass; each query loops while it fills a whole batch."""
        requeued = dead = republished = 0
        while True:
            expired = runs_reap_expired(self.engine, self._publish, self.batch)
            requeued += len(expired.requeued)
            dead += len(expired.dead)
            self.metrics.auto_paused.inc(len(expired.paused_jobs))
            for job_id in expired.paused_jobs:
                log.warning("job %s auto-paused: its dead-letter streak reached its limit", job_id)
            if len(expired.requeued) + len(expired.dead) < self.batch:
                break
        while True:
            published = runs_republish_undispatched(
                self.engine, self.grace_ms, self._publish, self.batch
            )
            republished += len(published)
            if len(published) < self.batch:
                break
        health = fleet_health_read(self.engine, self.partitions)
        self.metrics.partitions_unowned.set(health.partitions_unowned)
        self.metrics.dead_letters_waiting.set(health.dead_letters_waiting)
        counts = ReapCounts(requeued, dead, republished)
        self.metrics.reaped.labels("lease_expired_requeued").inc(requeued)
        self.metrics.reaped.labels("lease_expired_dead").inc(dead)
        self.metrics.reaped.labels("undispatched_republished").inc(republished)
        if counts.total:
            log.info(
                "reaper: %d expired leases re-queued, %d dead, %d undispatched re-published",
                requeued,
                dead,
                republished,
            )
        return counts

    def run(self, stop: threading.Event, period_ms: int) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a database or broker hiccup: try again next period
                self.metrics.errors.inc()
                log.exception("reaper pass failed; retrying next period")
            stop.wait(period_ms / 1000)

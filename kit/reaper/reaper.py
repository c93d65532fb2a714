"""One reaper pass: expired leases back to the queue (or dead); manual runs and replayed
dead letters published; runs nobody claimed whose message was lost (or never sent: a
scheduler died between commit and publish) published again. Any number of reapers may
run: the store locks rows FOR UPDATE SKIP LOCKED."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import Engine

from kit.core.partitions import PARTITION_COUNT
from kit.core.recovery import QueueSample, caught_up_at, unclaimed_cutoff
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.store.claims import RunPointer
from kit.store.db import db_now
from kit.store.fleet_health import fleet_health_read
from kit.store.reaping import DEFAULT_BATCH, runs_publish_unclaimed, runs_reap_expired
from kit.transport import RunPublisher
from kit.transport.progress import QueueProgress
from kit.transport.republish import publish_pointers

log = logging.getLogger(__name__)


class ReaperMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reaped = Counter(
            "cronfleet_reaper_runs",
            "Runs the reaper acted on, by action",
            # lease_expired_requeued | lease_expired_dead | manual_published |
            # lost_republished
            ["action"],
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
    requeued: int  # expired leases: pending again at the next attempt, re-published
    dead: int  # expired leases on the last attempt
    republished: int  # manual runs and replayed dead letters, published
    lost: int = 0  # runs nobody claimed whose message was lost (or never sent), again

    @property
    def total(self) -> int:
        return self.requeued + self.dead + self.republished + self.lost


# Samples of the run topics kept for the lost-message check: an hour at the default
# 5 s period. A group that lags further only delays the recovery of a lost message.
_SAMPLES_KEPT = 720


class Reaper:
    def __init__(
        self,
        engine: Engine,
        publisher: RunPublisher,
        unclaimed_grace_ms: int,
        metrics: ReaperMetrics | None = None,
        batch: int = DEFAULT_BATCH,
        progress: QueueProgress | None = None,
        partitions: int = PARTITION_COUNT,
        pause_after_dead_default: int | None = None,  # CRONFLEET_PAUSE_AFTER_DEAD
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.grace_ms = unclaimed_grace_ms
        self.metrics = metrics or ReaperMetrics()
        self.batch = batch
        self.progress = progress  # None: no lost-message check (no workers' group known)
        self._samples: dict[str, deque[QueueSample]] = {}
        self.partitions = partitions
        self.pause_after_dead_default = pause_after_dead_default

    def _publish(self, pointers: Sequence[RunPointer]) -> None:
        publish_pointers(self.publisher, pointers)

    def tick(self) -> ReapCounts:
        """One pass; each query loops while it fills a whole batch."""
        requeued = dead = first = lost = 0
        while True:
            expired = runs_reap_expired(
                self.engine,
                self._publish,
                self.batch,
                pause_after_dead_default=self.pause_after_dead_default,
            )
            requeued += len(expired.requeued)
            dead += len(expired.dead)
            self.metrics.auto_paused.inc(len(expired.paused_jobs))
            for job_id in expired.paused_jobs:
                log.warning("job %s auto-paused: its dead-letter streak reached its limit", job_id)
            if len(expired.requeued) + len(expired.dead) < self.batch:
                break
        lost_before = self._lost_before()
        while True:
            found = runs_publish_unclaimed(
                self.engine, self.grace_ms, self._publish, self.batch, lost_before=lost_before
            )
            first += len(found.first)
            lost += len(found.lost)
            if found.lost:
                log.warning(
                    "reaper: %d runs nobody claimed, whose message was lost, published again: %s",
                    len(found.lost),
                    [p.run_id for p in found.lost[:5]],
                )
            if len(found.all) < self.batch:
                break
        health = fleet_health_read(self.engine, self.partitions)
        self.metrics.partitions_unowned.set(health.partitions_unowned)
        self.metrics.dead_letters_waiting.set(health.dead_letters_waiting)
        counts = ReapCounts(requeued, dead, first, lost)
        self.metrics.reaped.labels("lease_expired_requeued").inc(requeued)
        self.metrics.reaped.labels("lease_expired_dead").inc(dead)
        self.metrics.reaped.labels("manual_published").inc(first)
        self.metrics.reaped.labels("lost_republished").inc(lost)
        if counts.total:
            log.info(
                "reaper: %d expired leases re-queued, %d dead, %d manual or replayed runs "
                "published, %d lost messages re-published",
                requeued,
                dead,
                first,
                lost,
            )
        return counts

    def _lost_before(self) -> dict[str, datetime] | None:
        """Sample the run topics (database time first, then watermarks); per tier, the
        instant before which an unclaimed run's message is lost: the newest sample the
        workers' group has provably read past, less the publish grace (kit.core.recovery).
        None without a view of the workers' progress (the store then falls back on age)."""
        if self.progress is None:
            return None
        with self.engine.connect() as conn:
            taken_at_ms = to_epoch_ms(db_now(conn))
        out = {}
        for tier in self.progress.tiers:
            samples = self._samples.setdefault(tier, deque(maxlen=_SAMPLES_KEPT))
            try:
                high = self.progress.high_watermarks(tier)
                committed = self.progress.committed(tier)
            except KafkaException as exc:  # a leader being elected: no verdict this pass
                log.info("reaper: progress of tier %s unknown this pass (%s)", tier, exc)
                continue
            samples.append(QueueSample(taken_at_ms, high))
            passed = caught_up_at(samples, committed)
            if passed is not None:
                out[tier] = from_epoch_ms(unclaimed_cutoff(passed, self.grace_ms))
                while samples and samples[0].taken_at_ms < passed:
                    samples.popleft()  # older ones can never be the answer again
        return out

    def run(self, stop: threading.Event, period_ms: int) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a database or broker hiccup: try again next period
                self.metrics.errors.inc()
                log.exception("reaper pass failed; retrying next period")
            stop.wait(period_ms / 1000)

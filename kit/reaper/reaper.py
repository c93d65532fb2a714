"""One reaper pass: expired leases back to the queue (or dead), never-published runs
published, and dispatched runs whose message was lost published again. Any number of
reapers may run: the store locks rows FOR UPDATE SKIP LOCKED."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine

from kit.core.recovery import QueueSample, caught_up_at
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.store.claims import RunPointer
from kit.store.db import db_now
from kit.store.reaping import (
    DEFAULT_BATCH,
    runs_reap_expired,
    runs_republish_lost,
    runs_republish_undispatched,
)
from kit.transport import RunMessage, RunPublisher
from kit.transport.progress import QueueProgress

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
            # lease_expired_requeued | lease_expired_dead | undispatched_republished |
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


@dataclass(frozen=True)
class ReapCounts:
    requeued: int
    dead: int
    republished: int
    lost: int = 0  # dispatched runs whose message was lost, published again

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
        undispatched_grace_ms: int,
        metrics: ReaperMetrics | None = None,
        batch: int = DEFAULT_BATCH,
        progress: QueueProgress | None = None,
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.grace_ms = undispatched_grace_ms
        self.metrics = metrics or ReaperMetrics()
        self.batch = batch
        self.progress = progress  # None: no lost-message check (no workers' group known)
        self._samples: dict[str, deque[QueueSample]] = {}

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
        lost = self._republish_lost()
        counts = ReapCounts(requeued, dead, republished, lost)
        self.metrics.reaped.labels("lease_expired_requeued").inc(requeued)
        self.metrics.reaped.labels("lease_expired_dead").inc(dead)
        self.metrics.reaped.labels("undispatched_republished").inc(republished)
        self.metrics.reaped.labels("lost_republished").inc(lost)
        if counts.total:
            log.info(
                "reaper: %d expired leases re-queued, %d dead, %d undispatched re-published, "
                "%d lost messages re-published",
                requeued,
                dead,
                republished,
                lost,
            )
        return counts

    def _republish_lost(self) -> int:
        """Sample the run topics (database time first, then watermarks), then publish
        again the dispatched runs each tier's group has provably read past."""
        if self.progress is None:
            return 0
        with self.engine.connect() as conn:
            taken_at_ms = to_epoch_ms(db_now(conn))
        cutoffs = {}
        for tier in self.progress.tiers:
            samples = self._samples.setdefault(tier, deque(maxlen=_SAMPLES_KEPT))
            samples.append(QueueSample(taken_at_ms, self.progress.high_watermarks(tier)))
            passed = caught_up_at(samples, self.progress.committed(tier))
            if passed is not None:
                cutoffs[tier] = from_epoch_ms(passed)
                while samples and samples[0].taken_at_ms < passed:
                    samples.popleft()  # older ones can never be the answer again
        total = 0
        while True:
            again = runs_republish_lost(self.engine, cutoffs, self._publish, self.batch)
            total += len(again)
            if again:
                log.warning(
                    "reaper: %d dispatched runs whose message was lost, published again: %s",
                    len(again),
                    [p.run_id for p in again[:5]],
                )
            if len(again) < self.batch:
                return total

    def run(self, stop: threading.Event, period_ms: int) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a database or broker hiccup: try again next period
                self.metrics.errors.inc()
                log.exception("reaper pass failed; retrying next period")
            stop.wait(period_ms / 1000)

"""One maintenance loop: a pass every period, metrics per table, errors retried.

Any number may run (the deletes skip rows locked by another); `cronfleet run-all`
starts one. It touches nothing on the run path: idempotency keys, finished queue tasks,
dead letters (kit.core.retention says which), audit entries, expired console sessions
and presence rows of workers long gone.
"""

from __future__ import annotations

import logging
import threading

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine

from kit.core.retention import Retention
from kit.settings import Settings
from kit.store.maintenance import DEFAULT_BATCH, Expired, expire
from kit.store.run_history import DEFAULT_AHEAD_DAYS, RunHistoryPass, maintain_run_history

log = logging.getLogger(__name__)


def retention_of(settings: Settings) -> Retention:
    return Retention(
        idempotency_key_s=settings.idempotency_key_retention_s,
        queue_task_s=settings.queue_task_retention_s,
        dead_letter_s=settings.dead_letter_retention_s,
        replayed_dead_letter_s=settings.replayed_dead_letter_retention_s,
        audit_s=settings.audit_retention_s,
        run_s=settings.run_retention_s,
        run_output_s=settings.run_output_retention_s,
        notification_s=settings.notification_retention_s,
    )


class MaintenanceMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.expired = Counter(
            "cronfleet_maintenance_expired_rows",
            "Rows deleted by the maintenance service, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.passes = Counter(
            "cronfleet_maintenance_passes", "Passes completed", registry=self.registry
        )
        self.errors = Counter(
            "cronfleet_maintenance_pass_errors",
            "Passes that failed (retried next period)",
            registry=self.registry,
        )
        self.run_days = Counter(
            "cronfleet_run_history_days",
            "Day partitions of the run history created and dropped",
            ["action"],
            registry=self.registry,
        )
        self.runs_kept = Counter(
            "cronfleet_run_history_kept_runs",
            "Runs of a dropped day kept (live or dead-lettered), moved to the default partition",
            registry=self.registry,
        )
        self.days_busy = Counter(
            "cronfleet_run_history_lock_timeouts",
            "Day partitions not created or dropped because their lock was not had in time",
            registry=self.registry,
        )


class Maintenance:
    def __init__(
        self,
        engine: Engine,
        retention: Retention,
        metrics: MaintenanceMetrics | None = None,
        batch: int = DEFAULT_BATCH,
        run_days_ahead: int = DEFAULT_AHEAD_DAYS,
    ) -> None:
        self.engine = engine
        self.retention = retention
        self.metrics = metrics or MaintenanceMetrics()
        self.batch = batch
        self.run_days_ahead = run_days_ahead
        self.last_history = RunHistoryPass()

    def tick(self) -> Expired:
        """The run history first (days ahead exist before anything else can fail),
        then the row-by-row expiry; old runs of the default partition count as `runs`."""
        history = maintain_run_history(
            self.engine, self.retention.run_s, self.run_days_ahead, batch=self.batch
        )
        self._record_history(history)
        expired = expire(self.engine, self.retention, batch=self.batch)
        expired.rows["runs"] = history.pruned_default
        for kind, rows in expired.rows.items():
            self.metrics.expired.labels(kind).inc(rows)
        self.metrics.passes.inc()
        if expired.total:
            log.info(
                "maintenance: expired %s",
                ", ".join(f"{n} {kind}" for kind, n in expired.rows.items() if n),
            )
        return expired

    def _record_history(self, history: RunHistoryPass) -> None:
        self.last_history = history
        self.metrics.run_days.labels("created").inc(len(history.created))
        self.metrics.run_days.labels("dropped").inc(len(history.dropped))
        self.metrics.runs_kept.inc(sum(d.kept for d in history.dropped))
        self.metrics.days_busy.inc(len(history.busy))
        for day in history.created:
            log.info("run history: day %s created", day)
        for dropped in history.dropped:
            log.info(
                "run history: day %s dropped (~%d runs, %d bytes; %d kept)",
                dropped.day,
                dropped.rows_estimate,
                dropped.bytes,
                dropped.kept,
            )
        for name in history.busy:
            log.warning("run history: %s left for the next pass (lock timeout)", name)

    def run(self, stop: threading.Event, period_ms: int) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a database hiccup: try again next period
                self.metrics.errors.inc()
                log.exception("maintenance pass failed; retrying next period")
            stop.wait(period_ms / 1000)

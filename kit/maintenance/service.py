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

log = logging.getLogger(__name__)


def retention_of(settings: Settings) -> Retention:
    return Retention(
        idempotency_key_s=settings.idempotency_key_retention_s,
        queue_task_s=settings.queue_task_retention_s,
        dead_letter_s=settings.dead_letter_retention_s,
        replayed_dead_letter_s=settings.replayed_dead_letter_retention_s,
        audit_s=settings.audit_retention_s,
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


class Maintenance:
    def __init__(
        self,
        engine: Engine,
        retention: Retention,
        metrics: MaintenanceMetrics | None = None,
        batch: int = DEFAULT_BATCH,
    ) -> None:
        self.engine = engine
        self.retention = retention
        self.metrics = metrics or MaintenanceMetrics()
        self.batch = batch

    def tick(self) -> Expired:
        expired = expire(self.engine, self.retention, batch=self.batch)
        for kind, rows in expired.rows.items():
            self.metrics.expired.labels(kind).inc(rows)
        self.metrics.passes.inc()
        if expired.total:
            log.info(
                "maintenance: expired %s",
                ", ".join(f"{n} {kind}" for kind, n in expired.rows.items() if n),
            )
        return expired

    def run(self, stop: threading.Event, period_ms: int) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a database hiccup: try again next period
                self.metrics.errors.inc()
                log.exception("maintenance pass failed; retrying next period")
            stop.wait(period_ms / 1000)

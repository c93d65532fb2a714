"""Sends the failure notifications that are due (kit.core.notify), from the maintenance
service: never on a worker, so a slow or dead webhook holds no run.

Each goes out as an http task's request would (kit.tasks.http, under the operator's task
policy for the job's tenant: the same egress guard and allow-list, the webhook's secret
values scrubbed from what is recorded), a POST of the dead letter's JSON summary with
`Idempotency-Key: <run id>:<attempt>` on every try. A 2xx is sent; anything else is
tried again later with backoff, and given up after the last try (kept, with its error).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine

from kit.core.notify import (
    SEND_TIMEOUT_S,
    after_failed_send,
    dead_letter_summary,
    notification_key,
)
from kit.core.timeutil import from_epoch_ms
from kit.store.notifications import (
    DueNotification,
    notification_failed,
    notification_sent,
    notifications_take,
)
from kit.tasks.context import RunContext
from kit.tasks.http import webhook_task
from kit.tasks.policy import PolicySource, run_task

log = logging.getLogger(__name__)
BATCH = 50


@dataclass(frozen=True)
class NotifyCounts:
    sent: int = 0
    retrying: int = 0
    given_up: int = 0


class Notifier:
    def __init__(
        self,
        engine: Engine,
        policy: PolicySource,
        registry: CollectorRegistry | None = None,
        rng: random.Random | None = None,
        batch: int = BATCH,
    ) -> None:
        self.engine = engine
        self.policy = policy
        self.rng = rng or random.Random()
        self.batch = batch
        self.sent = Counter(
            "cronfleet_notifications",
            "Failure notifications by outcome of a try: sent, retrying, given_up",
            ["outcome"],
            registry=registry or CollectorRegistry(),
        )

    def tick(self) -> NotifyCounts:
        """Send what is due now, one batch at a time until none is left."""
        sent = retrying = given_up = 0
        for _ in range(100):  # bounded: a pass ends, the next one goes on
            due = notifications_take(self.engine, self.batch)
            for note in due:
                outcome = self.send(note)
                sent += outcome == "sent"
                retrying += outcome == "retrying"
                given_up += outcome == "given_up"
            if len(due) < self.batch:
                break
        return NotifyCounts(sent, retrying, given_up)

    def send(self, note: DueNotification) -> str:
        body = dead_letter_summary(
            tenant=note.tenant,
            job_id=note.job_id,
            job_name=note.job_name,
            run_id=note.run_id,
            attempt=note.attempt,
            scheduled_at=note.scheduled_at.isoformat(),
            error=note.error,
            died_at=note.created_at.isoformat(),
        )
        spec = webhook_task(note.target, json.dumps(body, separators=(",", ":")))
        ctx = RunContext(
            notification_key(note.run_id, note.attempt),
            note.tries,
            SEND_TIMEOUT_S,
            tenant=note.tenant,
        )
        try:
            result = run_task(spec, ctx, self.policy.current())
        except Exception as exc:  # a sender bug is a failed try, not a dead service
            log.exception("notification %s raised", note.notification_id)
            result_ok, error = False, f"{type(exc).__name__}: {exc}"
        else:
            result_ok, error = result.ok, result.error or "failed"
        if result_ok:
            notification_sent(self.engine, note.notification_id)
            self.sent.labels("sent").inc()
            return "sent"
        retry_ms = after_failed_send(note.tries, note.now_ms, self.rng)
        retry_at = None if retry_ms is None else from_epoch_ms(retry_ms)
        notification_failed(self.engine, note.notification_id, error, retry_at)
        outcome = "retrying" if retry_at is not None else "given_up"
        self.sent.labels(outcome).inc()
        if retry_at is None:
            log.warning(
                "failure notification of run %s given up after %d tries: %s",
                note.run_id,
                note.tries,
                error,
            )
        return outcome

    def run(self, stop: threading.Event, period_ms: int) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a database hiccup: try again next period
                log.exception("sending failure notifications failed; retrying next period")
            stop.wait(period_ms / 1000)

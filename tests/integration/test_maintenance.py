"""The maintenance service on the real PostgreSQL: expired idempotency keys, finished
queue tasks, dead letters, audit entries and sessions go; nothing still needed does (a
pending queue task, a dead letter not replayed within its retention, a replayed one
whose run is live). The SQL agrees with kit.core.retention row by row."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from kit.core.ids import run_id
from kit.core.retention import (
    Retention,
    audit_entry_expired,
    dead_letter_expired,
    idempotency_key_expired,
    notification_expired,
    queue_task_expired,
    run_output_expired,
)
from kit.maintenance.service import Maintenance, retention_of
from kit.settings import Settings
from kit.store.maintenance import expire
from tests.integration.worker_rows import make_job

pytestmark = pytest.mark.integration
NOW = datetime(2030, 6, 1, tzinfo=UTC)
R = Retention(
    idempotency_key_s=3600,
    queue_task_s=7200,
    dead_letter_s=86_400,
    replayed_dead_letter_s=600,
    audit_s=86_400,
    run_output_s=3600,
    notification_s=7200,
)
AGES_S = (0, 599, 600, 3599, 3600, 7199, 7200, 86_399, 86_400, 10**7)
RUN_STATUSES = ("pending", "running", "retry_scheduled", "succeeded", "dead",
                "cancelled")  # fmt: skip


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def execute(engine: Engine, sql: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(text(sql), params)


def scalar_set(engine: Engine, sql: str, **params: object) -> set:
    with engine.connect() as conn:
        return set(conn.execute(text(sql), params).scalars())


def test_every_table_expires_exactly_what_the_core_rules_say(engine: Engine) -> None:
    job = make_job(engine)
    keep_keys, keep_tasks, keep_letters, keep_audit = set(), set(), set(), set()
    # idempotency keys
    for i, age in enumerate(AGES_S):
        execute(
            engine,
            "INSERT INTO idempotency_keys (tenant, key, request_hash, job_id, created_at)"
            " VALUES ('acme', :k, 'h', :j, :at)",
            k=f"k{i}",
            j=job,
            at=ago(age),
        )
        if not idempotency_key_expired(ago(age), NOW, R):
            keep_keys.add(f"k{i}")
    # queue tasks: every status, finished long ago or recently (a pending one, however old)
    for status, age in itertools.product(("queued", "leased", "done", "dead"), AGES_S):
        task_id = str(uuid.uuid4())
        finished = ago(age) if status in ("done", "dead") else None
        execute(
            engine,
            "INSERT INTO queue_tasks (task_id, tenant, queue, payload, status, max_attempts,"
            " timeout_s, visible_at, created_at, finished_at)"
            " VALUES (:t, 'acme', 'q', '{}', :s, 3, 60, :old, :old, :fin)",
            t=task_id,
            s=status,
            old=ago(10**8),
            fin=finished,
        )
        if not queue_task_expired(status, finished, NOW, R):
            keep_tasks.add(task_id)
    # dead letters: replayed or not, run in every status, at every age
    for n, (status, replayed, age) in enumerate(
        itertools.product(RUN_STATUSES, (False, True), AGES_S)
    ):
        at = datetime(2029, 1, 1, tzinfo=UTC) + timedelta(minutes=n)
        rid = run_id(job, at)
        execute(
            engine,
            "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status,"
            " trigger_kind, lease_token) VALUES (:r, :j, 'acme', 1, :at, :s, 'schedule',"
            " CASE WHEN :s = 'running' THEN 'tok' END)",
            r=rid,
            j=job,
            at=at,
            s=status,
        )
        created = ago(age if not replayed else 10**8)
        replayed_at = ago(age) if replayed else None
        execute(
            engine,
            "INSERT INTO dead_letters (run_id, job_id, tenant, created_at, replayed_at)"
            " VALUES (:r, :j, 'acme', :c, :ra)",
            r=rid,
            j=job,
            c=created,
            ra=replayed_at,
        )
        if not dead_letter_expired(created, replayed_at, status, NOW, R):
            keep_letters.add(rid)
    # audit entries
    execute(engine, "DELETE FROM job_audit")
    for age in AGES_S:
        execute(
            engine,
            "INSERT INTO job_audit (tenant, job_id, at, actor, action) VALUES"
            " ('acme', :j, :at, 't', 'update')",
            j=job,
            at=ago(age),
        )
        if not audit_entry_expired(ago(age), NOW, R):
            keep_audit.add(ago(age))

    # attempts' outputs
    keep_outputs, keep_notes = set(), set()
    for age in AGES_S:
        execute(
            engine,
            "INSERT INTO run_outputs (run_id, attempt, finished_at, output)"
            " VALUES (:r, 1, :at, 'x')",
            r=str(uuid.uuid4()),
            at=ago(age),
        )
        if not run_output_expired(ago(age), NOW, R):
            keep_outputs.add(ago(age))
    # failure notifications: to send (however old), sent, given up
    for status, age in itertools.product(("pending", "sent", "failed"), AGES_S):
        rid = str(uuid.uuid4())
        execute(
            engine,
            "INSERT INTO notifications (tenant, job_id, job_name, run_id, attempt, scheduled_at,"
            " target, status, created_at) VALUES ('acme', :j, 'n', :r, 1, :at, '{}', :s, :at)",
            j=job,
            r=rid,
            s=status,
            at=ago(age),
        )
        if not notification_expired(status, ago(age), NOW, R):
            keep_notes.add(rid)

    expired = expire(engine, R, now=NOW, batch=7)  # small batches: the loop goes on

    assert scalar_set(engine, "SELECT key FROM idempotency_keys") == keep_keys
    assert scalar_set(engine, "SELECT task_id::text FROM queue_tasks") == keep_tasks
    assert scalar_set(engine, "SELECT run_id::text FROM dead_letters") == keep_letters
    assert scalar_set(engine, "SELECT at FROM job_audit") == keep_audit
    assert scalar_set(engine, "SELECT finished_at FROM run_outputs") == keep_outputs
    assert scalar_set(engine, "SELECT run_id::text FROM notifications") == keep_notes
    assert len(keep_notes) > len(AGES_S)  # every pending one, and the young finished ones
    # what must never go, whatever its age
    pending = scalar_set(
        engine, "SELECT task_id FROM queue_tasks WHERE status IN ('queued', 'leased')"
    )
    assert len(pending) == 2 * len(AGES_S)  # all kept, though created years ago
    live_replayed = scalar_set(
        engine,
        "SELECT r.status FROM dead_letters d JOIN runs r USING (run_id)"
        " WHERE d.replayed_at <= :old",
        old=ago(10**7),
    )
    assert live_replayed == {"pending", "running", "retry_scheduled"}
    assert expired.rows["idempotency_keys"] == len(AGES_S) - len(keep_keys)
    assert expire(engine, R, now=NOW).total == 0  # nothing left to do


def test_a_pending_queue_task_survives_any_retention(engine: Engine) -> None:
    execute(
        engine,
        "INSERT INTO queue_tasks (task_id, tenant, queue, payload, status, max_attempts,"
        " timeout_s, visible_at, created_at) VALUES (:t, 'acme', 'q', '{}', 'queued', 3, 60,"
        " now() - interval '10 years', now() - interval '10 years')",
        t=str(uuid.uuid4()),
    )
    tiny = Retention(idempotency_key_s=0, queue_task_s=0, dead_letter_s=0,
                     replayed_dead_letter_s=0, audit_s=0)  # fmt: skip
    expire(engine, tiny)
    assert scalar_set(engine, "SELECT status FROM queue_tasks") == {"queued"}


def test_an_expired_idempotency_key_can_be_used_again(engine: Engine, client, auth) -> None:
    h = {**auth(), "Idempotency-Key": "create-1"}
    body = {"name": "once", "schedule": {"every_s": 60}, "task": {"type": "noop"}}
    first = client.post("/v1/jobs", json=body, headers=h)
    assert first.status_code == 201
    assert client.post("/v1/jobs", json=body, headers=h).status_code == 200  # replayed
    execute(engine, "UPDATE idempotency_keys SET created_at = now() - interval '2 days'")
    expire(engine, Retention())
    body["name"] = "twice"
    again = client.post("/v1/jobs", json=body, headers=h)
    assert again.status_code == 201 and again.json()["job_id"] != first.json()["job_id"]


def test_the_service_and_its_command(engine: Engine, settings: Settings, db_url: str) -> None:
    execute(
        engine,
        "INSERT INTO idempotency_keys (tenant, key, request_hash, job_id, created_at)"
        " VALUES ('acme', 'old', 'h', :j, now() - interval '3 days')",
        j=str(uuid.uuid4()),
    )
    service = Maintenance(engine, retention_of(settings))
    assert service.tick().rows["idempotency_keys"] == 1
    assert (
        service.metrics.registry.get_sample_value(
            "cronfleet_maintenance_expired_rows_total", {"kind": "idempotency_keys"}
        )
        == 1
    )
    execute(
        engine,
        "INSERT INTO idempotency_keys (tenant, key, request_hash, job_id, created_at)"
        " VALUES ('acme', 'older', 'h', :j, now() - interval '3 days')",
        j=str(uuid.uuid4()),
    )
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "maintenance", "--once"],
        env={**os.environ, "CRONFLEET_DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "idempotency_keys: 1 expired" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "kit.cli", "maintenance", "--once"],
        env={
            **os.environ,
            "CRONFLEET_DATABASE_URL": db_url,
            "CRONFLEET_QUEUE_TASK_RETENTION_S": "1",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2, bad.stderr  # one line naming the setting, no traceback
    assert bad.stderr.strip().splitlines() == [
        "cronfleet maintenance: CRONFLEET_QUEUE_TASK_RETENTION_S: "
        "Input should be greater than or equal to 60"
    ]

"""POST /v1/runs/{id}:cancel on the real PostgreSQL and Kafka: a run not started is
cancelled at once, a running one has its task stopped by its worker through the
cancel notification (not the heartbeat), a finished one is a 409, another tenant's
is a 404. The run records who cancelled it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.stack.process import running as process_running
from kit.store.tokens import token_create
from tests.integration.test_worker_e2e import (  # noqa: F401 (a fixture)
    Running,
    publish,
    start_worker,
    wait_for,
)
from tests.integration.waiting import db_clock_past, wait_until
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration
WAIT_S = 20.0


def token(engine: Engine, tenant: str = "acme", scopes: tuple[str, ...] = ("read", "write")):
    issued = token_create(engine, tenant, scopes)
    return issued.token_id, {"Authorization": f"Bearer {issued.token}"}


def audit_actions(engine: Engine, job_id: str) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT action, actor FROM job_audit WHERE job_id = :j ORDER BY audit_id"),
            {"j": job_id},
        ).all()
    return [(r.action, r.actor) for r in rows]


def test_a_pending_run_is_cancelled_at_once_and_says_by_whom(
    engine: Engine, client: TestClient
) -> None:
    token_id, headers = token(engine)
    job = make_job(engine)
    rid = make_run(engine, job)
    got = client.post(f"/v1/runs/{rid}:cancel", headers=headers)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["status"] == "cancelled" and body["was"] == "pending"
    assert body["cancelled_by"] == token_id and body["worker_notified"] is False
    row = run_row(engine, rid)
    assert row.status == "cancelled" and row.cancelled_by == token_id
    assert row.finished_at is not None and row.lease_token is None
    assert ("cancel_run", token_id) in audit_actions(engine, job)
    again = client.post(f"/v1/runs/{rid}:cancel", headers=headers)
    assert again.status_code == 409 and again.json()["error"]["code"] == "run_finished"


@pytest.mark.parametrize("status", ["succeeded", "dead", "skipped"])
def test_a_finished_run_is_a_409_and_unchanged(
    engine: Engine, client: TestClient, status: str
) -> None:
    _, headers = token(engine)
    rid = make_run(engine, make_job(engine), status=status)
    got = client.post(f"/v1/runs/{rid}:cancel", headers=headers)
    assert got.status_code == 409, got.text
    assert run_row(engine, rid).status == status


def test_another_tenants_run_is_not_found_and_a_read_token_may_not_cancel(
    engine: Engine, client: TestClient
) -> None:
    rid = make_run(engine, make_job(engine))
    _, other = token(engine, "globex")
    assert client.post(f"/v1/runs/{rid}:cancel", headers=other).status_code == 404
    assert client.post("/v1/runs/not-a-uuid:cancel", headers=other).status_code == 422
    _, reader = token(engine, "acme", ("read",))
    assert client.post(f"/v1/runs/{rid}:cancel", headers=reader).status_code == 403
    assert run_row(engine, rid).status == "pending"


def test_a_run_waiting_for_its_retry_is_cancelled_and_its_retry_trigger_goes(
    engine: Engine, client: TestClient
) -> None:
    _, headers = token(engine)
    job = make_job(engine)
    rid = make_run(engine, job, status="retry_scheduled", attempt=1)
    row = run_row(engine, rid)
    with engine.begin() as conn:
        conn.execute(
            text(
                """
                INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, attempt,
                                      run_scheduled_at)
                VALUES (1, now() + interval '1 h', :j, 1, 'retry', 2, :at)
                """
            ),
            {"j": job, "at": row.scheduled_at},
        )
    got = client.post(f"/v1/runs/{rid}:cancel", headers=headers)
    assert got.status_code == 200 and got.json()["was"] == "retry_scheduled"
    with engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM triggers WHERE kind = 'retry'")).scalar()
    assert left == 0


def test_cancelling_the_active_run_of_a_queue_job_releases_the_next(
    engine: Engine, client: TestClient
) -> None:
    _, headers = token(engine)
    job = make_job(engine, overlap="queue")
    active = make_run(engine, job, status="pending")
    later = run_row(engine, active).scheduled_at.replace(year=2031)
    queued = make_run(engine, job, scheduled_at=later, skip_reason="queued")
    assert client.post(f"/v1/runs/{active}:cancel", headers=headers).status_code == 200
    row = run_row(engine, queued)
    assert row.status == "pending" and row.skip_reason is None  # the reaper publishes it


def test_a_running_task_is_stopped_by_the_cancel_notification_not_the_heartbeat(
    engine: Engine,
    client: TestClient,
    publisher,
    start_worker: Callable[..., Running],  # noqa: F811
    shared_dir: Path,
) -> None:
    """The worker's heartbeat (every 60 s here) cannot be what stops the task within
    the wait: the notification sent at the cancel's commit is."""
    token_id, headers = token(engine)
    pid_file = shared_dir / "pid"
    task = {"type": "command", "argv": ["/bin/sh", "-c", f'echo $$ > "{pid_file}"; exec sleep 300']}
    job = make_job(engine, task=task, timeout_s=600)
    rid = make_run(engine, job)
    running = start_worker(ttl_ms=180_000, heartbeat_ms=60_000)
    assert running.worker.link.listening.wait(30), "the worker never started listening"
    publish(publisher, engine, rid)
    wait_for(engine, rid, "running")
    wait_until("the task to start", lambda: pid_file.exists() and pid_file.read_text().strip())
    pid = int(pid_file.read_text())

    got = client.post(f"/v1/runs/{rid}:cancel", headers=headers)
    assert got.status_code == 200, got.text
    assert got.json()["was"] == "running" and got.json()["worker_notified"] is True

    wait_until(
        "the task to be stopped by the notification",
        lambda: not process_running(pid) and not running.worker.in_flight(),
        WAIT_S,
    )
    row = run_row(engine, rid)
    assert row.status == "cancelled" and row.cancelled_by == token_id
    assert row.errors == []  # the stopped attempt wrote nothing over the cancel
    assert running.metrics.value("cronfleet_worker_runs_total", outcome="cancelled") == 1
    assert running.metrics.value("cronfleet_worker_leases_lost_total") == 0  # not the heartbeat


def test_a_run_claimed_and_held_for_its_second_never_starts_once_cancelled(
    engine: Engine,
    client: TestClient,
    publisher,
    start_worker: Callable[..., Running],  # noqa: F811
    shared_dir: Path,
) -> None:
    ledger = shared_dir / "ledger"
    task = {"type": "command", "argv": ["/bin/sh", "-c", f'echo ran >> "{ledger}"']}
    job = make_job(engine, task=task)
    with engine.connect() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
    due = now.replace(microsecond=0) + timedelta(seconds=6)
    rid = make_run(engine, job, scheduled_at=due)
    running = start_worker()
    publish(publisher, engine, rid)
    # claimed, held until its second
    wait_until("the run to be claimed", running.worker.in_flight, WAIT_S)
    _, headers = token(engine)
    got = client.post(f"/v1/runs/{rid}:cancel", headers=headers)
    assert got.status_code == 200 and got.json()["worker_notified"] is True
    # its slot is free before its second
    wait_until("the held run to give up its slot", lambda: not running.worker.in_flight(), WAIT_S)
    # The behaviour under test is that nothing happens at the run's second: the worker
    # starts runs by the database's clock, which a test cannot set, so this waits for it.
    wait_until(
        "the database clock to pass the run's second",
        lambda: db_clock_past(engine, due + timedelta(seconds=2)),
        WAIT_S,
        poll_s=0.2,
    )
    assert not ledger.exists()
    assert run_row(engine, rid).status == "cancelled"

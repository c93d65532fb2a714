"""Failing work stops and tells someone: a job that names no `pause_after_dead` pauses at
the operator's default, one that says 0 never does; a job's failure webhook is told of
each dead letter once (the maintenance service sends it, through the egress guard of
http tasks), retried with backoff while it fails, given up after its last try."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.core.notify import SEND_POLICY
from kit.core.task_policy import TaskPolicy
from kit.maintenance.notifier import Notifier
from kit.store.claims import Claim, run_finish_failed, runs_claim
from kit.store.dead_letters import dead_letter_replay
from kit.tasks.policy import PolicySource
from tests.integration.worker_rows import make_run

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]
SECRET = "Bearer hook-3c9d7e21"
LOOPBACK = PolicySource.fixed(TaskPolicy(http_allow_hosts="127.0.0.1"))


class Hook:
    """A webhook receiver: answers `status`, keeps what it was sent."""

    def __init__(self) -> None:
        self.status = 200
        self.got: list[tuple[dict[str, str], dict[str, Any]]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.got.append((dict(self.headers), json.loads(body)))
                self.send_response(hook.status)
                self.end_headers()
                self.wfile.write(b"echo " + self.headers.get("Authorization", "").encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/dead"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.server.shutdown()


def make_job(client: TestClient, headers: dict[str, str], **fields: Any) -> str:
    body = {
        "name": f"fails-{random.randrange(10**9)}",
        "schedule": {"every_s": 3600},
        "task": {"type": "noop"},
        "retry": {"max_attempts": 1},
        **fields,
    }
    made = client.post("/v1/jobs", json=body, headers=headers)
    assert made.status_code == 201, made.text
    return made.json()["job_id"]


def die(engine: Engine, job_id: str, minutes_ago: int = 1, default: int | None = None) -> str:
    """A run of the job, claimed and failed on its last attempt: a dead letter."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=minutes_ago)
    rid = make_run(engine, job_id, scheduled_at=at)
    return fail(engine, rid, default)


def fail(engine: Engine, rid: str, default: int | None = None, attempt: int = 1) -> str:
    [claimed] = runs_claim(engine, [Claim(rid, attempt)], "w1", 30_000)
    done = run_finish_failed(
        engine,
        rid,
        claimed.lease_token,
        f"boom; token {SECRET}",
        random.Random(0),
        pause_after_dead_default=default,
    )
    assert done.status == "dead"
    return rid


def notes(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM notifications ORDER BY notification_id")).all()


def test_a_dead_streak_pauses_at_the_operators_default_unless_the_job_opts_out(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    default = make_job(client, headers)
    opted_out = make_job(client, headers, pause_after_dead=0)
    assert client.get(f"/v1/jobs/{opted_out}", headers=headers).json()["pause_after_dead"] == 0
    for minutes in (1, 2):
        die(engine, default, minutes, default=2)
        die(engine, opted_out, minutes, default=2)
    assert client.get(f"/v1/jobs/{default}", headers=headers).json()["paused"] is True
    assert client.get(f"/v1/jobs/{opted_out}", headers=headers).json()["paused"] is False
    audit = client.get(f"/v1/jobs/{default}/audit", headers=headers).json()["entries"]
    assert audit[0]["action"] == "auto_pause" and audit[0]["actor"] == "kit"
    # back to the operator's default with null
    patched = client.patch(
        f"/v1/jobs/{opted_out}", json={"pause_after_dead": None}, headers=headers
    )
    assert patched.status_code == 200 and patched.json()["pause_after_dead"] is None


def test_each_dead_letter_is_told_once_with_its_summary_and_key(
    client: TestClient, auth: Headers, engine: Engine, hook: Hook
) -> None:
    headers = auth()
    notify = {"url": hook.url, "headers": {"Authorization": SECRET}}
    job = make_job(client, headers, notify=notify, pause_after_dead=0)
    shown = client.get(f"/v1/jobs/{job}", headers=headers).json()["notify"]
    assert shown == {
        "url": hook.url,
        "headers": {"Authorization": "(secret)"},
        "secret_headers": [],
    }
    rid = die(engine, job)
    notifier = Notifier(engine, LOOPBACK)
    assert notifier.tick().sent == 1
    assert notifier.tick().sent == 0  # once per dead letter
    [(sent_headers, body)] = hook.got
    assert sent_headers["Idempotency-Key"] == f"{rid}:1"
    assert sent_headers["Authorization"] == SECRET  # the webhook's own header is sent
    assert body["event"] == "run.dead" and body["job"]["job_id"] == job
    assert body["run"]["run_id"] == rid and body["run"]["idempotency_key"] == rid
    assert "boom" in body["run"]["error"]
    [note] = notes(engine)
    assert (note.status, note.tries, note.last_error) == ("sent", 1, None)

    # replayed, it dies again: another dead letter, told again
    dead_letter_replay(engine, "acme", rid)
    fail(engine, rid, attempt=2)
    assert notifier.tick().sent == 1
    assert [h["Idempotency-Key"] for h, _ in hook.got] == [f"{rid}:1", f"{rid}:2"]


def test_a_failing_webhook_is_retried_with_backoff_then_given_up(
    client: TestClient, auth: Headers, engine: Engine, hook: Hook
) -> None:
    hook.status = 503
    job = make_job(client, auth(), notify={"url": hook.url, "headers": {"Authorization": SECRET}})
    die(engine, job)
    notifier = Notifier(engine, LOOPBACK)
    assert notifier.tick().retrying == 1
    [note] = notes(engine)
    assert note.status == "pending" and note.tries == 1 and "HTTP 503" in note.last_error
    assert SECRET not in note.last_error and "hook-3c9d7e21" not in note.last_error
    assert note.next_at > datetime.now(UTC)  # backoff: not due again at once
    assert notifier.tick().retrying == 0
    for _ in range(SEND_POLICY.max_attempts - 1):  # make each retry due now
        with engine.begin() as conn:
            conn.execute(text("UPDATE notifications SET next_at = now()"))
        notifier.tick()
    [note] = notes(engine)
    assert (note.status, note.tries) == ("failed", SEND_POLICY.max_attempts)
    assert len(hook.got) == SEND_POLICY.max_attempts


def test_the_webhook_goes_through_the_egress_guard(
    client: TestClient, auth: Headers, engine: Engine, hook: Hook
) -> None:
    job = make_job(client, auth(), notify={"url": hook.url})
    die(engine, job)
    # no allow-list: loopback is refused as an http task's request would be
    assert Notifier(engine, PolicySource.fixed(TaskPolicy())).tick().retrying == 1
    [note] = notes(engine)
    assert "127.0.0.1" in note.last_error and hook.got == []


def test_a_webhook_is_validated_as_an_http_tasks_request(client: TestClient, auth: Headers) -> None:
    headers = auth()
    base = {"name": "n", "schedule": {"every_s": 60}, "task": {"type": "noop"}}
    masked = {"url": "https://x/", "headers": {"Authorization": "(secret)"}}
    for notify, field in [
        ({"url": "ftp://x/"}, "notify.url"),
        ({"url": "https://x/", "secret_headers": ["X-Key"]}, "notify.secret_headers[0]"),
        (masked, "notify.headers.Authorization"),
        ({"url": "https://x/", "method": "GET"}, "notify.method"),
    ]:
        got = client.post("/v1/jobs", json={**base, "notify": notify}, headers=headers)
        assert got.status_code == 422, got.text
        assert got.json()["error"]["fields"][0]["field"] == field

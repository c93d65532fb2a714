"""Credentials in an http task's URL (`https://user:pass@host/hook`) are a secret like an
Authorization header: masked in every answer (API create, replay, get, list, edit,
audit; the console's pages), kept out of the audit log, refused when sent back masked,
and scrubbed from run errors together with the Basic credential they become."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, text

from kit.api.app import create_app
from kit.core.redaction import MASK
from kit.core.task_policy import TaskPolicy
from kit.settings import Settings
from kit.store.schema import job_audit, jobs
from kit.store.tokens import token_create
from kit.tasks import RunContext
from kit.tasks.policy import run_task
from tests.integration.console_client import csrf_of, login

pytestmark = pytest.mark.integration

USER, PASSWORD = "hook-user-5d1", "s3cr3t-pass-91"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (PASSWORD, USER, BASIC)
URL = f"https://{USER}:{PASSWORD}@example.org/hook"
SHOWN = f"https://{MASK}@example.org/hook"
JOB = {
    "name": "hook",
    "schedule": {"every_s": 300},
    "task": {"type": "http", "url": URL, "method": "POST"},
}


@pytest.fixture
def api(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings, engine)) as client:
        yield client


def bearer(engine: Engine, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_create(engine, 'acme', scopes).token}"}


def clean(answer_text: str) -> bool:
    return not any(secret in answer_text for secret in SECRETS)


def stored(engine: Engine, job_id: str) -> tuple[dict, list[str]]:
    """The job's task as stored, and the text of its audit entries (changes, snapshot)."""
    with engine.connect() as conn:
        task = conn.execute(select(jobs.c.task_spec).where(jobs.c.job_id == job_id)).scalar_one()
        audit = conn.execute(
            select(job_audit.c.changes, job_audit.c.snapshot).where(job_audit.c.job_id == job_id)
        ).all()
    return task, [repr(tuple(row)) for row in audit]


def test_url_credentials_are_masked_in_every_answer(api: TestClient, engine: Engine) -> None:
    writer, reader = bearer(engine, "read", "write"), bearer(engine, "read")
    created = api.post("/v1/jobs", json=JOB, headers={**writer, "Idempotency-Key": "k1"})
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    assert created.json()["task"]["url"] == SHOWN
    edited = api.patch(
        f"/v1/jobs/{job_id}",
        json={"task": {**JOB["task"], "url": URL + "2"}},  # an edit of the URL: audited
        headers=writer,
    )
    assert edited.status_code == 200, edited.text
    answers = {
        "create": created,
        "replay": api.post("/v1/jobs", json=JOB, headers={**writer, "Idempotency-Key": "k1"}),
        "edit": edited,
        "get": api.get(f"/v1/jobs/{job_id}", headers=reader),
        "list": api.get("/v1/jobs", headers=reader),
        "audit": api.get(f"/v1/jobs/{job_id}/audit", headers=reader),
    }
    for name, answer in answers.items():
        assert answer.status_code in (200, 201), (name, answer.text)
        assert clean(answer.text), (name, answer.text)
    assert answers["get"].json()["task"]["url"] == SHOWN + "2"
    diff = answers["audit"].json()["entries"][0]["changes"]
    assert diff["task.url"] == {"from": SHOWN, "to": SHOWN + "2"}  # it changed, masked

    task, audit = stored(engine, job_id)
    assert task["url"] == URL + "2"  # kept for the task
    assert all(clean(entry) for entry in audit), audit  # the audit log never held them

    login(api, token_create(engine, "acme", ("read",)).token)
    for page in ("/console/jobs", f"/console/jobs/{job_id}"):
        shown = api.get(page)
        assert shown.status_code == 200 and clean(shown.text), page
    assert "(secret)@example.org/hook2" in api.get(f"/console/jobs/{job_id}").text


def test_an_audit_entry_written_before_is_masked_when_read(api: TestClient, engine: Engine) -> None:
    headers = bearer(engine, "read", "write")
    made = api.post(
        "/v1/jobs", json={**JOB, "task": {**JOB["task"], "url": "https://x.org/"}}, headers=headers
    )
    job_id = made.json()["job_id"]
    with engine.begin() as conn:  # as the audit stored a URL edit before this fix
        conn.execute(
            text(
                "INSERT INTO job_audit (tenant, job_id, actor, action, at, version, changes) "
                "VALUES ('acme', :j, 'old', 'update', now(), 2, CAST(:c AS jsonb))"
            ),
            {"j": job_id, "c": f'{{"task.url": {{"from": "https://x.org/", "to": "{URL}"}}}}'},
        )
    got = api.get(f"/v1/jobs/{job_id}/audit", headers=headers)
    assert got.status_code == 200 and clean(got.text)
    assert got.json()["entries"][0]["changes"]["task.url"]["to"] == SHOWN
    login(api, token_create(engine, "acme", ("read",)).token)
    page = api.get(f"/console/jobs/{job_id}")
    assert page.status_code == 200 and clean(page.text)


def test_a_masked_url_sent_back_is_refused_and_changes_nothing(
    api: TestClient, engine: Engine
) -> None:
    headers = bearer(engine, "read", "write")
    created = api.post("/v1/jobs", json=JOB, headers=headers).json()
    job_id = created["job_id"]
    echo = api.patch(f"/v1/jobs/{job_id}", json={"task": created["task"]}, headers=headers)
    assert echo.status_code == 422
    assert "task.url" in {f["field"] for f in echo.json()["error"]["fields"]}
    again = {**JOB, "name": "h2", "task": created["task"]}
    assert api.post("/v1/jobs", json=again, headers=headers).status_code == 422

    # the console's edit form shows the masked task: sending it back edited is refused too
    login(api, token_create(engine, "acme", ("read", "write")).token)
    page = f"/console/jobs/{job_id}"
    shown_task = api.get(f"/v1/jobs/{job_id}", headers=headers).json()["task"]
    form = {
        "csrf": csrf_of(api.get(page).text),
        "orig_task": json.dumps(shown_task),
        "task": json.dumps({**shown_task, "method": "PUT"}),
    }
    got = api.post(f"{page}/edit", data=form)
    assert got.status_code == 422 and "<b>task.url</b>" in got.text
    assert stored(engine, job_id)[0]["url"] == URL  # nothing overwritten


@pytest.fixture
def echo_server() -> Iterator[tuple[str, list[str]]]:
    """A target that refuses every request, echoing the Authorization header it got."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            got = self.headers.get("Authorization", "")
            seen.append(got)
            body = f"denied for {got} ({got.removeprefix('Basic ')})".encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_port}", seen
    server.shutdown()


def test_the_basic_credential_is_scrubbed_from_run_errors(
    echo_server: tuple[str, list[str]],
) -> None:
    address, seen = echo_server
    spec = {"type": "http", "method": "GET", "url": f"http://{USER}:{PASSWORD}@{address}/x"}
    policy = TaskPolicy.parse({"tenants": {"acme": {"http_allow_hosts": ["127.0.0.1"]}}})
    result = run_task(spec, RunContext("run-1", 1, 10.0, tenant="acme"), policy)
    assert seen == [f"Basic {BASIC}"]  # the target got the credential
    assert not result.ok and result.error is not None
    assert result.error.startswith("HTTP 401; body: denied for Basic")
    assert clean(result.error) and clean(result.detail or ""), result.error

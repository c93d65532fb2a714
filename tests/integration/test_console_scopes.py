"""The console enforces the token's scopes as /v1 does: reading needs `read` (a token
without it cannot sign in, and a session opened with one reads nothing), each action
needs what its /v1 twin needs (`write`; `command` too for a command task). Its one-line
messages are the console's own words, never text from the URL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.settings import Settings
from kit.store.console_sessions import session_open
from kit.store.tokens import token_create
from tests.integration.console_client import csrf_of, login
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration

SCOPE_SETS = (
    ("read",),
    ("write",),
    ("command",),
    ("write", "command"),
    ("read", "write"),
    ("admin",),
    ("read", "write", "command"),
)
SECRET_NAME = "payroll-export-7f3a"


def reads(scopes: tuple[str, ...]) -> bool:
    return "read" in scopes or "admin" in scopes


def writes(scopes: tuple[str, ...]) -> bool:
    return "write" in scopes or "admin" in scopes


@pytest.fixture
def app_client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings, engine)) as client:
        yield client


@pytest.fixture
def seeded(engine: Engine) -> dict[str, str]:
    """A job with a pending run (to cancel), and a dead letter (to replay)."""
    job = make_job(engine, name=SECRET_NAME)
    pending = make_run(engine, job, status="pending")
    an_hour_ago = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    dead = make_run(engine, job, an_hour_ago, status="dead", attempt=3, error="boom-err")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO dead_letters (run_id, job_id, tenant) VALUES (:r, :j, 'acme')"),
            {"r": dead, "j": job},
        )
    return {"job": job, "pending": pending, "dead": dead}


def with_session(client: TestClient, engine: Engine, scopes: tuple[str, ...]) -> str:
    """A session for a token of these scopes, opened in the store as a login would have
    (so a token the login now refuses still gets one: the pages must refuse it too).
    Returns its CSRF token."""
    token = token_create(engine, "acme", scopes).token
    opened = session_open(engine, token, 600)
    assert opened is not None
    secret, session = opened
    client.cookies.set("cf_session", secret, path="/console")
    return session.csrf_token


@pytest.mark.parametrize("scopes", [s for s in SCOPE_SETS if not reads(s)])
def test_a_token_without_read_cannot_sign_in(
    app_client: TestClient, engine: Engine, scopes: tuple[str, ...]
) -> None:
    token = token_create(engine, "acme", scopes).token
    form = app_client.get("/console/login")
    got = app_client.post(
        "/console/login",
        data={"csrf": csrf_of(form.text), "token": token},
        follow_redirects=False,
    )
    assert got.status_code == 403
    assert "lacks the &#39;read&#39; scope" in got.text
    assert "cf_session" not in got.headers.get("set-cookie", "")


@pytest.mark.parametrize("scopes", SCOPE_SETS, ids="+".join)
def test_each_page_and_action_needs_the_scope_its_api_twin_needs(
    app_client: TestClient,
    engine: Engine,
    seeded: dict[str, str],
    scopes: tuple[str, ...],
) -> None:
    csrf = with_session(app_client, engine, scopes)
    job, pending, dead = seeded["job"], seeded["pending"], seeded["dead"]
    pages = (
        "/console/jobs",
        f"/console/jobs/{job}",
        f"/console/jobs/{job}/explain",
        "/console/dead-letters",
        "/console/fleet",
        "/console/preview?every_s=60",
        f"/console/runs/{pending}",
        "/console/jobs/new",
        "/console/now",
        "/console/queues",
        "/console/queues/mail",
        "/console/charts",
    )
    for page in pages:
        got = app_client.get(page, follow_redirects=False)
        assert got.status_code == (200 if reads(scopes) else 403), (page, got.status_code)
        if not reads(scopes):
            for private in (SECRET_NAME, job, pending[:8], dead[:8], "boom-err"):
                assert private not in got.text, (page, private)

    def post(path: str, **fields: str) -> int:
        got = app_client.post(path, data={"csrf": csrf, **fields}, follow_redirects=False)
        return got.status_code

    allowed = 303 if writes(scopes) else 403
    assert post(f"/console/jobs/{job}/pause") == allowed
    assert post(f"/console/jobs/{job}/resume") == allowed
    assert post(f"/console/jobs/{job}/run-now") == allowed
    assert post(f"/console/runs/{pending}/cancel") == allowed
    assert post(f"/console/dead-letters/{dead}/replay") == allowed
    an_hour = {"from": "2020-01-01T00:00:00Z", "to": "2020-01-01T01:00:00Z"}
    assert post(f"/console/jobs/{job}/backfill", **an_hour) == allowed
    assert post("/console/now/cancel", run_id=pending) == allowed
    assert post("/console/now/replay", run_id=dead) == allowed
    assert post("/console/queues/mail/replay") == allowed
    new = {"name": "made-here", "schedule_every_s": "60", "task": '{"type": "noop"}'}
    assert post("/console/jobs/new", **new) == allowed
    renamed = {"orig_name": SECRET_NAME, "name": "renamed"}
    assert post(f"/console/jobs/{job}/edit", **renamed) == allowed
    # a command task: `write` and `command`, as PATCH /v1/jobs/{id}
    command = json.dumps({"type": "command", "argv": ["/bin/echo", "hi"]})
    to_command = post(f"/console/jobs/{job}/edit", orig_task="{}", task=command)
    assert to_command == (303 if writes(scopes) and "command" in scopes else 403)
    with engine.connect() as conn:
        task, name = conn.execute(
            text("SELECT task_spec, name FROM jobs WHERE job_id = :j"), {"j": job}
        ).one()
    assert (task["type"] == "command") == (to_command == 303)
    assert (name == "renamed") == writes(scopes)
    assert post(f"/console/jobs/{job}/delete") == allowed
    with engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM jobs WHERE job_id = :j"), {"j": job})
        assert left.scalar() == (0 if writes(scopes) else 1)


def test_the_api_and_the_console_agree_on_reading(
    app_client: TestClient, engine: Engine, seeded: dict[str, str]
) -> None:
    """The issue's reproduction: a write-only token is a 403 on /v1 and on the console."""
    token = token_create(engine, "acme", ("write",)).token
    api = app_client.get(f"/v1/jobs/{seeded['job']}", headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 403
    with_session(app_client, engine, ("write",))
    console = app_client.get(f"/console/jobs/{seeded['job']}")
    assert console.status_code == 403 and SECRET_NAME not in console.text


# -- one-line messages ----------------------------------------------------------------------

PHISH = "Your session expired. Call +1-555-0100 with your token"


def test_a_flash_from_the_url_is_never_shown(
    app_client: TestClient, engine: Engine, seeded: dict[str, str]
) -> None:
    login(app_client, token_create(engine, "acme", ("read", "write")).token)
    for page in ("/console/jobs", f"/console/jobs/{seeded['job']}", "/console/dead-letters"):
        got = app_client.get(page, params={"flash": PHISH})
        assert got.status_code == 200 and "Call +1-555" not in got.text, page
    for notice in (PHISH, "signed_out'><b>x"):
        assert "Call +1-555" not in app_client.get(f"/console/login?notice={notice}").text
    # a cookie carrying a message is believed only when this session signed it
    app_client.cookies.set("cf_flash", PHISH, path="/console")
    assert "Call +1-555" not in app_client.get("/console/jobs").text


def test_an_actions_message_reaches_the_next_page_once(
    app_client: TestClient, engine: Engine, seeded: dict[str, str]
) -> None:
    login(app_client, token_create(engine, "acme", ("read", "write")).token)
    page = f"/console/jobs/{seeded['job']}"
    csrf = csrf_of(app_client.get(page).text)
    done = app_client.post(f"{page}/pause", data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303 and "flash" not in done.headers["location"]
    shown = app_client.get(done.headers["location"])
    assert f"{SECRET_NAME} paused" in _flash(shown.text)
    assert _flash(app_client.get(page).text) == ""  # shown once
    # another session cannot replay the signed message
    other = TestClient(app_client.app)
    login(other, token_create(engine, "acme", ("read",)).token)
    other.cookies.set("cf_flash", done.cookies["cf_flash"], path="/console")
    assert _flash(other.get(page).text) == ""


def test_signing_out_says_so_in_the_consoles_words(app_client: TestClient, engine: Engine) -> None:
    login(app_client, token_create(engine, "acme", ("read",)).token)
    csrf = csrf_of(app_client.get("/console/jobs").text)
    out = app_client.post("/console/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    assert "signed out" in _flash(app_client.get(out.headers["location"]).text)


def _flash(html: str) -> str:
    found = re.search(r'<p class="flash" role="status">(.*?)</p>', html, re.S)
    return found.group(1) if found else ""


# -- the fleet page ----------------------------------------------------------------------------


@pytest.fixture
def fleet_rows(engine: Engine) -> dict[str, str]:
    """Another tenant's running run on a worker, a scheduler node with a partition."""
    other = make_job(engine, tenant="globex", name="globex-job")
    make_run(
        engine,
        other,
        tenant="globex",
        status="running",
        worker_id="worker-of-globex-17",
        lease_token="t",
        lease_expires_at=None,
    )
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO scheduler_nodes (node_id, heartbeat_at) "
                "VALUES ('node-secret-9', now());"
                "UPDATE runs SET lease_expires_at = now() + interval '1 hour'"
            )
        )
    mine = make_job(engine, name="mine")
    make_run(engine, mine, status="pending")
    return {"other": other}


def test_a_tenants_fleet_page_shows_its_own_runs_and_nothing_of_the_fleet(
    settings: Settings, engine: Engine, fleet_rows: dict[str, str]
) -> None:
    with TestClient(create_app(settings, engine)) as client:
        login(client, token_create(engine, "acme", ("admin",)).token)
        got = client.get("/console/fleet")
    assert got.status_code == 200
    for fleet_wide in ("node-secret-9", "worker-of-globex-17", "cronfleet.runs", "Consumer"):
        assert fleet_wide not in got.text, fleet_wide
    waiting = re.search(r'<tr data-tier="normal">(.*?)</tr>', got.text, re.S)
    assert waiting and "<td>1</td>" in waiting.group(1), got.text[-3000:]


def test_the_operators_fleet_page_shows_the_fleet(
    settings: Settings, engine: Engine, fleet_rows: dict[str, str]
) -> None:
    operated = Settings(**{**settings.model_dump(), "operator_tenant": "ops"})
    with TestClient(create_app(operated, engine)) as client:
        login(client, token_create(engine, "ops", ("read", "admin")).token)
        got = client.get("/console/fleet")
    assert got.status_code == 200
    assert "node-secret-9" in got.text and "worker-of-globex-17" in got.text

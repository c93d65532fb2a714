"""The console's pages to act from, over HTTP (the browser test drives them in
Chromium): create a job with the API's own checks and field errors, delete and
backfill one, the runs happening now with bulk cancel and replay, the pull queues with
their dead tasks replayed, and the charts of the run history."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.core.timeutil import to_epoch_ms
from kit.store.claims import Claim, run_finish_failed, runs_claim, runs_heartbeat
from tests.integration.console_client import csrf_of
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration
Browser = Callable[..., TestClient]


def post(client: TestClient, path: str, page: str, fields: list[tuple[str, str]]):
    """A console form as the browser sends it (fields may repeat: ticked runs)."""
    csrf = csrf_of(client.get(page).text)
    return client.post(
        path,
        content="&".join(
            f"{k}={v}" for k, v in [("csrf", csrf), *fields]
        ),  # values here need no escaping
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )


def test_create_a_job_with_every_field_error_named_then_created(browser: Browser) -> None:
    client = browser()
    assert client.get("/console/jobs/new").status_code == 200
    bad = post(
        client,
        "/console/jobs/new",
        "/console/jobs/new",
        [("name", "nightly"), ("schedule_cron", "61+*+*+*+*"),
         ("schedule_timezone", "Mars%2FOlympus"), ("task", "%7B%22type%22%3A%22noop%22%7D"),
         ("timeout_s", "0")],
    )  # fmt: skip
    assert bad.status_code == 422
    named = re.findall(r'data-field="([^"]+)"', bad.text)
    # the API's own 422 names these three, worded as it words them
    assert named == ["schedule.cron", "schedule.timezone", "timeout_s"], bad.text[-2000:]
    assert 'value="nightly"' in bad.text  # what was typed is kept
    made = post(
        client,
        "/console/jobs/new",
        "/console/jobs/new",
        [("name", "nightly"), ("schedule_cron", "30+2+*+*+*"),
         ("schedule_timezone", "Europe%2FParis"), ("task", "%7B%22type%22%3A%22noop%22%7D"),
         ("pause_after_dead", "0")],
    )  # fmt: skip
    assert made.status_code == 303 and made.headers["location"].startswith("/console/jobs/")
    page = client.get(made.headers["location"]).text
    assert "nightly" in page and "created nightly" in page


def test_delete_and_backfill_a_job(
    browser: Browser, client: TestClient, auth: Callable[..., dict[str, str]], engine: Engine
) -> None:
    body = {"name": "tens", "schedule": {"cron": "*/10 * * * *"}, "task": {"type": "noop"}}
    job = client.post("/v1/jobs", json=body, headers=auth()).json()["job_id"]
    client = browser()
    page = f"/console/jobs/{job}"
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start, end = (now - timedelta(hours=3)).isoformat(), now.isoformat()
    done = post(client, f"{page}/backfill", page, [("from", start.replace("+", "%2B")),
                                                  ("to", end.replace("+", "%2B"))])  # fmt: skip
    assert done.status_code == 303
    shown = client.get(done.headers["location"]).text
    assert "backfill:" in shown and "runs created" in shown
    with engine.connect() as conn:
        backfilled = conn.execute(
            text("SELECT count(*) FROM runs WHERE job_id = :j AND trigger_kind = 'backfill'"),
            {"j": job},
        ).scalar()
    assert backfilled >= 2
    gone = post(client, f"{page}/delete", page, [])
    assert gone.status_code == 303 and gone.headers["location"] == "/console/jobs"
    assert client.get(page).status_code == 404
    with engine.connect() as conn:  # its history stays
        assert conn.execute(
            text("SELECT count(*) FROM runs WHERE job_id = :j"), {"j": job}
        ).scalar()


def test_now_lists_what_runs_waits_and_fails_and_acts_on_many(
    browser: Browser, engine: Engine
) -> None:
    client = browser()
    job = make_job(engine, retry={"max_attempts": 1, "base_s": 1.0, "cap_s": 1.0})
    soon = datetime.now(UTC).replace(microsecond=0)
    held = make_run(engine, job, scheduled_at=soon + timedelta(minutes=5))
    running = make_run(engine, job, scheduled_at=soon - timedelta(seconds=5))
    dead = make_run(engine, job, scheduled_at=soon - timedelta(seconds=9))
    claims = {
        c.run_id: c
        for c in runs_claim(engine, [Claim(r, 1) for r in (held, running, dead)], "w1", 30_000)
    }
    runs_heartbeat(engine, [(running, claims[running].lease_token)], 30_000,
                   started_ms={running: to_epoch_ms(soon)})  # fmt: skip
    run_finish_failed(engine, dead, claims[dead].lease_token, "boom", random.Random(0))
    page = client.get("/console/now").text
    for table, run in (("claimed", held), ("running", running), ("failed", dead)):
        section = page[page.index(f'id="{table}"') :]
        assert f'data-run="{run}"' in section[: section.index("</table>")], table
    cancelled = post(client, "/console/now/cancel", "/console/now",
                     [("run_id", held), ("run_id", running)])  # fmt: skip
    assert cancelled.status_code == 303
    assert "2 runs cancelled" in client.get(cancelled.headers["location"]).text
    assert run_row(engine, held).status == run_row(engine, running).status == "cancelled"
    replayed = post(client, "/console/now/replay", "/console/now", [("run_id", dead)])
    assert replayed.status_code == 303 and run_row(engine, dead).status == "pending"
    # another tenant cannot act on these
    other = browser("globex")
    post(other, "/console/now/cancel", "/console/now", [("run_id", dead)])
    assert run_row(engine, dead).status == "pending"


def test_queues_show_depth_and_dead_tasks_which_replay(
    browser: Browser, client: TestClient, auth: Callable[..., dict[str, str]], engine: Engine
) -> None:
    headers = auth()
    for n in range(3):
        assert (
            client.post("/v1/queues/mail/tasks", json={"payload": n}, headers=headers).status_code
            == 201
        )
    [task] = client.post(
        "/v1/queues/mail/lease", json={"worker_id": "w", "max_tasks": 1, "lease_sec": 60},
        headers=headers,
    ).json()["tasks"]  # fmt: skip
    nacked = client.post(
        f"/v1/tasks/{task['task_id']}/nack",
        json={"lease_token": task["lease_token"], "retryable": False, "error": "bad address"},
        headers=headers,
    )
    assert nacked.json()["status"] == "dead"
    console = browser()
    listing = console.get("/console/queues").text
    row = listing[listing.index('data-queue="mail"') :]
    assert re.findall(r"<td>(\d+)</td>", row[: row.index("</tr>")])[:2] == ["2", "0"]
    page = console.get("/console/queues/mail").text
    assert task["task_id"] in page and "bad address" in page
    done = post(console, "/console/queues/mail/replay", "/console/queues/mail",
                [("task_id", task["task_id"])])  # fmt: skip
    assert done.status_code == 303
    assert "1 dead tasks put back in mail" in console.get(done.headers["location"]).text
    stats = client.get("/v1/queues/mail/stats", headers=headers).json()
    assert (stats["queued"], stats["dlq"]) == (3, 0)
    listed = client.get("/v1/queues", headers=headers).json()["queues"]
    assert [(q["queue"], q["queued"], q["dead"]) for q in listed] == [("mail", 3, 0)]


def test_charts_draw_the_run_history_with_a_range_picker(browser: Browser, engine: Engine) -> None:
    client = browser()
    job = make_job(engine)
    now = datetime.now(UTC).replace(microsecond=0)
    for k in range(1, 6):
        at = now - timedelta(minutes=k)
        started, finished = at + timedelta(milliseconds=40 * k), at + timedelta(seconds=1)
        make_run(engine, job, at, status="succeeded", started_at=started, finished_at=finished)
    make_run(engine, job, scheduled_at=now - timedelta(seconds=30))  # due, not started: backlog
    page = client.get("/console/charts?range=15m")
    assert page.status_code == 200
    for chart in ("runs", "lag", "backlog"):
        assert f'id="chart-{chart}"' in page.text
    figure = page.text[page.text.index('id="chart-runs"') :]
    assert '<path d="M' in figure  # a line is drawn
    backlog = page.text[page.text.index('id="chart-backlog"') :]
    assert "backlog <b>1</b>" in backlog  # the run due and not started
    lag = page.text[page.text.index('id="chart-lag"') :]
    assert "normal <b>0.04</b>" in lag  # the newest run started 40 ms after its second
    assert client.get("/console/charts?range=7d").status_code == 422

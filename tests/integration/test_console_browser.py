"""The console in a real headless Chromium (Debian's, driven by Playwright) against
`cronfleet run-all` on the real PostgreSQL and Kafka: sign in with a token, find a job,
pause it, edit a schedule with its preview, watch a failing job die, replay its dead
letter and see it run, read the explain view, a tenant's runs in flight and, signed in as
the operator, the fleet.

A screenshot of every page is kept in out/console/ (docs/console.md shows them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from kit.settings import Settings
from tests.integration.test_life_of_a_run import RunAll, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "out" / "console"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Target:
    """An HTTP endpoint the jobs call: it fails (500) until told to succeed."""

    def __init__(self) -> None:
        self.ok = threading.Event()
        self.hits: list[str] = []
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                target.hits.append(self.headers.get("Idempotency-Key", ""))
                self.send_response(200 if target.ok.is_set() else 500)
                self.end_headers()
                self.wfile.write(b"ok" if target.ok.is_set() else b"export backend down")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/export"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


@pytest.fixture
def stack(settings: Settings, db_url: str, tmp_path: Path) -> Iterator[RunAll]:
    prefix = f"cf.console.{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_RUN_TOPIC_PARTITIONS": "1",
        "CRONFLEET_REAPER_PERIOD_MS": "500",
        "CRONFLEET_SCAN_AHEAD_MS": "1000",  # must stay below the unclaimed grace
        "CRONFLEET_UNCLAIMED_GRACE_MS": "2000",
        "CRONFLEET_HTTP_ALLOW_HOSTS": "127.0.0.1",
        "CRONFLEET_LOG_LEVEL": "WARNING",
        "CRONFLEET_OPERATOR_TENANT": "ops",  # the fleet-wide view is the operator's
    }
    # no metrics ports: only the first of their range is checked free, and this test
    # does not read them
    ra = RunAll(env, prefix, tmp_path / "run-all.log", "--metrics-base-port", "0")
    try:
        ra.wait_healthy()
        yield ra
    finally:
        ra.close()


def token(db_url: str, *scopes: str, tenant: str = "acme") -> str:
    argv = [sys.executable, "-m", "kit.cli", "tokens", "create", "--tenant", tenant]
    for scope in scopes:
        argv += ["--scope", scope]
    env = {**os.environ, "CRONFLEET_DATABASE_URL": db_url}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


@pytest.fixture
def chromium() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="cf-chromium-")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1360, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def create_jobs(http: httpx.Client, headers: dict[str, str], target: Target) -> dict[str, str]:
    soon = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    export = {"type": "http", "url": target.url, "method": "POST"}
    bodies = [
        {"name": "nightly-report", "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Paris"},
         "task": {"type": "noop"}, "priority": "high"},
        {"name": "nightly-backup", "schedule": {"cron": "0 3 * * *", "timezone": "UTC"},
         "task": {"type": "sleep", "seconds": 1}, "paused": True},
        {"name": "heartbeat", "schedule": {"every_s": 2}, "task": {"type": "sleep", "seconds": 0.5},
         "overlap": "forbid"},
        {"name": "flaky-export", "schedule": {"at": soon.isoformat()}, "task": export,
         "retry": {"max_attempts": 1}},
        {"name": "hourly-sync", "schedule": {"cron": "0 * * * *"}, "task": {"type": "noop"},
         "priority": "low"},
    ]  # fmt: skip
    ids = {}
    for body in bodies:
        made = http.post("/v1/jobs", json=body, headers=headers)
        assert made.status_code == 201, made.text
        ids[body["name"]] = made.json()["job_id"]
    return ids


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_sign_in_find_pause_replay_and_see_it_run_in_chromium(
    stack: RunAll, db_url: str, chromium: Any, target: Target
) -> None:
    operator = token(db_url, "read", "write", "admin")
    headers = {"Authorization": f"Bearer {operator}"}
    ids = create_jobs(stack.http, headers, target)
    base = f"http://127.0.0.1:{stack.api_port}"
    page = chromium.new_page()
    page.set_default_timeout(30_000)
    page.on("dialog", lambda dialog: dialog.accept())  # "Replay this run?"

    # sign in: a page behind the session sends us to the login form and back
    page.goto(f"{base}/console/jobs")
    assert "/console/login" in page.url
    shot(page, "login")
    page.fill("#token", operator)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/console/jobs")
    cookie = next(c for c in chromium.cookies() if c["name"] == "cf_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and operator not in cookie["value"]

    # find a job, pause it
    page.fill("input[name=name_prefix]", "nightly-")
    page.click("form.filters button[type=submit]")
    page.wait_for_selector("text=2 jobs")
    rows = page.locator("#jobs tbody tr")
    assert rows.count() == 2
    report = page.locator("tr[data-job='nightly-report']")
    report.locator("button", has_text="Pause").click()
    page.wait_for_selector(".flash >> text=nightly-report paused")
    assert "paused" in page.locator("tr[data-job='nightly-report']").inner_text()
    assert "name_prefix=nightly-" in page.url  # back to the same search
    shot(page, "jobs")
    job = stack.http.get(f"/v1/jobs/{ids['nightly-report']}", headers=headers).json()
    assert job["paused"] is True

    # a job's runs with their timeline, and the schedule preview of the edit form
    page.goto(f"{base}/console/jobs/{ids['heartbeat']}")
    # (no wait_for_function: the page's CSP forbids evaluating strings, as it should)
    page.locator("#runs tbody tr[data-run]").nth(2).wait_for()  # refreshed in place
    assert page.locator("svg.timeline g.bar").count() >= 1
    page.fill("input[name=schedule_every_s]", "")
    page.fill("input[name=schedule_cron]", "30 2 * * *")
    page.fill("input[name=schedule_timezone]", "Europe/Paris")
    # the preview follows what is typed: Paris times, CET or CEST
    page.locator(".preview-box li", has_text=re.compile(r"T02:30:00\+0[12]:00")).first.wait_for()
    shot(page, "job")

    # explain: every owed fire of the heartbeat and what became of it, a pause included
    beat = f"/v1/jobs/{ids['heartbeat']}"
    assert stack.http.patch(beat, json={"paused": True}, headers=headers).status_code == 200

    def skipped() -> bool:  # a paused job's trigger waits (no run row): explain says so
        now = datetime.now(UTC)
        span = {"from": (now - timedelta(minutes=1)).isoformat(), "to": now.isoformat()}
        got = stack.http.get(f"{beat}/explain", params=span, headers=headers).json()
        return any(f["outcome"] == "skipped" and f["reason"] for f in got["fires"])

    wait_until("a fire skipped while paused", skipped)
    # The page is read while the job is still paused: at the resume, fires owed within
    # the misfire grace (14 s) run late, so a short pause's skipped fire becomes a run.
    created = datetime.fromisoformat(stack.http.get(beat, headers=headers).json()["created_at"])
    window = {
        "from": (created - timedelta(seconds=4)).isoformat(),
        "to": (datetime.now(UTC) + timedelta(seconds=9)).isoformat(),
    }
    page.goto(f"{base}/console/jobs/{ids['heartbeat']}/explain?{urlencode(window)}")
    page.wait_for_selector("#fires tbody tr")
    summary = page.inner_text(".summary")
    assert "missing: 0" in summary and "skipped: 0" not in summary and "ran: 0" not in summary
    assert "the job was paused" in page.inner_text("#fires")
    shot(page, "explain")
    assert stack.http.patch(beat, json={"paused": False}, headers=headers).status_code == 200

    # the failing export dies; its dead letter is replayed and then succeeds
    def dead_letter() -> bool:
        got = stack.http.get("/v1/dead-letters", headers=headers).json()["dead_letters"]
        return any(d["job_id"] == ids["flaky-export"] for d in got)

    wait_until("the export's dead letter", dead_letter)
    page.goto(f"{base}/console/dead-letters")
    row = page.locator("#dead-letters tbody tr").first
    assert "flaky-export" in row.inner_text() and "500" in row.inner_text()
    shot(page, "dead-letters")
    target.ok.set()
    row.locator("button", has_text="Replay").click()
    page.wait_for_selector(".flash >> text=replayed")
    page.goto(f"{base}/console/jobs/{ids['flaky-export']}")
    # the runs section refreshes itself (console.js): no reload needed to see it run
    page.wait_for_selector("#runs .status.s-succeeded")
    assert len(target.hits) == 2 and target.hits[0] == target.hits[1]  # same idempotency key

    # a tenant's admin token sees its own runs in flight, nothing of the fleet
    page.goto(f"{base}/console/fleet")
    page.wait_for_selector("#tiers tbody tr[data-tier=normal]")
    assert page.locator("#nodes").count() == 0 and page.locator("#workers").count() == 0
    shot(page, "in-flight")
    page.click("text=Sign out")
    page.wait_for_selector(".flash >> text=signed out")

    # the operator's: scheduler node and its partitions, lag per tier, the worker
    page.goto(f"{base}/console/fleet")
    page.fill("#token", token(db_url, "read", "admin", tenant="ops"))
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/console/fleet")
    page.wait_for_selector("#nodes tbody tr")
    assert "1024" in page.inner_text("#nodes") and page.locator("#lag tbody tr").count() == 4
    assert page.locator("#workers tbody tr").count() >= 1
    shot(page, "fleet")


def test_act_from_the_console_in_chromium(
    stack: RunAll, db_url: str, chromium: Any, target: Target
) -> None:
    """Create a job (its field errors shown first), watch it fail on its run page, see it
    stop by itself, replay its failures in bulk from "Now", backfill and delete a job,
    replay a queue's dead task, read the charts."""
    writer = token(db_url, "read", "write")
    headers = {"Authorization": f"Bearer {writer}"}
    base = f"http://127.0.0.1:{stack.api_port}"
    for name, tier in (("tick", "high"), ("tock", "low")):  # steady work for the charts
        body = {"name": name, "schedule": {"every_s": 1}, "task": {"type": "noop"},
                "priority": tier}  # fmt: skip
        assert stack.http.post("/v1/jobs", json=body, headers=headers).status_code == 201
    page = chromium.new_page()
    page.set_default_timeout(30_000)
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{base}/console/login")
    page.fill("#token", writer)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/console/jobs")

    # a new job: a bad cron and an unknown zone are both named, as the API names them
    page.click("#new-job-link")
    page.fill("input[name=name]", "export")
    page.fill("input[name=schedule_cron]", "61 * * * *")
    page.fill("input[name=schedule_timezone]", "Mars/Olympus")
    export = {"type": "http", "url": target.url, "method": "POST"}
    page.fill("textarea[name=task]", json.dumps(export))
    page.fill("textarea[name=retry]", json.dumps({"max_attempts": 1}))
    page.click("#new-job button[type=submit]")
    page.wait_for_selector("#problems")
    fields = page.locator("#problems li").evaluate_all("els => els.map(e => e.dataset.field)")
    assert fields == ["schedule.cron", "schedule.timezone"]
    shot(page, "new-job")
    page.fill("input[name=schedule_cron]", "")
    page.fill("input[name=schedule_timezone]", "")
    page.fill("input[name=schedule_every_s]", "2")
    page.fill("input[name=pause_after_dead]", "3")  # stop after three dead letters
    page.click("#new-job button[type=submit]")
    page.wait_for_selector(".flash >> text=created export")
    job_id = page.url.rsplit("/", 1)[1]

    # it fails: its run page shows the attempt, its worker and what the target answered
    page.locator("#runs .status.s-dead").first.wait_for()
    page.locator("#runs tr:has(.s-dead) a").first.click()
    page.wait_for_selector("#attempts tr[data-attempt='1']")
    assert "export backend down" in page.inner_text("pre.out")
    assert "HTTP 500" in page.inner_text("#attempts")
    shot(page, "run")

    # three dead letters in a row: the job paused itself
    def auto_paused() -> bool:
        return stack.http.get(f"/v1/jobs/{job_id}", headers=headers).json()["paused"]

    wait_until("the job to pause itself", auto_paused)

    # Now: its failures, replayed together once the target is back
    target.ok.set()
    page.goto(f"{base}/console/now")
    page.wait_for_selector("#failed tbody tr[data-run]")
    failed = page.locator("#failed tbody tr[data-run]").count()
    assert failed >= 3
    shot(page, "now")
    page.check("#failed thead input.all")
    page.click("#failed ~ button:has-text('Replay ticked')")
    page.wait_for_selector(".flash >> text=runs replayed")

    def replayed_ran() -> bool:
        runs = stack.http.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()["runs"]
        return sum(r["status"] == "succeeded" for r in runs) >= 3

    wait_until("the replayed runs to succeed", replayed_ran)

    # backfill the last minutes of a cron job, then delete it
    cron = {"name": "tens", "schedule": {"cron": "*/10 * * * *"}, "task": {"type": "noop"}}
    tens = stack.http.post("/v1/jobs", json=cron, headers=headers).json()["job_id"]
    page.goto(f"{base}/console/jobs/{tens}")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    page.fill("form.backfill input[name=from]", (now - timedelta(hours=1)).isoformat())
    page.fill("form.backfill input[name=to]", now.isoformat())
    page.click("form.backfill button")
    page.wait_for_selector(".flash >> text=backfill:")
    page.click(".toolbar button:has-text('Delete')")
    page.wait_for_selector(".flash >> text=job deleted")
    assert stack.http.get(f"/v1/jobs/{tens}", headers=headers).status_code == 404

    # a queue: depth, a dead task, put back
    for n in range(3):
        stack.http.post("/v1/queues/mail/tasks", json={"payload": n}, headers=headers)
    leased = stack.http.post(
        "/v1/queues/mail/lease", json={"worker_id": "w", "max_tasks": 1}, headers=headers
    ).json()["tasks"][0]
    stack.http.post(
        f"/v1/tasks/{leased['task_id']}/nack",
        json={"lease_token": leased["lease_token"], "retryable": False, "error": "bad address"},
        headers=headers,
    )
    page.goto(f"{base}/console/queues")
    page.wait_for_selector("#queues tr[data-queue=mail]")
    shot(page, "queues")
    page.click("#queues a:has-text('mail')")
    page.wait_for_selector(f"#dead-tasks tr[data-task='{leased['task_id']}']")
    page.check(f"#dead-tasks tr[data-task='{leased['task_id']}'] input")
    page.click("button:has-text('Replay ticked')")
    page.wait_for_selector(".flash >> text=1 dead tasks put back in mail")

    # charts of what just happened
    page.goto(f"{base}/console/charts?range=15m")
    page.wait_for_selector("#chart-runs path.l-started")
    assert page.locator("#chart-lag path.l-high").count() == 1
    shot(page, "charts")

"""The console over HTTP (the browser test drives it in Chromium): sessions behind API
tokens, cookie flags, CSRF, tenancy (another tenant's ids are 404 pages), read-only
tokens, the edit form sending only what changed, and the security headers."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.settings import Settings
from kit.store.jobs_list import job_names
from kit.store.tokens import token_create, token_revoke
from tests.integration.console_client import csrf_of
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration


def form_post(client: TestClient, path: str, page: str, **fields: str):
    """POST a console form with the CSRF token of `page` (as the browser would)."""
    html = client.get(page).text
    return client.post(path, data={"csrf": csrf_of(html), **fields}, follow_redirects=False)


def paused(engine: Engine, job_id: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT paused FROM jobs WHERE job_id = :j"), {"j": job_id}
        ).scalar()


def test_login_sets_a_strict_httponly_session_cookie(settings: Settings, engine: Engine) -> None:
    token = token_create(engine, "acme").token
    with TestClient(create_app(settings, engine)) as client:
        assert (
            client.get("/console/jobs", follow_redirects=False)
            .headers["location"]
            .startswith("/console/login?next=")
        )
        form = client.get("/console/login")
        assert form.headers["x-frame-options"] == "DENY"
        assert "script-src 'self'" in form.headers["content-security-policy"]
        wrong = client.post(
            "/console/login", data={"csrf": csrf_of(form.text), "token": "cf_nope_nope"}
        )
        assert wrong.status_code == 401 and "cf_session" not in client.cookies
        stale = client.post("/console/login", data={"csrf": "forged", "token": token})
        assert stale.status_code == 403 and "cf_session" not in client.cookies
        got = client.post(
            "/console/login",
            data={"csrf": csrf_of(form.text), "token": token, "next": "https://evil.example/x"},
            follow_redirects=False,
        )
        assert got.headers["location"] == "/console/jobs"  # never another site
        cookie = got.headers["set-cookie"]
        assert "cf_session=" in cookie and "HttpOnly" in cookie and "Path=/console" in cookie
        assert "SameSite=strict" in cookie and "Secure" not in cookie  # plain HTTP here
        assert token not in cookie
        assert client.get("/console/jobs").status_code == 200


def test_the_cookie_is_secure_over_tls_or_when_told(settings: Settings, engine: Engine) -> None:
    token = token_create(engine, "acme").token
    with TestClient(create_app(settings, engine), base_url="https://testserver") as client:
        form = client.get("/console/login")
        got = client.post(
            "/console/login",
            data={"csrf": csrf_of(form.text), "token": token},
            follow_redirects=False,
        )
        assert "Secure" in got.headers["set-cookie"]
    # Behind a TLS-terminating proxy the app sees plain HTTP; the setting marks cookies
    # Secure anyway (and the browser, on https, sends them back).
    proxied = Settings(**{**settings.model_dump(), "console_secure_cookie": True})
    with TestClient(create_app(proxied, engine)) as client:
        assert "Secure" in client.get("/console/login").headers["set-cookie"]


def test_forms_need_the_session_csrf_token_and_our_origin(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    client = browser()
    job = make_job(engine)
    page = f"/console/jobs/{job}"
    no_token = client.post(f"{page}/pause", data={"next": page}, follow_redirects=False)
    assert no_token.status_code == 403 and not paused(engine, job)
    csrf = csrf_of(client.get(page).text)
    foreign = client.post(
        f"{page}/pause",
        data={"csrf": csrf},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert foreign.status_code == 403 and not paused(engine, job)
    ok = client.post(
        f"{page}/pause",
        data={"csrf": csrf},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert ok.status_code == 303 and paused(engine, job)
    assert "paused" in client.get(ok.headers["location"]).text
    with engine.connect() as conn:
        actor = conn.execute(
            text("SELECT actor FROM job_audit WHERE action = 'pause' AND job_id = :j"), {"j": job}
        ).scalar_one()
        signed_in = conn.execute(text("SELECT token_id FROM console_sessions")).scalar_one()
    assert actor == signed_in  # the audit names the token behind the session


def test_another_tenants_ids_are_404_pages_everywhere(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    job = make_job(engine, tenant="acme")
    run = make_run(engine, job, status="dead")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO dead_letters (run_id, job_id, tenant) VALUES (:r, :j, 'acme')"),
            {"r": run, "j": job},
        )
    other = browser("globex")
    for page in (f"/console/jobs/{job}", f"/console/jobs/{job}/explain", "/console/jobs/nope"):
        assert other.get(page).status_code == 404, page
    for action in (
        f"/console/jobs/{job}/pause",
        f"/console/jobs/{job}/run-now",
        f"/console/jobs/{job}/edit",
        f"/console/runs/{run}/cancel",
        f"/console/dead-letters/{run}/replay",
    ):
        got = form_post(other, action, "/console/jobs", priority="low")
        assert got.status_code == 404, action
    assert job not in other.get("/console/jobs").text
    assert run[:8] not in other.get("/console/dead-letters").text
    assert not paused(engine, job)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT status FROM runs")).scalar() == "dead"


def test_job_names_are_the_tenants_own_whatever_ids_are_asked(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    """Defence in depth: the dead-letters page names jobs by id, and the name lookup
    keeps to the signed-in tenant even when a row hands it another tenant's job (here a
    dead letter filed under acme for globex's job: no path of the kit writes one, which
    is why a lookup without its tenant filter passed every other test)."""
    own = make_job(engine, tenant="acme", name="acme-nightly")
    theirs = make_job(engine, tenant="globex", name="globex-secret-payroll")
    assert job_names(engine, "acme", [own, theirs]) == {own: "acme-nightly"}
    assert job_names(engine, "globex", [own, theirs]) == {theirs: "globex-secret-payroll"}
    run = make_run(engine, theirs, tenant="globex", status="dead")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO dead_letters (run_id, job_id, tenant) VALUES (:r, :j, 'acme')"),
            {"r": run, "j": theirs},
        )
    page = browser("acme").get("/console/dead-letters")
    assert page.status_code == 200 and run[:8] in page.text
    assert "globex-secret-payroll" not in page.text


def test_a_read_only_token_sees_but_cannot_change(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    job = make_job(engine)
    reader = browser(scopes=("read",))
    page = reader.get(f"/console/jobs/{job}")
    assert page.status_code == 200 and "read only" in page.text and "disabled" in page.text
    got = form_post(reader, f"/console/jobs/{job}/pause", f"/console/jobs/{job}")
    assert got.status_code == 403 and not paused(engine, job)
    mine = reader.get("/console/fleet")  # its own runs; the fleet is the operator's
    assert mine.status_code == 200 and "Runs in flight" in mine.text and "Workers" not in mine.text


def test_the_edit_form_sends_only_what_changed_and_shows_problems(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    client = browser()
    job = make_job(engine)
    page = f"/console/jobs/{job}"
    html = client.get(page).text
    fields = dict(re.findall(r'name="(orig_[a-z_]+)" value="([^"]*)"', html))
    form = {k.removeprefix("orig_"): v.replace("&#34;", '"') for k, v in fields.items()}
    sent = {**{f"orig_{k}": v for k, v in form.items()}, **form, "csrf": csrf_of(html)}
    sent["priority"] = "high"
    got = client.post(f"{page}/edit", data=sent, follow_redirects=False)
    assert got.status_code == 303, got.text[:2000]
    with engine.connect() as conn:
        changes = conn.execute(
            text("SELECT changes FROM job_audit WHERE job_id = :j ORDER BY audit_id DESC LIMIT 1"),
            {"j": job},
        ).scalar_one()
    assert changes == {"priority": {"from": "normal", "to": "high"}}
    bad = {**sent, "priority": "normal", "schedule_every_s": "", "schedule_cron": "61 * * * *"}
    shown = client.post(f"{page}/edit", data=bad, follow_redirects=False)
    assert shown.status_code == 422
    assert "schedule.cron" in shown.text and "61 * * * *" in shown.text  # the user's input kept


def test_revoking_the_token_ends_its_sessions_and_logout_ends_one(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    client = browser()
    with engine.connect() as conn:
        token_id = conn.execute(text("SELECT token_id FROM console_sessions")).scalar_one()
    assert client.get("/console/jobs").status_code == 200
    token_revoke(engine, token_id)
    assert client.get("/console/jobs", follow_redirects=False).status_code == 303
    other = browser()
    got = form_post(other, "/console/logout", "/console/jobs")
    assert got.status_code == 303
    assert other.get("/console/jobs", follow_redirects=False).status_code == 303


def test_the_pages_render_for_an_admin(browser: Callable[..., TestClient], engine: Engine) -> None:
    admin = browser(scopes=("admin",))
    job = make_job(engine)
    make_run(engine, job, status="succeeded")
    for page in (
        "/console/jobs",
        "/console/jobs?name_prefix=jo&priority=normal",
        f"/console/jobs/{job}",
        f"/console/jobs/{job}/explain",
        "/console/dead-letters",
        "/console/fleet",
        "/console/preview?cron=30+2+*+*+*&timezone=Europe/Paris",
    ):
        got = admin.get(page)
        assert got.status_code == 200, (page, got.text[:500])
    bad = admin.get("/console/jobs?priority=urgent")
    assert bad.status_code == 422 and "priority: must be one of" in bad.text
    preview = admin.get("/console/preview?cron=61+*+*+*+*").text
    assert "cron" in preview and "not a valid" in preview


def test_an_interval_jobs_next_fires_preview_from_its_anchor(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    client = browser()
    job = make_job(engine)  # every hour, anchored when it was made
    anchor = "2030-01-01T00:00:07+00:00"  # an odd second: a preview from now is off phase
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE jobs SET schedule = :s WHERE job_id = :j"),
            {"s": f'{{"every_s": 10, "anchor": "{anchor}"}}', "j": job},
        )
    page = client.get(f"/console/jobs/{job}").text
    assert f'name="schedule_anchor" value="{anchor}"' in page  # the form carries it
    preview = client.get("/console/preview", params={"every_s": "10", "anchor": anchor}).text
    fires = re.findall(r"<code>([^<]+)</code>", preview)
    assert len(fires) == 5 and all(f[17:19] in ("07", "17", "27", "37", "47", "57") for f in fires)


def test_a_run_held_for_its_second_is_shown_claimed_on_its_pages(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    from datetime import UTC, datetime, timedelta

    from kit.core.output import Output
    from kit.store.claims import Claim, run_finish_ok, runs_claim

    client = browser()
    job = make_job(engine)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    rid = make_run(engine, job, scheduled_at=due)
    [held] = runs_claim(engine, [Claim(rid, 1)], "w1", 30_000)
    for page in (f"/console/jobs/{job}", f"/console/runs/{rid}"):
        html = client.get(page).text
        assert 'class="status s-claimed">claimed<' in html, page
        assert "s-running" not in html and ">running<" not in html, page
        assert "waits for its second" in html
    run_page = client.get(f"/console/runs/{rid}").text
    assert f'action="/console/runs/{rid}/cancel"' in run_page  # it can still be cancelled
    assert f'<code id="key">{rid}</code>' in run_page

    run_finish_ok(engine, rid, held.lease_token, output=Output("all done\n", "a warning\n"))
    shown = client.get(f"/console/runs/{rid}").text
    assert 'class="status s-succeeded">succeeded<' in shown
    assert "all done" in shown and "a warning" in shown and "/cancel" not in shown


def test_the_preview_names_a_bad_cron_and_a_bad_zone_together(
    browser: Callable[..., TestClient],
) -> None:
    preview = browser().get("/console/preview?cron=61+*+*+*+*&timezone=Mars/Olympus")
    assert preview.status_code == 422
    assert "cron: " in preview.text and "timezone: unknown time zone" in preview.text


def test_the_job_page_shows_how_long_its_runs_take_and_their_lease(
    browser: Callable[..., TestClient], engine: Engine
) -> None:
    from kit.core.durations import LeaseBounds
    from kit.store.durations import job_durations_refresh
    from tests.integration.test_job_durations import measured_runs

    job = make_job(engine)
    reader = browser(scopes=("read",))
    assert "run durations: not measured yet" in reader.get(f"/console/jobs/{job}").text
    measured_runs(engine, job, [400] * 19 + [1_200])
    job_durations_refresh(engine, [job], LeaseBounds(1_000, 60_000))
    page = reader.get(f"/console/jobs/{job}").text
    assert "runs take 400 ms (p50), 1200 ms (p99) over the last 20" in page
    assert "run lease 1800 ms (1.5 × p99)" in page

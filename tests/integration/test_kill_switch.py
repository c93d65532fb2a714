"""The operator's kill switch on the real stack (kit.store.switches): a switch holds the
runs it names (the worker consumes their messages and claims nothing; the reaper leaves
them pending) while other runs start; lifting it applies each job's misfire policy and
the reaper publishes the kept runs again, which then run once. Nothing is dropped, and
every change is audited."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.api.switches import OPERATOR_ONLY
from kit.core.switches import Switch, SwitchKind
from kit.reaper.reaper import Reaper
from kit.settings import Settings
from kit.store.claims import Claim, runs_claim
from kit.store.jobs import JobCreate, JobSpec, job_create
from kit.store.reaping import runs_publish_unclaimed
from kit.store.switches import switch_audit_list, switch_off, switch_on, switches_list
from kit.store.tokens import token_create
from kit.transport import RunPublisher
from kit.transport.progress import QueueProgress
from tests.integration.console_client import csrf_of, login
from tests.integration.test_worker_e2e import publish
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run, run_row
from tests.integration.workers import running_worker

pytestmark = pytest.mark.integration

ACME = Switch(SwitchKind.tenant, "acme")
GRACE_MS = 14_000  # the misfire grace of the default timings
REAPER_GRACE_MS = 1000


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def progress(settings: Settings, prefix: str, group: str) -> Iterator[QueueProgress]:
    p = QueueProgress(settings.kafka_bootstrap, group, topic_prefix=prefix)
    yield p
    p.close()


def job_with_misfire(engine: Engine, name: str, kind: str, tenant: str = "acme") -> str:
    from kit.core.schedule import parse_schedule

    spec = JobSpec(
        name=name,
        schedule=parse_schedule({"every_s": 3600}, now=datetime.now(UTC)),
        task={"type": "noop"},
        retry={"max_attempts": 3, "base_s": 1.0, "cap_s": 10.0, "jitter": "none"},
        misfire={"kind": kind, "deadline_s": 60},
    )
    return job_create(engine, JobCreate(tenant=tenant, spec=spec)).job.job_id


def test_a_held_run_is_not_claimed_nor_republished_until_the_switch_is_lifted(
    engine: Engine,
) -> None:
    held = make_run(engine, make_job(engine))
    free = make_run(engine, make_job(engine, tenant="beta", name="b"), tenant="beta")
    switch_off(engine, ACME, "noisy neighbour", "test")
    claimed = runs_claim(engine, [Claim(held, 1), Claim(free, 1)], "w", 30_000)
    assert [c.run_id for c in claimed] == [free]
    published: list[str] = []
    found = runs_publish_unclaimed(engine, 0, lambda ps: published.extend(p.run_id for p in ps))
    assert held not in published and found.all == []
    assert run_row(engine, held).status == "pending"
    assert [(s.kind, s.value, s.held) for s in switches_list(engine)] == [("tenant", "acme", 1)]
    lifted = switch_on(engine, ACME, "test", GRACE_MS)
    assert (lifted.kept, lifted.skipped) == ([held], [])
    assert [c.run_id for c in runs_claim(engine, [Claim(held, 1)], "w", 30_000)] == [held]


def test_tier_and_task_type_switches_hold_their_runs(engine: Engine) -> None:
    low = make_run(engine, make_job(engine, name="low"), priority="low")
    http_job = make_job(engine, name="http", task={"type": "http", "url": "http://x.test/"})
    http = make_run(engine, http_job)
    other = make_run(engine, make_job(engine, name="other"))
    switch_off(engine, Switch(SwitchKind.tier, "low"), "", "test")
    switch_off(engine, Switch(SwitchKind.task_type, "http"), "", "test")
    claims = [Claim(low, 1), Claim(http, 1), Claim(other, 1)]
    assert [c.run_id for c in runs_claim(engine, claims, "w", 30_000)] == [other]


def test_a_tenant_switch_holds_its_run_while_another_tenants_runs_then_it_runs_once(
    engine: Engine,
    settings: Settings,
    prefix: str,
    group: str,
    publisher: RunPublisher,
    progress: QueueProgress,
) -> None:
    switch_off(engine, ACME, "noisy neighbour", "test")
    held = make_run(engine, make_job(engine))
    free = make_run(engine, make_job(engine, tenant="beta", name="b"), tenant="beta")
    publish(publisher, engine, held)
    publish(publisher, engine, free)
    with running_worker(engine, settings, prefix, group, publisher) as worker:
        reaper = Reaper(engine, publisher, REAPER_GRACE_MS, progress=progress)

        def both_consumed() -> bool:
            reaper.tick()
            duplicates = worker.metrics.registry.get_sample_value(
                "cronfleet_worker_duplicate_deliveries_total"
            )
            return run_row(engine, free).status == "succeeded" and duplicates == 1

        wait_until("the free run to succeed and the held one to claim nothing", both_consumed)
        for _ in range(3):  # the reaper's passes leave the held run alone
            assert reaper.tick().lost == 0
        row = run_row(engine, held)
        assert (row.status, row.started_at, row.attempt) == ("pending", None, 1)

        lifted = switch_on(engine, ACME, "test", GRACE_MS)
        assert lifted.kept == [held]

        def held_ran() -> bool:
            reaper.tick()
            return run_row(engine, held).status == "succeeded"

        wait_until("the held run to run once the switch is lifted", held_ran)
        assert run_row(engine, held).attempt == 1
        assert (
            reaper.metrics.registry.get_sample_value(
                "cronfleet_reaper_runs_total", {"action": "lost_republished"}
            )
            == 1
        )
        assert (
            worker.metrics.registry.get_sample_value(
                "cronfleet_worker_runs_total", {"outcome": "succeeded"}
            )
            == 2
        )


def test_a_run_claimed_before_its_switch_went_off_is_given_back_unstarted(
    engine: Engine,
    settings: Settings,
    prefix: str,
    group: str,
    publisher: RunPublisher,
    progress: QueueProgress,
) -> None:
    """The claim refuses a held run, but a worker claims ahead of the second: a switch
    turned off after the claim must still stop the start (inline and pool runs alike),
    give the run back at the same attempt, and let it run once when lifted."""
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
    inline = make_run(engine, make_job(engine, name="inline"), scheduled_at=due)
    pooled_job = make_job(engine, name="pool", task={"type": "sleep", "seconds": 0.1})
    pooled = make_run(engine, pooled_job, scheduled_at=due)
    for run_id in (inline, pooled):
        publish(publisher, engine, run_id)
    with running_worker(engine, settings, prefix, group, publisher) as worker:
        wait_until(
            "both runs claimed ahead of their second",
            lambda: all(run_row(engine, r).lease_token is not None for r in (inline, pooled)),
        )
        assert datetime.now(UTC) < due - timedelta(seconds=1), "claimed too late to test"
        switch_off(engine, ACME, "stop acme now", "test")
        wait_until(
            "both given back at their second",
            lambda: (
                worker.metrics.value("cronfleet_worker_switch_held_total") == 2
                and all(run_row(engine, r).status == "pending" for r in (inline, pooled))
            ),
        )
        for run_id in (inline, pooled):
            row = run_row(engine, run_id)
            assert (row.started_at, row.attempt, row.lease_token) == (None, 1, None)
        assert [(s.kind, s.value, s.held) for s in switches_list(engine)] == [("tenant", "acme", 2)]
        lifted = switch_on(engine, ACME, "test", GRACE_MS)
        assert sorted(lifted.kept) == sorted([inline, pooled])
        reaper = Reaper(engine, publisher, REAPER_GRACE_MS, progress=progress)

        def both_ran() -> bool:
            reaper.tick()
            return all(run_row(engine, r).status == "succeeded" for r in (inline, pooled))

        wait_until("both runs to run once the switch is lifted", both_ran)
        assert [run_row(engine, r).attempt for r in (inline, pooled)] == [1, 1]


def test_lifting_applies_each_jobs_misfire_policy_to_the_runs_it_held(engine: Engine) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    skip_late = job_with_misfire(engine, "skip", "skip_late")
    run_all = job_with_misfire(engine, "all", "run_all")
    run_once = job_with_misfire(engine, "once", "run_once")
    switch_off(engine, ACME, "incident 42", "test")
    old = make_run(engine, skip_late, now - timedelta(minutes=10))
    recent = make_run(engine, skip_late, now - timedelta(seconds=2))
    all_old = make_run(engine, run_all, now - timedelta(minutes=10))
    once = [make_run(engine, run_once, now - timedelta(minutes=m)) for m in (30, 20, 10)]
    manual = make_run(engine, skip_late, now - timedelta(minutes=31))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET trigger_kind = 'manual' WHERE run_id = :r"), {"r": manual}
        )
    with engine.connect() as conn:
        before = conn.execute(text("SELECT count(*) FROM runs")).scalar_one()

    lifted = switch_on(engine, ACME, "ops", GRACE_MS, reason="incident over")

    assert sorted(lifted.skipped) == sorted([old, once[0], once[1]])
    assert sorted(lifted.kept) == sorted([recent, all_old, once[2], manual])
    skipped = run_row(engine, old)
    assert (skipped.status, skipped.skip_reason) == ("skipped", "misfire")
    assert "switch off for tenant acme" in skipped.error
    for kept in lifted.kept:
        assert run_row(engine, kept).status == "pending"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM runs")).scalar_one() == before
    audit = switch_audit_list(engine)
    assert [(a.action, a.kind, a.value, a.held, a.skipped) for a in audit] == [
        ("on", "tenant", "acme", 7, 3),
        ("off", "tenant", "acme", None, None),
    ]
    assert audit[0].reason == "incident over" and audit[1].reason == "incident 42"


def test_explain_and_the_run_page_say_what_holds_a_run(
    engine: Engine, client: TestClient, auth: Callable[..., dict[str, str]]
) -> None:
    h = auth("acme")
    made = client.post(
        "/v1/jobs",
        json={"name": "j", "schedule": {"every_s": 60}, "task": {"type": "noop"}},
        headers=h,
    ).json()
    run = client.post(f"/v1/jobs/{made['job_id']}/runs", headers=h).json()
    assert client.get(f"/v1/runs/{run['run_id']}", headers=h).json()["held"] is None
    switch_off(engine, ACME, "noisy", "test")
    held = client.get(f"/v1/runs/{run['run_id']}", headers=h).json()["held"]
    assert held.startswith("held: switch off for tenant acme since ") and held.endswith("(noisy)")
    explained = client.get(f"/v1/jobs/{made['job_id']}/explain", headers=h).json()
    assert explained["held"] == held


def test_the_switch_routes_are_the_operators(
    settings: Settings, engine: Engine, make_token: Callable[..., str]
) -> None:
    mine = settings.model_copy(update={"operator_tenant": "ops"})
    with TestClient(create_app(mine, engine)) as client:
        tenant_admin = {"Authorization": f"Bearer {make_token('acme', ('admin',))}"}
        body = {"kind": "tenant", "value": "acme", "reason": "noisy"}
        got = client.post("/v1/switches:off", json=body, headers=tenant_admin)
        assert got.status_code == 403 and switches_list(engine) == []
        ops = {"Authorization": f"Bearer {make_token('ops', ('admin',))}"}
        bad = client.post("/v1/switches:off", json={"kind": "tier", "value": "x"}, headers=ops)
        assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == "value"
        off = client.post("/v1/switches:off", json=body, headers=ops)
        assert off.status_code == 200 and off.json()["changed"] is True
        listed = client.get("/v1/switches", headers=ops).json()
        assert [(s["kind"], s["value"]) for s in listed["switches"]] == [("tenant", "acme")]
        metrics = client.get("/metrics").text
        assert 'cronfleet_switch_held_runs{kind="tenant",value="acme"} 0.0' in metrics
        on = client.post("/v1/switches:on", json=body, headers=ops)
        assert on.status_code == 200 and on.json()["kept"] == 0
        again = client.post("/v1/switches:on", json=body, headers=ops)
        assert again.status_code == 404 and again.json()["error"]["code"] == "switch_not_off"
        actions = [e["action"] for e in client.get("/v1/switches", headers=ops).json()["recent"]]
        assert actions == ["on", "off"]


def test_cronfleet_switch_turns_off_lists_and_lifts(engine: Engine, settings: Settings) -> None:
    env = {**os.environ, "CRONFLEET_DATABASE_URL": settings.database_url}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kit.cli", "switch", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )

    held = make_run(engine, make_job(engine, name="n"), priority="low")
    off = cli("off", "--tier", "low", "--reason", "drain")
    assert (
        off.returncode == 0 and "tier low off since" in off.stdout and "1 runs held" in off.stdout
    )
    listed = cli("list")
    assert listed.stdout.startswith("tier\tlow\t1 held\t") and "drain" in listed.stdout
    bad = cli("off", "--tier", "urgent")
    assert bad.returncode == 2 and "tier:" in bad.stderr and len(bad.stderr.splitlines()) == 1
    on = cli("on", "--tier", "low")
    assert on.returncode == 0 and "1 held runs run now, 0 skipped" in on.stdout
    assert cli("list").stdout == "" and run_row(engine, held).status == "pending"
    assert [a.actor.startswith("cli") for a in switch_audit_list(engine)] == [True, True]


def _flash(html: str) -> str:
    found = re.search(r'<p class="flash" role="status">(.*?)</p>', html, re.S)
    return found.group(1) if found else ""


def _switch_rows(html: str) -> str:
    found = re.search(r'<table class="grid" id="switches">(.*?)</table>', html, re.S)
    assert found, html[-3000:]
    return found.group(1)


def test_the_console_fleet_page_turns_a_switch_off_and_on_for_the_operator_only(
    settings: Settings, engine: Engine
) -> None:
    """The fleet page's form (POST /console/fleet/switch) as a signed-in operator: off
    with a reason lists the switch with its held run, on lifts it; a bad kind is refused
    naming the field, nothing written; a tenant's admin session is refused (403)."""
    held = make_run(engine, make_job(engine, name="h"))
    mine = settings.model_copy(update={"operator_tenant": "ops"})
    with TestClient(create_app(mine, engine)) as ops:
        login(ops, token_create(engine, "ops", ("admin",)).token)

        def post(**fields: str) -> str:
            csrf = csrf_of(ops.get("/console/fleet").text)
            got = ops.post("/console/fleet/switch", data={"csrf": csrf, **fields})
            assert got.status_code == 200 and got.url.path == "/console/fleet", got.text[:500]
            return got.text

        page = post(action="off", kind="tenant", value="acme", reason="noisy neighbour")
        assert _flash(page) == "tenant acme off: 1 runs held (runs already running go on)"
        row = _switch_rows(page)
        assert "tenant <code>acme</code>" in row and '<td class="count">1</td>' in row
        assert "noisy neighbour" in row
        assert [(s.kind, s.value, s.held, s.reason) for s in switches_list(engine)] == [
            ("tenant", "acme", 1, "noisy neighbour")
        ]
        assert runs_claim(engine, [Claim(held, 1)], "w", 30_000) == []  # it holds

        page = post(action="on", kind="tenant", value="acme")
        assert _flash(page) == (
            "tenant acme on: 1 held runs run now, 0 skipped by their misfire policy"
        )
        assert "Every switch is on" in _switch_rows(page) and switches_list(engine) == []
        assert [a.action for a in switch_audit_list(engine)] == ["on", "off"]

        page = post(action="off", kind="tenants", value="acme")
        assert _flash(page) == "switch refused: kind: must be one of tenant, task_type, tier"
        page = post(action="off", kind="tier", value="urgent")
        assert _flash(page).startswith("switch refused: value: a tier is one of ")
        assert switches_list(engine) == [] and len(switch_audit_list(engine)) == 2

    with TestClient(create_app(mine, engine)) as tenant:
        login(tenant, token_create(engine, "acme", ("admin",)).token)
        csrf = csrf_of(tenant.get("/console/fleet").text)
        got = tenant.post(
            "/console/fleet/switch",
            data={"csrf": csrf, "action": "off", "kind": "tenant", "value": "acme"},
        )
        assert got.status_code == 403 and OPERATOR_ONLY in html.unescape(got.text)
    assert switches_list(engine) == []

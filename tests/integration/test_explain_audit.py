"""The job audit log and "why didn't my job run?" on the real stack: runs written by a
real scheduler node's scans (explicit clock), the schedule history read from the audit
log, every fire accounted for: ran, skipped (paused), not yet due, missing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.core.ids import run_id
from kit.core.owed import Outcome
from kit.core.schedule import parse_schedule
from kit.scheduler.node import NodeConfig, SchedulerNode
from kit.settings import Settings
from kit.store.audit import audit_list
from kit.store.claims import job_dead_streak_in
from kit.store.explain import job_explain
from kit.store.jobs import JobCreate, JobSpec, JobUpdate, job_create, job_update
from kit.transport import RunPublisher, ensure_topics

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]
T0 = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)


def at(minutes: int, seconds: int = 0) -> datetime:
    return datetime(2030, 1, 1, 0, minutes, seconds, tzinfo=UTC)


@pytest.fixture
def node(engine: Engine, settings: Settings) -> Iterator[SchedulerNode]:
    prefix = f"cf.explain.{uuid.uuid4().hex[:8]}"
    ensure_topics(settings.kafka_bootstrap, 1, prefix=prefix)
    publisher = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix)
    node = SchedulerNode(engine, publisher, "n1", NodeConfig())
    node.lease_pass()
    yield node
    node.kill()
    publisher.close()


def update(engine: Engine, job_id: str, now: datetime, **changes: object) -> None:
    job_update(engine, JobUpdate("acme", job_id, changes, now=now, actor="tok-edit"))


def test_explain_accounts_for_every_fire_through_pause_edit_and_a_lost_run(
    engine: Engine, node: SchedulerNode
) -> None:
    spec = JobSpec(
        "minutely",
        parse_schedule({"cron": "* * * * *"}, now=T0),
        {"type": "noop"},
        {"max_attempts": 1},
        {"kind": "skip_late", "deadline_s": 0},
    )
    job = job_create(engine, JobCreate("acme", spec, now=T0, actor="tok-create")).job.job_id
    node.scan_once(now=at(1))  # fires 00:01
    node.scan_once(now=at(2))  # fires 00:02
    update(engine, job, at(2, 30), paused=True)
    node.scan_once(now=at(3))  # 00:03 owed: the paused job's trigger waits, nothing written
    update(engine, job, at(3, 30), paused=False)  # skip_late, deadline 0: 00:03 is passed over
    update(engine, job, at(3, 40), schedule=parse_schedule({"cron": "*/2 * * * *"}, now=T0))
    node.scan_once(now=at(4))  # 00:04 under the new schedule
    with engine.begin() as conn:  # a run lost to a bug
        conn.execute(text("DELETE FROM runs WHERE run_id = :r"), {"r": run_id(job, at(2))})

    done = job_explain(engine, "acme", job, at(0), at(9), now=at(5))
    got = [(e.fire.at, e.outcome, e.run.status if e.run else None) for e in done.fires]
    assert got == [
        (at(1), Outcome.ran, "pending"),
        (at(2), Outcome.missing, None),
        (at(3), Outcome.skipped, None),  # no run: the audit log's pause says why
        (at(4), Outcome.ran, "pending"),
        (at(6), Outcome.not_yet_due, None),
        (at(8), Outcome.not_yet_due, None),
    ]
    assert done.fires[2].reason == "the job was paused"
    assert done.history_complete is True
    assert [(e.since, getattr(e.schedule, "expr", None)) for e in done.eras] == [
        (T0, "* * * * *"),
        (at(3, 40), "*/2 * * * *"),
    ]
    assert done.other_runs == []

    page = audit_list(engine, "acme", job)
    assert [(e.action, e.actor, e.version) for e in page.entries] == [
        ("update", "tok-edit", 4),
        ("resume", "tok-edit", 3),
        ("pause", "tok-edit", 2),
        ("create", "tok-create", 1),
    ]
    assert page.entries[0].changes == {"schedule.cron": {"from": "* * * * *", "to": "*/2 * * * *"}}
    # the resume says where its trigger went: from the fire it waited at (00:03, passed
    # over: skip_late with no deadline) to the next one
    assert page.entries[1].changes["trigger.fire_at"] == {
        "from": at(3).isoformat(),
        "to": at(4).isoformat(),
    }
    assert page.entries[0].at == at(3, 40)


def test_explain_and_audit_over_http(client: TestClient, auth: Headers, engine: Engine) -> None:
    h = auth()
    body = {"name": "cronly", "schedule": {"cron": "*/5 * * * *"}, "task": {"type": "noop"}}
    job = client.post("/v1/jobs", json=body, headers=h).json()["job_id"]
    got = client.get(f"/v1/jobs/{job}/explain", headers=h)
    assert got.status_code == 200, got.text
    out = got.json()
    assert set(out) >= {"from", "to", "fires", "summary", "schedules", "other_runs"}
    assert out["summary"]["missing"] == 0 and out["fires"]  # the next fires: not yet due
    assert {f["outcome"] for f in out["fires"]} == {"not_yet_due"}
    run = client.post(f"/v1/jobs/{job}/runs", headers=h).json()  # a manual run
    out = client.get(f"/v1/jobs/{job}/explain", headers=h).json()
    assert [o["run_id"] for o in out["other_runs"]] == [run["run_id"]]
    for params, field in (
        ({"from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"}, "to"),
        ({"from": "soon"}, "from"),
        ({"limit": 0}, "limit"),
    ):
        bad = client.get(f"/v1/jobs/{job}/explain", params=params, headers=h)
        assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == field
    other = auth("globex")
    assert client.get(f"/v1/jobs/{job}/explain", headers=other).status_code == 404
    assert client.get(f"/v1/jobs/{job}/audit", headers=other).status_code == 404
    audit = client.get(f"/v1/jobs/{job}/audit", headers=h).json()["entries"]
    assert [e["action"] for e in audit] == ["run_now", "create"]


def test_audit_never_stores_a_secret_and_pages(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    h = auth()
    task = {
        "type": "http",
        "url": "https://example.org/hook",
        "method": "POST",
        "headers": {"Authorization": "Bearer sup3r-secret"},
    }
    body = {"name": "hook", "schedule": {"every_s": 60}, "task": task}
    job = client.post("/v1/jobs", json=body, headers=h).json()["job_id"]
    task["headers"] = {"Authorization": "Bearer n3w-secret"}
    assert client.patch(f"/v1/jobs/{job}", json={"task": task}, headers=h).status_code == 200
    for priority in ("high", "low", "normal"):
        client.patch(f"/v1/jobs/{job}", json={"priority": priority}, headers=h)
    with engine.connect() as conn:
        stored = conn.execute(
            text("SELECT changes::text, coalesce(snapshot::text, '') FROM job_audit")
        ).all()
    dump = json.dumps([list(r) for r in stored])
    assert "sup3r-secret" not in dump and "n3w-secret" not in dump
    entries = client.get(f"/v1/jobs/{job}/audit", params={"limit": 2}, headers=h).json()
    assert [e["action"] for e in entries["entries"]] == ["update", "update"]
    rest = client.get(
        f"/v1/jobs/{job}/audit", params={"cursor": entries["next_cursor"]}, headers=h
    ).json()
    assert [e["action"] for e in rest["entries"]] == ["update", "update", "create"]
    assert rest["entries"][1]["changes"] == {
        "task.headers.Authorization": {"from": "<redacted>", "to": "<redacted>"}
    }
    assert client.get(f"/v1/jobs/{job}/audit", params={"cursor": "x"}, headers=h).status_code == 422


def test_the_kits_own_auto_pause_is_audited_and_deletes_keep_the_log(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    h = auth()
    body = {
        "name": "fragile",
        "schedule": {"every_s": 60},
        "task": {"type": "noop"},
        "pause_after_dead": 1,
    }
    job = client.post("/v1/jobs", json=body, headers=h).json()["job_id"]
    with engine.begin() as conn:
        assert job_dead_streak_in(conn, job) is True  # what a worker does on a dead letter
    entries = client.get(f"/v1/jobs/{job}/audit", headers=h).json()["entries"]
    assert (entries[0]["action"], entries[0]["actor"]) == ("auto_pause", "kit")
    assert entries[0]["changes"]["paused"] == {"from": False, "to": True}
    assert client.patch(f"/v1/jobs/{job}", json={"paused": False}, headers=h).status_code == 200
    assert client.delete(f"/v1/jobs/{job}", headers=h).status_code == 204
    entries = client.get(f"/v1/jobs/{job}/audit", headers=h).json()["entries"]
    assert [e["action"] for e in entries] == ["delete", "resume", "auto_pause", "create"]
    assert sum(1 for e in entries if e["actor"] == "kit") == 1  # the API's resume is not 'kit'

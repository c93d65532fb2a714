"""Dead letters over HTTP: listed newest first per tenant, inspected with the error
history, replayed once (same run id, next attempt, fresh budget; a second replay is a
409 that changes nothing), replayed in bulk by job, and invisible to other tenants."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from kit.store.claims import Claim, run_finish_failed, runs_claim
from kit.store.reaping import runs_publish_unclaimed
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def kill(engine: Engine, job_id: str, minute: int, tenant: str = "acme") -> str:
    """A run of the job that fails its only attempt: dead."""
    rid = make_run(engine, job_id, tenant=tenant, scheduled_at=T0 + timedelta(minutes=minute))
    [run] = runs_claim(engine, [Claim(rid, 1)], "w", 30_000)
    run_finish_failed(engine, rid, run.lease_token, f"boom {minute}", random.Random(0))
    return rid


def test_list_inspect_replay_once(client: TestClient, auth: Headers, engine: Engine) -> None:
    headers = auth()
    job = make_job(engine, retry={"max_attempts": 1})
    dead = [kill(engine, job, m) for m in (1, 2, 3)]
    page = client.get("/v1/dead-letters?limit=2", headers=headers).json()
    assert len(page["dead_letters"]) == 2 and page["next_cursor"]
    rest = client.get(f"/v1/dead-letters?limit=2&cursor={page['next_cursor']}", headers=headers)
    listed = [d["run_id"] for d in page["dead_letters"] + rest.json()["dead_letters"]]
    assert sorted(listed) == sorted(dead) and rest.json()["next_cursor"] is None

    one = client.get(f"/v1/dead-letters/{dead[0]}", headers=headers).json()
    assert one["errors"][0]["error"] == "boom 1" and one["run_status"] == "dead"

    replay = client.post(f"/v1/dead-letters/{dead[0]}:replay", headers=headers)
    assert replay.status_code == 200, replay.text
    body = replay.json()
    assert (body["run_status"], body["attempt"], body["run_id"]) == ("pending", 2, dead[0])
    assert body["replayed_at"] is not None
    again = client.post(f"/v1/dead-letters/{dead[0]}:replay", headers=headers)
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_replayed"
    assert run_row(engine, dead[0]).attempt == 2
    # the reaper publishes the replayed run at once (no grace, whatever its age)
    published: list = []
    assert runs_publish_unclaimed(engine, 10_000, published.extend).first
    assert [(p.run_id, p.attempt) for p in published] == [(dead[0], 2)]
    # fresh budget: attempt 2 is the first of a new budget of 1, so failing it is dead
    [run] = runs_claim(engine, [Claim(dead[0], 2)], "w", 30_000)
    result = run_finish_failed(engine, dead[0], run.lease_token, "again", random.Random(0))
    assert result.status == "dead"
    assert client.post(f"/v1/dead-letters/{dead[0]}:replay", headers=headers).status_code == 200


def test_bulk_replay_by_job_is_bounded(client: TestClient, auth: Headers, engine: Engine) -> None:
    headers = auth()
    a = make_job(engine, retry={"max_attempts": 1}, name="a")
    b = make_job(engine, retry={"max_attempts": 1}, name="b")
    for m in (1, 2, 3):
        kill(engine, a, m)
    kill(engine, b, 1)
    first = client.post("/v1/dead-letters:replay", json={"job_id": a, "limit": 2}, headers=headers)
    assert first.json() == {"replayed": 2, "more": True}
    second = client.post("/v1/dead-letters:replay", json={"job_id": a}, headers=headers)
    assert second.json() == {"replayed": 1, "more": False}
    assert client.post("/v1/dead-letters:replay", json={"job_id": a}, headers=headers).json() == {
        "replayed": 0,
        "more": False,
    }
    listed = client.get(f"/v1/dead-letters?job_id={b}", headers=headers).json()["dead_letters"]
    assert [d["run_status"] for d in listed] == ["dead"]  # job b untouched
    bad = client.post(
        "/v1/dead-letters:replay",
        json={"from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"},
        headers=headers,
    )
    assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == "to"


def test_other_tenants_see_nothing(client: TestClient, auth: Headers, engine: Engine) -> None:
    job = make_job(engine, retry={"max_attempts": 1}, tenant="acme")
    rid = kill(engine, job, 1)
    other = auth("globex")
    assert client.get(f"/v1/dead-letters/{rid}", headers=other).status_code == 404
    assert client.post(f"/v1/dead-letters/{rid}:replay", headers=other).status_code == 404
    assert client.get("/v1/dead-letters", headers=other).json()["dead_letters"] == []
    bulk = client.post("/v1/dead-letters:replay", json={}, headers=other).json()
    assert bulk["replayed"] == 0 and run_row(engine, rid).status == "dead"
    assert client.get("/v1/dead-letters").status_code == 401
    read_only = auth("acme", scopes=("read",))
    assert client.post(f"/v1/dead-letters/{rid}:replay", headers=read_only).status_code == 403


def test_pause_after_dead_is_a_job_field(client: TestClient, auth: Headers) -> None:
    headers = auth()
    job = {"name": "x", "schedule": {"every_s": 60}, "task": {"type": "noop"}}
    created = client.post("/v1/jobs", json={**job, "pause_after_dead": 3}, headers=headers)
    assert created.status_code == 201 and created.json()["pause_after_dead"] == 3
    job_id = created.json()["job_id"]
    patched = client.patch(f"/v1/jobs/{job_id}", json={"pause_after_dead": 5}, headers=headers)
    assert patched.json()["pause_after_dead"] == 5
    never = client.post(
        "/v1/jobs", json={**job, "name": "y", "pause_after_dead": 0}, headers=headers
    )
    assert never.status_code == 201 and never.json()["pause_after_dead"] == 0  # opts out
    bad = client.post(
        "/v1/jobs", json={**job, "name": "z", "pause_after_dead": -1}, headers=headers
    )
    assert (
        bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == "pause_after_dead"
    )

"""The jobs endpoints: create (idempotent), batch, get, edit, pause, delete, and every
kind of bad input answered 422 with the field, with nothing written."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from kit.core.partitions import partition_of
from kit.store.schema import triggers

pytestmark = pytest.mark.integration

Headers = Callable[..., dict[str, str]]
Counts = Callable[[], dict[str, int]]


def job(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "nightly-report",
        "schedule": {"cron": "0 3 * * *", "timezone": "Europe/Paris"},
        "task": {"type": "http", "url": "https://example.org/run", "method": "POST"},
    }
    body.update(fields)
    return body


def trigger_rows(engine: Engine, job_id: str) -> list:
    with engine.connect() as conn:
        return list(conn.execute(select(triggers).where(triggers.c.job_id == job_id)))


def problems(response) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "fields"}
    return {f["field"]: f["reason"] for f in body["error"]["fields"]}


def test_create_then_get(client: TestClient, auth: Headers, engine: Engine) -> None:
    headers = auth()
    response = client.post(
        "/v1/jobs",
        json=job(
            retry={"max_attempts": 5, "base_s": 2, "cap_s": 60},
            misfire={"kind": "skip_late", "deadline_s": 30},
            priority="high",
            overlap="forbid",
            timeout_s=120,
        ),
        headers=headers,
    )
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["tenant"] == "acme" and created["version"] == 1
    assert created["status"] == "active"
    assert created["retry"] == {"max_attempts": 5, "base_s": 2.0, "cap_s": 60.0, "jitter": "full"}
    assert created["misfire"] == {"kind": "skip_late", "deadline_s": 30}
    assert (created["priority"], created["overlap"], created["timeout_s"]) == (
        "high",
        "forbid",
        120,
    )
    assert client.get(f"/v1/jobs/{created['job_id']}", headers=headers).json() == created
    [trigger] = trigger_rows(engine, created["job_id"])
    assert trigger.partition_id == partition_of(created["job_id"], 1024)
    assert trigger.fire_at == datetime.fromisoformat(created["next_fire_at"])
    assert trigger.fire_at.astimezone(UTC).hour in (1, 2)  # 03:00 Paris is 01:00/02:00 UTC


@pytest.mark.parametrize(
    ("schedule", "task"),
    [
        ({"every_s": 300}, {"type": "command", "argv": ["/bin/echo", "hi"]}),
        ({"at": "2099-01-01T00:00:00Z"}, {"type": "sleep", "seconds": 1.5}),
        ({"cron": "*/5 * * * *"}, {"type": "noop"}),
    ],
)
def test_every_schedule_and_task_kind_is_accepted(
    client: TestClient, auth: Headers, schedule: dict, task: dict
) -> None:
    headers = auth(scopes=["read", "write", "command"])  # the policy allows acme /bin/echo
    response = client.post("/v1/jobs", json=job(schedule=schedule, task=task), headers=headers)
    assert response.status_code == 201, response.text
    created = response.json()
    assert datetime.fromisoformat(created["next_fire_at"]) == first_fire(created)


def first_fire(created: dict[str, Any]) -> datetime:
    """A created job's first fire, worked out by hand from its schedule and creation."""
    schedule = created["schedule"]
    made = datetime.fromisoformat(created["created_at"]).astimezone(UTC)
    if "at" in schedule:
        return datetime.fromisoformat(schedule["at"])
    if "every_s" in schedule:  # anchored at the creation's whole second
        anchor = datetime.fromisoformat(schedule["anchor"])
        assert anchor == made.replace(microsecond=0)
        return anchor + timedelta(seconds=schedule["every_s"])
    if schedule["cron"] == "*/5 * * * *":  # the next whole five minutes
        floor = made.replace(minute=made.minute - made.minute % 5, second=0, microsecond=0)
        return floor + timedelta(minutes=5)
    assert schedule == {"cron": "0 3 * * *", "timezone": "Europe/Paris"}, schedule
    local = made.astimezone(ZoneInfo("Europe/Paris"))
    three = local.replace(hour=3, minute=0, second=0, microsecond=0)
    return (
        three if three > local else three.replace(day=local.day) + timedelta(days=1)
    ).astimezone(UTC)


def test_idempotent_create_returns_the_same_job(
    client: TestClient, auth: Headers, row_counts: Counts
) -> None:
    headers = {**auth(), "Idempotency-Key": "create-nightly-1"}
    first = client.post("/v1/jobs", json=job(), headers=headers)
    again = client.post("/v1/jobs", json=job(), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["job_id"] == first.json()["job_id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert row_counts()["jobs"] == 1 and row_counts()["triggers"] == 1
    conflict = client.post("/v1/jobs", json=job(priority="low"), headers=headers)
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_key"
    assert "different request body" in problems(conflict)["Idempotency-Key"]
    assert row_counts()["jobs"] == 1
    # Without a key, the same body again is a name conflict, not a second job.
    taken = client.post("/v1/jobs", json=job(), headers=auth())
    assert taken.status_code == 409 and "name" in problems(taken)
    assert row_counts()["jobs"] == 1


PAST = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
BAD_INPUT = [
    ("unknown field", job(colour="blue"), "colour", "unknown field"),
    ("server-set tenant", job(tenant="rival"), "tenant", "set by the server"),
    ("server-set version", job(version=7), "version", "set by the server"),
    ("server-set status", job(status="paused"), "status", "set by the server"),
    ("server-set job_id", job(job_id="x"), "job_id", "set by the server"),
    ("invalid cron", job(schedule={"cron": "61 * * * *"}), "schedule.cron", "not a valid cron"),
    ("cron fields", job(schedule={"cron": "* * *"}), "schedule.cron", "5 fields"),
    (
        "unknown time zone",
        job(schedule={"cron": "0 3 * * *", "timezone": "Mars/Olympus"}),
        "schedule.timezone",
        "unknown time zone",
    ),
    ("two schedules", job(schedule={"cron": "0 3 * * *", "at": PAST}), "schedule", "exactly one"),
    ("past one-off", job(schedule={"at": PAST}), "schedule.at", "in the past"),
    ("naive one-off", job(schedule={"at": "2099-01-01T00:00:00"}), "schedule.at", "offset"),
    ("retry attempts", job(retry={"max_attempts": 0}), "retry.max_attempts", "between 1 and"),
    ("retry cap", job(retry={"base_s": 10, "cap_s": 5}), "retry.cap_s", "at least base_s"),
    ("retry big cap", job(retry={"cap_s": 10**6}), "retry.cap_s", "at most"),
    ("retry field", job(retry={"tries": 3}), "retry.tries", "unknown field"),
    ("misfire kind", job(misfire={"kind": "sometimes"}), "misfire.kind", "must be one of"),
    ("timeout range", job(timeout_s=0), "timeout_s", "greater than or equal to 1"),
    ("timeout max", job(timeout_s=86_401), "timeout_s", "less than or equal to 86400"),
    ("jitter range", job(jitter_s=3601), "jitter_s", "less than or equal to 3600"),
    ("overlap value", job(overlap="sometimes"), "overlap", "'allow'"),
    ("priority value", job(priority="urgent"), "priority", "'critical'"),
    ("task type", job(task={"type": "email"}), "task", "must be one of"),
    ("http url", job(task={"type": "http", "method": "GET"}), "task.url", "required"),
    (
        "http scheme",
        job(task={"type": "http", "url": "file:///etc", "method": "GET"}),
        "task.url",
        "http",
    ),
    ("command argv", job(task={"type": "command", "argv": "ls -l"}), "task.argv", "list"),
    ("command argv items", job(task={"type": "command", "argv": [1]}), "task.argv[0]", "string"),
    ("sleep seconds", job(task={"type": "sleep"}), "task.seconds", "required"),
    ("task extra", job(task={"type": "noop", "x": 1}), "task.x", "unknown field"),
    ("missing name", {k: v for k, v in job().items() if k != "name"}, "name", "required"),
    (
        "oversized task",
        job(task={"type": "command", "argv": ["echo", "x" * 20_000]}),
        "task",
        "bytes of JSON",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_is_422_naming_the_field_and_writes_nothing(
    client: TestClient, auth: Headers, row_counts: Counts, body: dict, field: str, reason: str
) -> None:
    headers = auth()
    before = row_counts()
    response = client.post("/v1/jobs", json=body, headers={**headers, "Idempotency-Key": "k"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid"
    found = problems(response)
    assert field in found, found
    assert reason in found[field]
    assert row_counts() == before


def test_oversized_body_is_413_and_writes_nothing(
    client: TestClient, auth: Headers, row_counts: Counts
) -> None:
    headers = auth()
    before = row_counts()
    big = job(task={"type": "noop"}, name="x" * 10)
    big["padding"] = "x" * (9 * 1024 * 1024)
    response = client.post("/v1/jobs", json=big, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert row_counts() == before


def test_streamed_oversized_body_is_413_too(
    client: TestClient, auth: Headers, row_counts: Counts
) -> None:
    """No Content-Length (chunked): the limit is enforced while the body is read."""
    headers = {**auth(), "Content-Type": "application/json"}
    before = row_counts()
    chunks = (b"x" * (1024 * 1024) for _ in range(9))
    response = client.post("/v1/jobs", content=chunks, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert row_counts() == before


def test_edit_bumps_version_and_replaces_the_trigger(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    created = client.post("/v1/jobs", json=job(), headers=headers).json()
    [old] = trigger_rows(engine, created["job_id"])
    edit = {"schedule": {"cron": "30 6 * * 1", "timezone": "UTC"}, "priority": "critical"}
    response = client.patch(f"/v1/jobs/{created['job_id']}", json=edit, headers=headers)
    assert response.status_code == 200, response.text
    edited = response.json()
    assert edited["version"] == 2 and edited["priority"] == "critical"
    assert edited["schedule"] == {"cron": "30 6 * * 1", "timezone": "UTC"}
    assert edited["name"] == created["name"] and edited["task"] == created["task"]
    [new] = trigger_rows(engine, created["job_id"])
    assert new.job_version == 2 and new.fire_at != old.fire_at
    fire = new.fire_at.astimezone(UTC)
    assert (fire.weekday(), fire.hour, fire.minute) == (0, 6, 30)
    assert datetime.fromisoformat(edited["next_fire_at"]) == new.fire_at


def test_edit_refuses_bad_fields_and_changes_nothing(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    created = client.post("/v1/jobs", json=job(), headers=headers).json()
    url = f"/v1/jobs/{created['job_id']}"
    for body, field in [
        ({"version": 9}, "version"),
        ({"tenant": "rival"}, "tenant"),
        ({"schedule": {"cron": "bad"}}, "schedule.cron"),
        ({"schedule": {"at": PAST}}, "schedule.at"),
        ({"name": None}, "name"),
        ({}, "body"),
        ({"task": {"type": "sleep", "seconds": -1}}, "task.seconds"),
    ]:
        response = client.patch(url, json=body, headers=headers)
        assert response.status_code == 422, (body, response.text)
        assert field in problems(response), (body, response.text)
    other = client.post("/v1/jobs", json=job(name="other"), headers=headers).json()
    taken = client.patch(url, json={"name": "other"}, headers=headers)
    assert taken.status_code == 409 and "name" in problems(taken)
    assert client.get(url, headers=headers).json() == created
    assert [t.job_version for t in trigger_rows(engine, created["job_id"])] == [1]
    assert client.get(f"/v1/jobs/{other['job_id']}", headers=headers).json() == other


def test_pause_and_resume(client: TestClient, auth: Headers, engine: Engine) -> None:
    headers = auth()
    created = client.post("/v1/jobs", json=job(), headers=headers).json()
    url = f"/v1/jobs/{created['job_id']}"
    paused = client.patch(url, json={"paused": True}, headers=headers).json()
    assert (paused["paused"], paused["status"], paused["version"]) == (True, "paused", 2)
    [trigger] = trigger_rows(engine, created["job_id"])  # kept: the scheduler skips it
    assert trigger.job_version == 2
    assert paused["next_fire_at"] == created["next_fire_at"]
    resumed = client.patch(url, json={"paused": False}, headers=headers).json()
    assert (resumed["paused"], resumed["status"], resumed["version"]) == (False, "active", 3)
    assert [t.job_version for t in trigger_rows(engine, created["job_id"])] == [3]


def test_create_paused(client: TestClient, auth: Headers) -> None:
    created = client.post("/v1/jobs", json=job(paused=True), headers=auth()).json()
    assert created["status"] == "paused"  # paused, it still says when it would fire
    assert datetime.fromisoformat(created["next_fire_at"]) == first_fire(created)


def test_delete_removes_job_and_triggers(
    client: TestClient, auth: Headers, engine: Engine, row_counts: Counts
) -> None:
    headers = auth()
    created = client.post("/v1/jobs", json=job(), headers=headers).json()
    run = client.post(f"/v1/jobs/{created['job_id']}/runs", headers=headers).json()
    response = client.delete(f"/v1/jobs/{created['job_id']}", headers=headers)
    assert response.status_code == 204 and response.content == b""
    assert trigger_rows(engine, created["job_id"]) == []
    assert row_counts()["jobs"] == 0
    assert client.get(f"/v1/jobs/{created['job_id']}", headers=headers).status_code == 404
    assert client.delete(f"/v1/jobs/{created['job_id']}", headers=headers).status_code == 404
    # History stays; the manual run was owed but never started, and now says why.
    after = client.get(f"/v1/runs/{run['run_id']}", headers=headers).json()
    assert {k: after[k] for k in run} == {**run, "status": "cancelled", "error": "job deleted"}
    assert after["attempts"] == []  # no worker ever held it


def test_ids_that_are_not_uuids_are_422_naming_the_field(client: TestClient, auth: Headers) -> None:
    """Not an id at all is bad input (every spelling: tests/integration/test_api_ids.py);
    an id of no object of the tenant is a 404."""
    headers = auth()
    for path, field in (
        ("/v1/jobs/nope", "job_id"),
        ("/v1/jobs/nope/runs", "job_id"),
        ("/v1/runs/nope", "run_id"),
    ):
        response = client.get(path, headers=headers)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["fields"][0]["field"] == field
    missing = client.get("/v1/jobs/0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_batch_creates_thousands(client: TestClient, auth: Headers, row_counts: Counts) -> None:
    jobs = [job(name=f"batch-{i}", schedule={"every_s": 60 + i}) for i in range(5000)]
    response = client.post("/v1/jobs:batch", json={"jobs": jobs}, headers=auth())
    assert response.status_code == 201, response.text[:500]
    body = response.json()
    assert body["count"] == 5000 and len(set(body["job_ids"])) == 5000
    counts = row_counts()
    assert (counts["jobs"], counts["triggers"]) == (5000, 5000)


def test_batch_is_all_or_nothing_and_names_the_index(
    client: TestClient, auth: Headers, row_counts: Counts
) -> None:
    headers = auth()
    client.post("/v1/jobs", json=job(name="taken"), headers=headers)
    before = row_counts()
    jobs = [job(name=f"batch-{i}") for i in range(40)]
    jobs[17]["schedule"] = {"cron": "99 * * * *"}
    jobs[23]["task"] = {"type": "sleep"}
    response = client.post("/v1/jobs:batch", json={"jobs": jobs}, headers=headers)
    assert response.status_code == 422
    found = problems(response)
    assert "not a valid cron" in found["jobs[17].schedule.cron"]
    assert "required" in found["jobs[23].task.seconds"]
    assert row_counts() == before

    jobs = [job(name=f"batch-{i}") for i in range(40)]
    jobs[5]["schedule"] = {"at": PAST}
    jobs[31]["name"] = "batch-30"
    response = client.post("/v1/jobs:batch", json={"jobs": jobs}, headers=headers)
    assert response.status_code == 422
    found = problems(response)
    assert "in the past" in found["jobs[5].schedule.at"]
    assert found["jobs[31].name"] == "duplicates jobs[30].name"
    assert row_counts() == before

    jobs = [job(name=f"batch-{i}") for i in range(40)] + [job(name="taken")]
    conflict = client.post("/v1/jobs:batch", json={"jobs": jobs}, headers=headers)
    assert conflict.status_code == 409 and "jobs[40].name" in problems(conflict)
    assert row_counts() == before

    too_many = client.post("/v1/jobs:batch", json={"jobs": [job()] * 5001}, headers=headers)
    assert too_many.status_code == 422 and "jobs" in problems(too_many)
    empty = client.post("/v1/jobs:batch", json={"jobs": []}, headers=headers)
    assert empty.status_code == 422 and "jobs" in problems(empty)
    assert row_counts() == before

"""POST /v1/jobs/{id}:backfill on the real stack: the runs the schedule owed, named as
the scheduler names them, nothing new when repeated, skipped fires revived, bounded,
and published by the reaper's next pass, like manual runs."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.core.ids import run_id
from kit.reaper.reaper import Reaper
from kit.settings import Settings
from kit.transport import RunPublisher

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]


def hour_floor(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


@pytest.fixture
def hourly(client: TestClient, auth: Headers) -> str:
    body = {"name": "hourly", "schedule": {"cron": "0 * * * *"}, "task": {"type": "noop"}}
    made = client.post("/v1/jobs", json=body, headers=auth())
    assert made.status_code == 201, made.text
    return made.json()["job_id"]


def runs(engine: Engine, job_id: str) -> list:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text("SELECT * FROM runs WHERE job_id = :j ORDER BY scheduled_at"), {"j": job_id}
            )
        )


def test_backfill_creates_the_owed_runs_once(
    client: TestClient, auth: Headers, engine: Engine, hourly: str
) -> None:
    h = auth()
    end = hour_floor(datetime.now(UTC)) - timedelta(hours=1)
    start = end - timedelta(hours=4)
    body = {"from": iso(start), "to": iso(end)}
    got = client.post(f"/v1/jobs/{hourly}:backfill", json=body, headers=h)
    assert got.status_code == 202, got.text
    out = got.json()
    hours = [start + timedelta(hours=i) for i in range(4)]  # [from, to): `to` excluded
    assert (out["owed"], out["created"], out["revived"], out["existing"]) == (4, 4, 0, 0)
    assert [r["run_id"] for r in out["runs"]] == [run_id(hourly, t) for t in hours]
    made = runs(engine, hourly)
    assert [r.scheduled_at for r in made] == hours
    assert {(r.status, r.trigger_kind, r.dispatched_at) for r in made} == {
        ("pending", "backfill", None)
    }
    again = client.post(f"/v1/jobs/{hourly}:backfill", json=body, headers=h).json()
    assert (again["created"], again["existing"]) == (0, 4)
    assert len(runs(engine, hourly)) == 4
    audit = client.get(f"/v1/jobs/{hourly}/audit", headers=h).json()["entries"]
    assert [e["action"] for e in audit[:2]] == ["backfill", "backfill"]
    assert audit[1]["changes"]["created"] == 4 and audit[0]["changes"]["created"] == 0


def test_a_skipped_fire_is_revived_and_a_run_fire_is_left_alone(
    client: TestClient, auth: Headers, engine: Engine, hourly: str
) -> None:
    end = hour_floor(datetime.now(UTC)) - timedelta(hours=1)
    start = end - timedelta(hours=3)
    with engine.begin() as conn:
        for at, status, reason in (
            (start, "skipped", "paused"),
            (end - timedelta(hours=1), "succeeded", None),
        ):
            conn.execute(
                text(
                    "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status,"
                    " trigger_kind, skip_reason, finished_at)"
                    " VALUES (:r, :j, 'acme', 1, :at, :s, 'schedule', :why, now())"
                ),
                {"r": run_id(hourly, at), "j": hourly, "at": at, "s": status, "why": reason},
            )
    got = client.post(
        f"/v1/jobs/{hourly}:backfill", json={"from": iso(start), "to": iso(end)}, headers=auth()
    ).json()
    assert (got["owed"], got["created"], got["revived"], got["existing"]) == (3, 1, 1, 1)
    by_time = {r.scheduled_at: r for r in runs(engine, hourly)}
    revived = by_time[start]
    assert (revived.status, revived.trigger_kind, revived.skip_reason) == (
        "pending",
        "backfill",
        None,
    )
    assert revived.finished_at is None
    assert by_time[end - timedelta(hours=1)].status == "succeeded"


def test_an_overlap_forbid_job_gets_its_backfill_queued_one_at_a_time(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    body = {
        "name": "careful",
        "schedule": {"cron": "0 * * * *"},
        "task": {"type": "noop"},
        "overlap": "forbid",
    }
    job = client.post("/v1/jobs", json=body, headers=auth()).json()["job_id"]
    end = hour_floor(datetime.now(UTC))
    got = client.post(
        f"/v1/jobs/{job}:backfill",
        json={"from": iso(end - timedelta(hours=2)), "to": iso(end)},
        headers=auth(),
    )
    assert got.status_code == 202
    assert {r.skip_reason for r in runs(engine, job)} == {"queued"}


def test_refusals_name_the_field(
    client: TestClient, auth: Headers, hourly: str, settings: Settings, engine: Engine
) -> None:
    h = auth()
    now = datetime.now(UTC)
    cases = [
        ({"from": iso(now - timedelta(hours=2)), "to": iso(now + timedelta(hours=1))}, "to"),
        ({"from": iso(now - timedelta(hours=1)), "to": iso(now - timedelta(hours=2))}, "to"),
        ({"from": "2030-01-01T00:00:00", "to": iso(now)}, "from"),
        ({"from": "yesterday", "to": iso(now)}, "from"),
        ({"from": iso(now - timedelta(days=60)), "to": iso(now)}, "from"),  # past retention
        ({"to": iso(now)}, "from"),
        ({"from": iso(now - timedelta(hours=2)), "to": iso(now), "extra": 1}, "extra"),
    ]
    for body, field in cases:
        got = client.post(f"/v1/jobs/{hourly}:backfill", json=body, headers=h)
        assert got.status_code == 422, (body, got.text)
        assert got.json()["error"]["fields"][0]["field"] == field, got.text
    assert runs(engine, hourly) == []
    ok = {"from": iso(now - timedelta(hours=3)), "to": iso(now - timedelta(hours=1))}
    assert (
        client.post(f"/v1/jobs/{hourly}:backfill", json=ok, headers=auth("globex")).status_code
        == 404
    )
    assert client.post(f"/v1/jobs/{uuid.uuid4()}:backfill", json=ok, headers=h).status_code == 404
    reader = auth(scopes=("read",))
    assert client.post(f"/v1/jobs/{hourly}:backfill", json=ok, headers=reader).status_code == 403
    # the bound is a setting
    small = Settings(**{**settings.model_dump(), "max_backfill_runs": 1})
    with TestClient(create_app(small, engine)) as tight:
        got = tight.post(f"/v1/jobs/{hourly}:backfill", json=ok, headers=h)
        assert got.status_code == 422 and "more than 1 fires" in got.text


def test_backfilled_runs_are_published_by_the_reaper(
    client: TestClient, auth: Headers, engine: Engine, hourly: str, publisher: RunPublisher
) -> None:
    end = hour_floor(datetime.now(UTC))
    body = {"from": iso(end - timedelta(hours=3)), "to": iso(end)}
    assert client.post(f"/v1/jobs/{hourly}:backfill", json=body, headers=auth()).status_code == 202
    counts = Reaper(engine, publisher, unclaimed_grace_ms=60_000).tick()  # no grace waited
    assert counts.republished == 3
    assert {(r.status, r.dispatched_at is not None) for r in runs(engine, hourly)} == {
        ("pending", True)
    }


def test_a_deep_body_is_422_as_on_every_other_route(
    client: TestClient, auth: Headers, hourly: str, row_counts: Callable[[], dict[str, int]]
) -> None:
    """The backfill route parses its body as strict JSON like the others (kit.api.body):
    100,000 nested arrays are a 422 naming the depth, not a 400."""
    headers = {**auth(), "Content-Type": "application/json"}
    before = row_counts()
    got = client.post(
        f"/v1/jobs/{hourly}:backfill", content=b"[" * 100_000 + b"]" * 100_000, headers=headers
    )
    assert got.status_code == 422, got.text
    assert got.json()["error"]["fields"] == [
        {"field": "body", "reason": "nests deeper than 64 levels"}
    ]
    assert row_counts() == before


def test_a_range_older_than_the_run_retention_is_refused(
    auth: Headers, hourly: str, settings: Settings, engine: Engine
) -> None:
    """Runs scheduled before the retention would be written, run, then expired by the
    next maintenance pass: refused with the retention named, nothing written."""
    h = auth()
    now = datetime.now(UTC)
    kept = Settings(**{**settings.model_dump(), "run_retention_s": 2 * 86_400})
    with TestClient(create_app(kept, engine)) as client:
        old = {"from": iso(hour_floor(now) - timedelta(days=4)), "to": iso(hour_floor(now))}
        got = client.post(f"/v1/jobs/{hourly}:backfill", json=old, headers=h)
        assert got.status_code == 422, got.text
        [problem] = got.json()["error"]["fields"]
        assert problem["field"] == "from" and "kept 2 days" in problem["reason"], problem
        assert "CRONFLEET_RUN_RETENTION_S" in problem["reason"]
        assert runs(engine, hourly) == []
        audit = client.get(f"/v1/jobs/{hourly}/audit", headers=h).json()["entries"]
        assert "backfill" not in [e["action"] for e in audit]
        recent = {"from": iso(hour_floor(now) - timedelta(hours=3)), "to": iso(hour_floor(now))}
        assert client.post(f"/v1/jobs/{hourly}:backfill", json=recent, headers=h).status_code == 202


def test_a_paused_job_is_refused_with_409_and_backfills_once_resumed(
    client: TestClient, auth: Headers, hourly: str, engine: Engine
) -> None:
    """A paused job runs nothing of its schedule, and a backfill is its schedule's runs:
    409 `job_paused`, nothing written. Resumed, the same backfill is made."""
    h = auth()
    end = hour_floor(datetime.now(UTC)) - timedelta(hours=1)
    body = {"from": iso(end - timedelta(hours=3)), "to": iso(end)}
    assert client.patch(f"/v1/jobs/{hourly}", json={"paused": True}, headers=h).status_code == 200
    got = client.post(f"/v1/jobs/{hourly}:backfill", json=body, headers=h)
    assert got.status_code == 409, got.text
    assert got.json()["error"]["code"] == "job_paused"
    assert "paused" in got.json()["error"]["message"]
    assert runs(engine, hourly) == []
    audit = client.get(f"/v1/jobs/{hourly}/audit", headers=h).json()["entries"]
    assert "backfill" not in [e["action"] for e in audit]
    assert client.patch(f"/v1/jobs/{hourly}", json={"paused": False}, headers=h).status_code == 200
    again = client.post(f"/v1/jobs/{hourly}:backfill", json=body, headers=h)
    assert again.status_code == 202 and again.json()["created"] == 3, again.text

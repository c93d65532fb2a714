"""GET /v1/jobs on the real PostgreSQL: filters, name order, cursor paging, the count,
tenancy, and the plans the listing's indexes are there for."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.core.ids import run_id
from kit.core.schedule import parse_schedule
from kit.store import jobs_list
from kit.store.jobs import JobSpec, jobs_create_batch
from kit.store.jobs_list import prefix_upper

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]


def job(name: str, **extra: object) -> dict:
    body = {"name": name, "schedule": {"every_s": 3600}, "task": {"type": "noop"}}
    body.update(extra)
    return body


@pytest.fixture
def jobs(client: TestClient, auth: Headers) -> dict[str, str]:
    headers = auth()
    bodies = [
        job("nightly-report", priority="high", task={"type": "sleep", "seconds": 1}),
        job("nightly-backup", paused=True),
        job("Nightly-upper"),
        job("hourly-sync", priority="high"),
        job("émoji-✓"),
        job("nightly-zz", task={"type": "http", "url": "https://example.org/", "method": "GET"}),
    ]
    ids = {}
    for body in bodies:
        made = client.post("/v1/jobs", json=body, headers=headers)
        assert made.status_code == 201, made.text
        ids[body["name"]] = made.json()["job_id"]
    return ids


def names(client: TestClient, headers: dict[str, str], **params: object) -> list[str]:
    got = client.get("/v1/jobs", params=params, headers=headers)
    assert got.status_code == 200, got.text
    return [j["name"] for j in got.json()["jobs"]]


def test_filters_by_name_prefix_paused_task_type_and_priority(
    client: TestClient, auth: Headers, jobs: dict[str, str]
) -> None:
    h = auth()
    assert names(client, h) == [  # byte order: upper case first, é after z
        "Nightly-upper",
        "hourly-sync",
        "nightly-backup",
        "nightly-report",
        "nightly-zz",
        "émoji-✓",
    ]
    assert names(client, h, name_prefix="nightly-") == [
        "nightly-backup",
        "nightly-report",
        "nightly-zz",
    ]
    assert names(client, h, name_prefix="é") == ["émoji-✓"]
    assert names(client, h, paused="true") == ["nightly-backup"]
    assert "nightly-backup" not in names(client, h, paused="false")
    assert names(client, h, task_type="sleep") == ["nightly-report"]
    assert names(client, h, priority="high") == ["hourly-sync", "nightly-report"]
    assert names(client, h, priority="high", name_prefix="n", task_type="sleep") == [
        "nightly-report"
    ]
    page = client.get("/v1/jobs", params={"name_prefix": "nightly-"}, headers=h).json()
    assert page["count"] == 3 and page["count_exact"] is True
    first = page["jobs"][0]
    assert first["job_id"] == jobs["nightly-backup"] and first["status"] == "paused"
    assert first["last_run"] is None


def test_last_run_status_filter_and_never_ran(
    client: TestClient, auth: Headers, jobs: dict[str, str], engine: Engine
) -> None:
    h = auth()
    now = datetime.now(UTC).replace(microsecond=0)
    with engine.begin() as conn:
        for name, status, ago in (
            ("hourly-sync", "succeeded", 120),
            ("hourly-sync", "dead", 60),  # newer: the last run
            ("nightly-zz", "succeeded", 30),
            ("nightly-zz", "pending", -3600),  # in the future: not the last run yet
        ):
            at = now - timedelta(seconds=ago)
            conn.execute(
                text(
                    "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status,"
                    " trigger_kind) VALUES (:r, :j, 'acme', 1, :at, :s, 'schedule')"
                ),
                {"r": run_id(jobs[name], at), "j": jobs[name], "at": at, "s": status},
            )
    assert names(client, h, last_status="dead") == ["hourly-sync"]
    assert names(client, h, last_status="succeeded") == ["nightly-zz"]
    never = names(client, h, last_status="none")
    assert "hourly-sync" not in never and "nightly-zz" not in never and len(never) == 4
    listed = client.get("/v1/jobs", params={"name_prefix": "hourly"}, headers=h).json()
    assert listed["jobs"][0]["last_run"]["status"] == "dead"


def test_cursor_pages_through_every_job_once(
    client: TestClient, auth: Headers, jobs: dict[str, str]
) -> None:
    h = auth()
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/jobs", params=params, headers=h).json()
        seen += [j["name"] for j in page["jobs"]]
        pages += 1
        assert page["count"] == 6
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == names(client, h) and len(set(seen)) == 6


def test_tenancy_and_bad_input(client: TestClient, auth: Headers, jobs: dict[str, str]) -> None:
    assert names(client, auth("globex")) == []
    assert client.get("/v1/jobs", headers=auth("globex")).json()["count"] == 0
    h = auth()
    for params, field in (
        ({"priority": "urgent"}, "priority"),
        ({"last_status": "fine"}, "last_status"),
        ({"cursor": "nonsense"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"paused": "maybe"}, "paused"),
    ):
        got = client.get("/v1/jobs", params=params, headers=h)
        assert got.status_code == 422, (params, got.text)
        assert got.json()["error"]["fields"][0]["field"] == field
    assert client.get("/v1/jobs").status_code == 401


def test_prefix_upper_bound_is_the_next_string_in_code_point_order() -> None:
    assert prefix_upper("abc") == "abd"
    assert prefix_upper("a\U0010ffff") == "b"
    assert prefix_upper("\U0010ffff") is None
    assert prefix_upper("\ud7ff") == "\ue000"


def test_the_count_stops_at_its_cap(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_list, "COUNT_CAP", 5)
    now = datetime.now(UTC)
    spec = JobSpec(
        "x",
        parse_schedule({"every_s": 60}, now=now),
        {"type": "noop"},
        {"max_attempts": 1},
        {"kind": "run_once", "deadline_s": 60},
    )
    jobs_create_batch(
        engine, "acme", [JobSpec(**{**spec.__dict__, "name": f"j{i}"}) for i in range(8)]
    )
    page = jobs_list.jobs_list(engine, "acme", limit=3)
    assert (page.count, page.count_exact) == (5, False) and len(page.jobs) == 3


def plan(engine: Engine, sql: str, **params: object) -> str:
    with engine.connect() as conn:
        conn.execute(text("SET enable_seqscan = off"))  # a tiny table: ask what it could use
        rows = conn.execute(text("EXPLAIN " + sql), params).scalars()
        return "\n".join(rows)


def test_each_filter_has_an_index_that_keeps_name_order(engine: Engine) -> None:
    base = "SELECT job_id FROM jobs WHERE tenant = 'acme' {} ORDER BY name LIMIT 51"
    assert "uq_jobs_tenant_name" in plan(engine, base.format("AND name >= 'ab' AND name < 'ac'"))
    assert "ix_jobs_list_paused" in plan(engine, base.format("AND paused"))
    assert "ix_jobs_list_priority" in plan(engine, base.format("AND priority = 'high'"))
    assert "ix_jobs_list_task_type" in plan(
        engine, base.format("AND task_spec ->> 'type' = 'http'")
    )


def test_odd_input_to_the_operate_routes_is_a_422_never_a_500(
    client: TestClient, auth: Headers, jobs: dict[str, str]
) -> None:
    """What a fuzzer sends: control characters, numbers out of range, the ends of time."""
    h = auth()
    job = jobs["hourly-sync"]
    import base64

    def cursor(raw: str) -> str:
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    preview = "/v1/next-fires"
    cases = [
        ("GET", "/v1/jobs", {"name_prefix": "a\x00b"}, "name_prefix"),
        ("GET", "/v1/jobs", {"cursor": cursor("n:a\x00")}, "cursor"),
        ("GET", f"/v1/jobs/{job}/audit", {"cursor": cursor("a:99999999999999999999")}, "cursor"),
        ("GET", f"/v1/jobs/{job}/audit", {"cursor": cursor("a:-1")}, "cursor"),
        ("GET", f"/v1/jobs/{job}/explain", {"from": "0001-01-01T00:00:00Z"}, "from"),
        ("GET", f"/v1/jobs/{job}/explain", {"to": "9999-12-31T23:59:59Z"}, "to"),
        ("GET", preview, {"cron": "* * * * *", "after": "9999-12-31T23:59:00Z"}, "after"),
        ("GET", preview, {"every_s": 1, "anchor": "9999-12-31T23:59:59Z"}, "anchor"),
        ("GET", preview, {"cron": "0 * * * *", "timezone": "../" * 2 + "etc/passwd"}, "timezone"),
        ("GET", preview, {"cron": "0 * * * *", "timezone": "Europe/Paris\x00"}, "timezone"),
    ]
    for method, path, params, field in cases:
        got = client.request(method, path, params=params, headers=h)
        assert got.status_code == 422, (path, params, got.status_code, got.text)
        assert got.json()["error"]["fields"][0]["field"] == field, (params, got.text)
    body = {"from": "0001-01-01T00:00:00Z", "to": "2020-01-01T00:00:00Z"}
    got = client.post(f"/v1/jobs/{job}:backfill", json=body, headers=h)
    assert got.status_code == 422 and got.json()["error"]["fields"][0]["field"] == "from"

"""Run history and run-now: newest first, keyset pages that are complete and ordered,
a status filter, and manual runs that the dispatcher will publish."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, update

from kit.core.ids import run_id
from kit.store.runs import run_now
from kit.store.schema import runs

pytestmark = pytest.mark.integration

Headers = Callable[..., dict[str, str]]
JOB = {"name": "sync", "schedule": {"every_s": 60}, "task": {"type": "noop"}}
T0 = datetime(2030, 3, 1, 12, 0, tzinfo=UTC)


def make_job(client: TestClient, headers: dict[str, str]) -> str:
    response = client.post("/v1/jobs", json=JOB, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["job_id"]


def all_pages(client: TestClient, headers: dict[str, str], url: str) -> list[list[dict]]:
    pages, cursor = [], None
    while True:
        page_url = f"{url}&cursor={cursor}" if cursor else url
        body = client.get(page_url, headers=headers).json()
        pages.append(body["runs"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def test_pages_are_newest_first_complete_and_disjoint(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    job_id = make_job(client, headers)
    # 23 runs, scheduled a minute apart, plus two in the same second (tie on time is
    # broken by run id, so the cursor must carry both).
    times = [T0 + timedelta(minutes=i) for i in range(23)]
    times += [T0 + timedelta(minutes=5, milliseconds=1), T0 + timedelta(minutes=5, milliseconds=2)]
    for at in times:
        run_now(engine, "acme", job_id, now=at)
    with engine.begin() as conn:  # two runs share one scheduled time exactly
        conn.execute(
            update(runs)
            .where(runs.c.run_id == run_id(job_id, times[-1]))
            .values(scheduled_at=times[-2])
        )
    pages = all_pages(client, headers, f"/v1/jobs/{job_id}/runs?limit=4")
    assert [len(p) for p in pages] == [4, 4, 4, 4, 4, 4, 1]
    listed = [r for page in pages for r in page]
    assert len({r["run_id"] for r in listed}) == 25
    keys = [(datetime.fromisoformat(r["scheduled_at"]), r["run_id"]) for r in listed]
    assert keys == sorted(keys, reverse=True)
    assert listed[0]["scheduled_at"] == (T0 + timedelta(minutes=22)).isoformat().replace(
        "+00:00", "Z"
    )
    default = client.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()
    assert len(default["runs"]) == 25 and default["next_cursor"] is None


def test_status_filter_pages_only_matching_runs(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    job_id = make_job(client, headers)
    for i in range(10):
        run_now(engine, "acme", job_id, now=T0 + timedelta(seconds=i))
    with engine.begin() as conn:
        conn.execute(
            update(runs)
            .where(runs.c.scheduled_at < T0 + timedelta(seconds=6))
            .values(status="succeeded")
        )
    url = f"/v1/jobs/{job_id}/runs?status=succeeded&limit=4"
    pages = all_pages(client, headers, url)
    assert [len(p) for p in pages] == [4, 2]
    assert {r["status"] for page in pages for r in page} == {"succeeded"}
    pending = client.get(f"/v1/jobs/{job_id}/runs?status=pending", headers=headers).json()
    assert len(pending["runs"]) == 4


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=exploded", "status"),
        ("cursor=bm9wZQ", "cursor"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
    ],
)
def test_bad_list_parameters_are_422(
    client: TestClient, auth: Headers, query: str, field: str
) -> None:
    headers = auth()
    job_id = make_job(client, headers)
    response = client.get(f"/v1/jobs/{job_id}/runs?{query}", headers=headers)
    assert response.status_code == 422
    assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_run_now_creates_a_pending_manual_run(client: TestClient, auth: Headers) -> None:
    headers = auth()
    job_id = make_job(client, headers)
    response = client.post(f"/v1/jobs/{job_id}/runs", headers=headers)
    assert response.status_code == 202, response.text
    run = response.json()
    assert (run["job_id"], run["status"], run["trigger"], run["attempt"]) == (
        job_id,
        "pending",
        "manual",
        1,
    )
    scheduled = datetime.fromisoformat(run["scheduled_at"])
    assert run["run_id"] == run_id(job_id, scheduled)  # deterministic: job and time
    assert run["dispatched_at"] is None
    assert client.get(f"/v1/runs/{run['run_id']}", headers=headers).json() == run
    listed = client.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()["runs"]
    assert [r["run_id"] for r in listed] == [run["run_id"]]


def test_run_now_on_unknown_job_is_404_and_writes_nothing(
    client: TestClient, auth: Headers, row_counts: Callable[[], dict[str, int]]
) -> None:
    headers = auth()
    before = row_counts()
    response = client.post("/v1/jobs/00000000-0000-0000-0000-000000000000/runs", headers=headers)
    assert response.status_code == 404
    assert row_counts() == before

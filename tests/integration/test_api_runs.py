"""Run history and run-now: newest first, keyset pages that are complete and ordered,
a status filter, and manual runs that the dispatcher will publish."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select, update

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
    detail = client.get(f"/v1/runs/{run['run_id']}", headers=headers).json()
    assert {k: detail[k] for k in run} == run  # the run, with its attempts and key besides
    assert detail["idempotency_key"] == run["run_id"] and detail["fire"] is None
    [attempt] = detail["attempts"]
    assert (attempt["outcome"], attempt["claimed_at"], attempt["started_at"]) == (
        "pending",
        None,
        None,
    )
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


def _wait_for_db_clock_past(engine: Engine, instant: datetime, timeout_s: float = 5.0) -> None:
    """Until the database clock is past `instant` (run-now ids are per millisecond)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with engine.connect() as conn:
            now = conn.execute(select(func.now())).scalar_one()
        if now > instant + timedelta(milliseconds=2):
            return
        assert time.monotonic() < deadline, "the database clock did not move"


def test_run_now_with_an_idempotency_key_returns_the_same_run(
    client: TestClient,
    auth: Headers,
    engine: Engine,
    row_counts: Callable[[], dict[str, int]],
) -> None:
    """A client that retries run-now after a timeout gets its first run back, not a
    second run under another id (issue 7, item 8)."""
    headers = auth()
    job_id = make_job(client, headers)
    keyed = {**headers, "Idempotency-Key": "run-now-1"}
    first = client.post(f"/v1/jobs/{job_id}/runs", headers=keyed)
    assert first.status_code == 202, first.text
    _wait_for_db_clock_past(engine, datetime.fromisoformat(first.json()["scheduled_at"]))
    again = client.post(f"/v1/jobs/{job_id}/runs", headers=keyed)
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["run_id"] == first.json()["run_id"]
    runs_of_job = client.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()["runs"]
    assert [r["run_id"] for r in runs_of_job] == [first.json()["run_id"]]

    # The same key for another request (another job, or a job create) is a 409 that
    # writes nothing.
    other_job = client.post("/v1/jobs", json={**JOB, "name": "other"}, headers=headers)
    before = row_counts()
    conflict = client.post(f"/v1/jobs/{other_job.json()['job_id']}/runs", headers=keyed)
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["error"]["code"] == "idempotency_key"
    create = client.post("/v1/jobs", json={**JOB, "name": "third"}, headers=keyed)
    assert create.status_code == 409, create.text
    assert row_counts() == before

    # Keys are per tenant: another tenant's identical key is its own.
    rival = auth("rival")
    rival_job = make_job(client, rival)
    own = client.post(
        f"/v1/jobs/{rival_job}/runs", headers={**rival, "Idempotency-Key": "run-now-1"}
    )
    assert own.status_code == 202, own.text

    # Without a key, each call is a new manual run.
    _wait_for_db_clock_past(engine, datetime.fromisoformat(first.json()["scheduled_at"]))
    fresh = client.post(f"/v1/jobs/{job_id}/runs", headers=headers)
    assert fresh.status_code == 202 and fresh.json()["run_id"] != first.json()["run_id"]


def test_concurrent_run_now_with_one_key_makes_one_run(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    job_id = make_job(client, headers)
    barrier = threading.Barrier(8)
    made: list[str] = []

    def call() -> None:
        barrier.wait()
        run, _ = run_now(engine, "acme", job_id, idempotency_key="same")
        made.append(run.run_id)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(made) == 8 and len(set(made)) == 1
    listed = client.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()["runs"]
    assert [r["run_id"] for r in listed] == made[:1]

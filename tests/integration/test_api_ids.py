"""Ids are accepted in their canonical form only: any other spelling of a UUID is a 422
naming the field, on every route that takes an id, with nothing written, nothing echoed
and nothing logged (issue 27, item 4).

`uuid.UUID()` takes `urn:uuid:...`, braces and hyphens anywhere; PostgreSQL refuses some
of those. Each spelling here is of an id that exists (the job's, its run's, its dead
letter's, a queued task's), so a route that normalised the spelling and looked it up
would answer 200, and one that passed it to PostgreSQL would answer 500.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from kit.api.app import create_app
from kit.api.ids import UUID_REASON
from kit.settings import Settings
from kit.store.claims import Claim, run_finish_failed, runs_claim
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration

Headers = Callable[..., dict[str, str]]
Counts = Callable[[], dict[str, int]]
T0 = datetime(2030, 1, 1, tzinfo=UTC)
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def spellings(canonical: str) -> dict[str, str]:
    """What uuid.UUID() (or a lax reader) takes for this id, but is not its canonical form."""
    bare = canonical.replace("-", "")
    return {
        "urn": f"urn:uuid:{canonical}",
        "braces": "{" + canonical + "}",
        "no hyphens": bare,
        "odd hyphens": "-".join(bare[i : i + 4] for i in range(0, 32, 4)),
        "trailing newline": canonical + "\n",
        "leading space": " " + canonical,
        "unicode digits": canonical.translate(ARABIC_INDIC),
        "5,000 characters": canonical * 139,
    }


@pytest.fixture
def lax_client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    """A client that answers a server error as a 500 instead of raising it in the test:
    the status is what a caller would see."""
    with TestClient(create_app(settings, engine), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def ids(lax_client: TestClient, engine: Engine, auth: Headers) -> dict[str, str]:
    headers = auth("acme", ("read", "write"))
    job_id = make_job(engine, retry={"max_attempts": 1})
    dead = make_run(engine, job_id, scheduled_at=T0)
    [claimed] = runs_claim(engine, [Claim(dead, 1)], "w", 30_000)
    run_finish_failed(engine, dead, claimed.lease_token, "failed", random.Random(0))
    task = lax_client.post("/v1/queues/q/tasks", json={"payload": 1}, headers=headers)
    assert task.status_code == 201, task.text
    return {"job_id": job_id, "run_id": dead, "task_id": task.json()["task_id"]}


# (method, path with {id}, the id kind, body, field named in the answer)
ID_ROUTES: list[tuple[str, str, str, Any, str]] = [
    ("GET", "/v1/jobs/{id}", "job_id", None, "job_id"),
    ("PATCH", "/v1/jobs/{id}", "job_id", {"paused": True}, "job_id"),
    ("DELETE", "/v1/jobs/{id}", "job_id", None, "job_id"),
    ("GET", "/v1/jobs/{id}/runs", "job_id", None, "job_id"),
    ("POST", "/v1/jobs/{id}/runs", "job_id", None, "job_id"),
    ("GET", "/v1/jobs/{id}/audit", "job_id", None, "job_id"),
    ("GET", "/v1/jobs/{id}/explain", "job_id", None, "job_id"),
    (
        "POST",
        "/v1/jobs/{id}:backfill",
        "job_id",
        {"from": "2029-12-31T00:00:00Z", "to": "2030-01-01T00:00:00Z"},
        "job_id",
    ),
    ("GET", "/v1/runs/{id}", "run_id", None, "run_id"),
    ("POST", "/v1/runs/{id}:cancel", "run_id", None, "run_id"),
    ("GET", "/v1/dead-letters/{id}", "run_id", None, "run_id"),
    ("POST", "/v1/dead-letters/{id}:replay", "run_id", None, "run_id"),
    ("GET", "/v1/dead-letters?job_id={id}", "job_id", None, "job_id"),
    ("POST", "/v1/dead-letters:replay", "job_id", {"job_id": "{id}"}, "job_id"),
    ("POST", "/v1/tasks/{id}/ack", "task_id", {"lease_token": "t"}, "task_id"),
    ("POST", "/v1/tasks/{id}/nack", "task_id", {"lease_token": "t"}, "task_id"),
    (
        "POST",
        "/v1/tasks/{id}/heartbeat",
        "task_id",
        {"lease_token": "t", "extend_sec": 10},
        "task_id",
    ),
    (
        "POST",
        "/v1/tasks:ack",
        "task_id",
        {"acks": [{"task_id": "{id}", "lease_token": "t"}]},
        "acks[0].task_id",
    ),
]


def _fill(body: Any, value: str) -> Any:
    if isinstance(body, dict):
        return {k: _fill(v, value) for k, v in body.items()}
    if isinstance(body, list):
        return [_fill(v, value) for v in body]
    return value if body == "{id}" else body


def _call(client: TestClient, method: str, path: str, value: str, body: Any, headers: Any) -> Any:
    from urllib.parse import quote

    url = path.replace("{id}", quote(value, safe=""))
    json_body = _fill(body, value) if body is not None else None
    return client.request(method, url, json=json_body, headers=headers)


@pytest.mark.parametrize(("method", "path", "kind", "body", "field"), ID_ROUTES)
def test_ids_in_any_spelling_but_the_canonical_one_are_422(
    lax_client: TestClient,
    ids: dict[str, str],
    auth: Headers,
    row_counts: Counts,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    kind: str,
    body: Any,
    field: str,
) -> None:
    headers = auth("acme", ("read", "write"))
    before = row_counts()
    for name, value in spellings(ids[kind]).items():
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            response = _call(lax_client, method, path, value, body, headers)
        assert response.status_code == 422, (name, response.status_code, response.text[:300])
        fields = {f["field"]: f["reason"] for f in response.json()["error"]["fields"]}
        assert fields == {field: UUID_REASON}, (name, fields)
        assert value.strip() not in response.text, (name, "the id was echoed")
        server = [r for r in caplog.records if not r.name.startswith("httpx")]  # not the client's
        logged = [r.getMessage() for r in server if value.strip() in r.getMessage()]
        assert not logged and not any(r.exc_info for r in server), (name, logged)
    assert row_counts() == before, "a refused id wrote something"


def test_an_id_in_capitals_is_the_same_id_and_is_answered_in_lower_case(
    lax_client: TestClient, ids: dict[str, str], auth: Headers
) -> None:
    headers = auth("acme", ("read", "write"))
    job = lax_client.get(f"/v1/jobs/{ids['job_id'].upper()}", headers=headers)
    assert job.status_code == 200, job.text
    assert job.json()["job_id"] == ids["job_id"]
    run = lax_client.get(f"/v1/dead-letters/{ids['run_id'].upper()}", headers=headers)
    assert run.status_code == 200, run.text
    assert run.json()["run_id"] == ids["run_id"]
    nack = lax_client.post(
        f"/v1/tasks/{ids['task_id'].upper()}/nack", json={"lease_token": "t"}, headers=headers
    )
    assert nack.status_code == 409, nack.text  # found (not leased): refused for its lease
    acks = lax_client.post(
        "/v1/tasks:ack",
        json={"acks": [{"task_id": ids["task_id"].upper(), "lease_token": "t"}]},
        headers=headers,
    )
    assert acks.status_code == 200, acks.text
    assert acks.json()["results"][0]["task_id"] == ids["task_id"], "not echoed as sent"

"""Bad input anywhere in the API answers 422 in the one error shape, naming the field and
the reason, and writes nothing; never a 500 (issue 7, items 18 to 21).

Bodies are sent as raw bytes: the point is what a client can put on the wire (`NaN`,
`Infinity`, `\\u0000`, an integer of 4,300 digits), which a JSON encoder would refuse to
produce.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration

Headers = Callable[..., dict[str, str]]
Counts = Callable[[], dict[str, int]]

JOB = (
    '{"name": "n", "schedule": %(schedule)s, "task": %(task)s, "retry": %(retry)s,'
    ' "misfire": %(misfire)s, "timeout_s": %(timeout)s}'
)
HTTP_TASK = '{"type": "http", "url": "https://example.org/", "method": "POST"}'
DEFAULTS = {
    "schedule": '{"cron": "0 3 * * *"}',
    "task": '{"type": "noop"}',
    "retry": '{"max_attempts": 3}',
    "misfire": '{"kind": "run_all"}',
    "timeout": "60",
}
HUGE_INT = "1" * 4300


def job(**parts: str) -> str:
    return JOB % {**DEFAULTS, **parts}


def problems(response: Any) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "fields"}, body
    assert body["error"]["code"] == "invalid", body
    return {f["field"]: f["reason"] for f in body["error"]["fields"]}


JOB_CASES = [
    # item 18: a cron expression and a schedule have a size limit
    (
        "huge cron",
        job(schedule='{"cron": "' + "1," * 1_000_000 + '1 * * * *"}'),
        "schedule.cron",
        "characters",
    ),
    (
        "long cron",
        job(schedule='{"cron": "' + ",".join(["1"] * 200) + ' * * * *"}'),
        "schedule.cron",
        "characters",
    ),
    (
        "huge time zone",
        job(schedule='{"cron": "0 3 * * *", "timezone": "' + "a" * 100_000 + '"}'),
        "schedule.timezone",
        "characters",
    ),
    # item 19: a cron expression that never fires
    ("never fires", job(schedule='{"cron": "0 0 31 2 *"}'), "schedule.cron", "never fires"),
    ("never fires 30 Feb", job(schedule='{"cron": "0 0 30 2 *"}'), "schedule.cron", "never fires"),
    # item 20: NaN, Infinity and NUL in job fields
    ("NaN retry", job(retry='{"base_s": NaN}'), "retry.base_s", "finite"),
    ("Infinity retry cap", job(retry='{"cap_s": Infinity}'), "retry.cap_s", "finite"),
    (
        "-Infinity misfire",
        job(misfire='{"kind": "skip_late", "deadline_s": -Infinity}'),
        "misfire.deadline_s",
        "finite",
    ),
    ("NaN sleep", job(task='{"type": "sleep", "seconds": NaN}'), "task.seconds", "finite"),
    (
        "NUL in argv",
        job(task='{"type": "command", "argv": ["echo", "a\\u0000b"]}'),
        "task.argv[1]",
        "NUL",
    ),
    (
        "NUL in env",
        job(task='{"type": "command", "argv": ["true"], "env": {"A": "\\u0000"}}'),
        "task.env.A",
        "NUL",
    ),
    (
        "NUL in env name",
        job(task='{"type": "command", "argv": ["true"], "env": {"\\u0000": "x"}}'),
        "task.env",
        "NUL",
    ),
    (
        "NUL in header",
        job(task=HTTP_TASK[:-1] + ', "headers": {"X-A": "\\u0000"}}'),
        "task.headers.X-A",
        "NUL",
    ),
    ("NUL in body", job(task=HTTP_TASK[:-1] + ', "body": "a\\u0000"}'), "task.body", "NUL"),
    (
        "NUL in url",
        job(task='{"type": "http", "url": "https://e.org/\\u0000", "method": "GET"}'),
        "task.url",
        "NUL",
    ),
    (
        "NUL in time zone",
        job(schedule='{"cron": "0 3 * * *", "timezone": "Europe/\\u0000"}'),
        "schedule.timezone",
        "NUL",
    ),
    # item 21: far instants and huge integers
    (
        "year 1 with offset",
        job(schedule='{"at": "0001-01-01T00:00+01:00"}'),
        "schedule.at",
        "between",
    ),
    (
        "year 9999 with offset",
        job(schedule='{"at": "9999-12-31T23:30:00-01:00"}'),
        "schedule.at",
        "between",
    ),
    (
        "year 1 anchor",
        job(schedule='{"every_s": 60, "anchor": "0001-01-01T00:00+01:00"}'),
        "schedule.anchor",
        "between",
    ),
    ("4300-digit timeout", job(timeout=HUGE_INT), "timeout_s", "digits"),
    (
        "4300-digit retry",
        job(retry='{"max_attempts": ' + HUGE_INT + "}"),
        "retry.max_attempts",
        "digits",
    ),
    (
        "4300-digit interval",
        job(schedule='{"every_s": ' + HUGE_INT + "}"),
        "schedule.every_s",
        "digits",
    ),
]


@pytest.mark.parametrize(
    ("raw", "field", "reason"), [c[1:] for c in JOB_CASES], ids=[c[0] for c in JOB_CASES]
)
def test_job_create_refuses_with_422(
    client: TestClient, auth: Headers, row_counts: Counts, raw: str, field: str, reason: str
) -> None:
    headers = {**auth(), "Content-Type": "application/json", "Idempotency-Key": "k1"}
    before = row_counts()
    response = client.post("/v1/jobs", content=raw.encode(), headers=headers)
    assert response.status_code == 422, response.text[:500]
    found = problems(response)
    assert field in found, found
    assert reason in found[field], found
    assert row_counts() == before
    batch = '{"jobs": [' + job() + ", " + raw.replace('"name": "n"', '"name": "m"') + "]}"
    response = client.post("/v1/jobs:batch", content=batch.encode(), headers=headers)
    assert response.status_code == 422, response.text[:500]
    assert f"jobs[1].{field}" in problems(response), problems(response)
    assert row_counts() == before


def test_job_edit_refuses_nan_and_nul_with_422(
    client: TestClient, auth: Headers, row_counts: Counts
) -> None:
    headers = {**auth(), "Content-Type": "application/json"}
    created = client.post("/v1/jobs", content=job().encode(), headers=headers)
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    before = row_counts()
    for raw, field in (
        ('{"retry": {"base_s": NaN}}', "retry.base_s"),
        ('{"task": {"type": "command", "argv": ["\\u0000"]}}', "task.argv[0]"),
        ('{"schedule": {"at": "0001-01-01T00:00+01:00"}}', "schedule.at"),
        ('{"timeout_s": ' + HUGE_INT + "}", "timeout_s"),
        ('{"schedule": {"cron": "0 0 31 2 *"}}', "schedule.cron"),
    ):
        response = client.patch(f"/v1/jobs/{job_id}", content=raw.encode(), headers=headers)
        assert response.status_code == 422, (raw[:80], response.text[:300])
        assert field in problems(response), (raw[:80], problems(response))
    assert row_counts() == before
    assert client.get(f"/v1/jobs/{job_id}", headers=headers).json()["version"] == 1


QUEUE_CASES = [
    ('{"payload": NaN}', "payload", "finite"),
    ('{"payload": {"a": [1, Infinity]}}', "payload.a[1]", "finite"),
    ('{"payload": "x\\u0000"}', "payload", "NUL"),
    ('{"payload": {"k\\u0000": 1}}', "payload", "NUL"),
    ('{"payload": {"n": ' + HUGE_INT + "}}", "payload.n", "digits"),
    ('{"payload": 1, "delay_sec": ' + HUGE_INT + "}", "delay_sec", "digits"),
]


@pytest.mark.parametrize(("raw", "field", "reason"), QUEUE_CASES)
def test_queue_enqueue_refuses_with_422(
    client: TestClient, auth: Headers, row_counts: Counts, raw: str, field: str, reason: str
) -> None:
    headers = {**auth(), "Content-Type": "application/json"}
    before = row_counts()
    response = client.post("/v1/queues/q/tasks", content=raw.encode(), headers=headers)
    assert response.status_code == 422, response.text[:500]
    found = problems(response)
    assert field in found, found
    assert reason in found[field], found
    assert row_counts() == before


def test_ack_and_nack_refuse_nan_and_nul_and_keep_the_lease(
    client: TestClient, auth: Headers
) -> None:
    headers = {**auth(), "Content-Type": "application/json"}
    assert client.post("/v1/queues/q/tasks", json={"payload": 1}, headers=headers).is_success
    leased = client.post("/v1/queues/q/lease", json={"worker_id": "w"}, headers=headers)
    [task] = leased.json()["tasks"]
    token = task["lease_token"]
    for path, raw, field in (
        ("ack", '{"lease_token": "' + token + '", "result": {"r": NaN}}', "result.r"),
        ("ack", '{"lease_token": "' + token + '", "result": "\\u0000"}', "result"),
        ("nack", '{"lease_token": "' + token + '", "error": "boom\\u0000"}', "error"),
    ):
        response = client.post(
            f"/v1/tasks/{task['task_id']}/{path}", content=raw.encode(), headers=headers
        )
        assert response.status_code == 422, (raw, response.text[:300])
        assert field in problems(response), problems(response)
    done = client.post(
        f"/v1/tasks/{task['task_id']}/ack", json={"lease_token": token}, headers=headers
    )
    assert done.status_code == 200, done.text


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/dead-letters?job_id=%00", "job_id"),
        ("/v1/dead-letters?cursor=%00", "cursor"),
        ("/v1/jobs/00000000-0000-0000-0000-000000000000/runs?cursor=%00", "cursor"),
        ("/v1/jobs/00000000-0000-0000-0000-000000000000/runs?status=%00", "status"),
    ],
)
def test_nul_in_a_query_parameter_is_422(
    client: TestClient, auth: Headers, path: str, field: str
) -> None:
    response = client.get(path, headers=auth())
    assert response.status_code == 422, response.text[:300]
    assert field in problems(response)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"from": "0001-01-01T00:00+01:00"}', "from"),
        ('{"to": "9999-12-31T23:30:00-01:00"}', "to"),
        ('{"limit": ' + HUGE_INT + "}", "limit"),
        ('{"job_id": "\\u0000"}', "job_id"),
    ],
)
def test_bulk_replay_refuses_far_instants_and_huge_ints(
    client: TestClient, auth: Headers, raw: str, field: str
) -> None:
    headers = {**auth(), "Content-Type": "application/json"}
    response = client.post("/v1/dead-letters:replay", content=raw.encode(), headers=headers)
    assert response.status_code == 422, response.text[:300]
    assert field in problems(response), problems(response)


def test_body_that_is_not_json_is_422_in_the_common_shape(
    client: TestClient, auth: Headers
) -> None:
    headers = {**auth(), "Content-Type": "application/json"}
    response = client.post("/v1/jobs", content=b"{not json", headers=headers)
    assert response.status_code == 422
    assert problems(response) == {"body": "is not valid JSON"}


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/v1/jobs", "GET, POST"),
        ("/v1/jobs/0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c", "DELETE, GET, PATCH"),
        ("/v1/jobs/0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c/runs", "GET, POST"),
        ("/v1/jobs/0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c:backfill", "POST"),
        ("/v1/runs/0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c:cancel", "POST"),
        ("/v1/dead-letters/0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c:replay", "POST"),
    ],
)
def test_a_405_names_every_method_of_the_path(
    client: TestClient, auth: Headers, path: str, allow: str
) -> None:
    """HTTP wants a 405 to carry `Allow` with the methods the resource supports: all of
    them, though they are routes of their own, and not those of a route whose id would
    swallow the `:action` suffix (`/v1/runs/{run_id}` for `/v1/runs/<id>:cancel`)."""
    headers = auth("acme", ("read", "write"))
    for method in ("OPTIONS", "PUT"):
        response = client.request(method, path, headers=headers)
        assert response.status_code == 405, (method, path, response.text)
        assert response.headers.get("allow") == allow, (method, path, response.headers)
        assert response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("GET", "/v1/next-fires?every_s=60&after=2030-01-01T09:00Z", None, "after"),
        ("GET", "/v1/next-fires?cron=0+3+*+*&timezone=UTC", None, "cron"),
        ("GET", "/v1/jobs/0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c/explain?to=2030-W01-1", None, "to"),
        ("POST", "/v1/dead-letters:replay", '{"from": 0}', "from"),
        ("POST", "/v1/dead-letters:replay", '{"from": "2030-01-01 09:00:00Z"}', "from"),
        ("POST", "/v1/jobs", job(schedule='{"at": "2030-01-01T09:00Z"}'), "schedule.at"),
        (
            "POST",
            "/v1/jobs",
            job(schedule='{"cron": "0 3 * * *", "timezone": 0}'),
            "schedule.timezone",
        ),
        ("GET", "/v1/jobs?cursor=%2B%2F", None, "cursor"),
    ],
)
def test_what_the_document_declares_is_refused_in_words(
    client: TestClient, auth: Headers, method: str, path: str, body: str | None, field: str
) -> None:
    """An instant in another ISO 8601 form than the RFC 3339 one the document declares,
    a cron of four fields, a timezone that is not a string, a cursor of another alphabet:
    422 naming the field, with a reason in words (not the pattern)."""
    headers = {**auth(), "Content-Type": "application/json"}
    response = client.request(method, path, content=body, headers=headers)
    assert response.status_code == 422, response.text
    reason = problems(response)[field]
    assert "^" not in reason and "pattern" not in reason, reason


def test_a_bad_cron_and_an_unknown_zone_are_reported_together(
    client: TestClient, auth: Callable[..., dict[str, str]]
) -> None:
    headers = auth()
    body = {
        "name": "both-wrong",
        "schedule": {"cron": "61 * * * *", "timezone": "Mars/Olympus"},
        "task": {"type": "noop"},
    }
    for sent in (body, {"jobs": [body]}):
        path = "/v1/jobs" if "name" in sent else "/v1/jobs:batch"
        got = client.post(path, json=sent, headers=headers)
        assert got.status_code == 422
        fields = [f["field"] for f in got.json()["error"]["fields"]]
        where = "" if "name" in sent else "jobs[0]."
        assert fields == [f"{where}schedule.cron", f"{where}schedule.timezone"], got.json()

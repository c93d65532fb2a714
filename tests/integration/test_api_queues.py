"""The task-queue API against the real PostgreSQL: enqueue (idempotent), lease (limit,
delay, concurrent lessees), ack, nack, heartbeat, expiry, stats, auth and bad input.

Where a test needs time to pass (a delay, a backoff, a lease expiry), it calls the store
with an explicit `now` instead of sleeping: the API and the store share the same code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from kit.store import queues as qs
from kit.store.schema import queue_tasks

pytestmark = pytest.mark.integration

Headers = Callable[..., dict[str, str]]
Counts = Callable[[], dict[str, int]]


def db_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(select(func.now())).scalar_one()


def enqueue(client: TestClient, headers: dict[str, str], queue: str = "emails", **body: Any) -> str:
    body.setdefault("payload", {"to": "a@example.org"})
    response = client.post(f"/v1/queues/{queue}/tasks", json=body, headers=headers)
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "queued"
    return response.json()["task_id"]


def lease(
    client: TestClient, headers: dict[str, str], queue: str = "emails", **body: Any
) -> list[dict[str, Any]]:
    body = {"worker_id": "w1", "max_tasks": 10, "lease_sec": 60, **body}
    response = client.post(f"/v1/queues/{queue}/lease", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["tasks"]


def stats(client: TestClient, headers: dict[str, str], queue: str = "emails") -> dict[str, Any]:
    response = client.get(f"/v1/queues/{queue}/stats", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def row(engine: Engine, task_id: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(select(queue_tasks).where(queue_tasks.c.task_id == task_id)).one()


def problems(response) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "fields"}
    return {f["field"]: f["reason"] for f in body["error"]["fields"]}


# ---------------------------------------------------------------------------
# Enqueue


def test_enqueue_stores_the_task_with_defaults(client: TestClient, auth: Headers, engine: Engine):
    task_id = enqueue(client, auth(), payload={"n": [1, 2, 3]})
    stored = row(engine, task_id)
    assert (stored.tenant, stored.queue, stored.status) == ("acme", "emails", "queued")
    assert stored.payload == {"n": [1, 2, 3]}
    assert (stored.attempt, stored.max_attempts, stored.timeout_s) == (0, 3, 300)
    assert stored.visible_at == stored.created_at


def test_idempotency_key_returns_the_same_task_and_refuses_another_body(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = {**auth(), "Idempotency-Key": "order-17"}
    body = {"payload": {"order": 17}, "max_attempts": 5}
    first = client.post("/v1/queues/emails/tasks", json=body, headers=headers)
    assert first.status_code == 201
    again = client.post("/v1/queues/emails/tasks", json=body, headers=headers)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    # Defaults spelled out are the same request.
    explicit = {**body, "delay_sec": 0, "timeout_sec": 300}
    assert client.post("/v1/queues/emails/tasks", json=explicit, headers=headers).json() == (
        first.json()
    )
    other = client.post("/v1/queues/emails/tasks", json={"payload": 18}, headers=headers)
    assert other.status_code == 409
    assert "Idempotency-Key" in problems(other)
    elsewhere = client.post("/v1/queues/sms/tasks", json=body, headers=headers)
    assert elsewhere.status_code == 409
    # Another tenant's key space is its own.
    beta = client.post(
        "/v1/queues/emails/tasks",
        json=body,
        headers={**auth("beta"), "Idempotency-Key": "order-17"},
    )
    assert beta.status_code == 201 and beta.json()["task_id"] != first.json()["task_id"]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(queue_tasks)).scalar_one() == 2


def test_idempotent_replay_reports_the_current_status(client: TestClient, auth: Headers):
    headers = {**auth(), "Idempotency-Key": "k1"}
    created = client.post("/v1/queues/emails/tasks", json={"payload": 1}, headers=headers)
    [task] = lease(client, auth())
    replay = client.post("/v1/queues/emails/tasks", json={"payload": 1}, headers=headers)
    assert replay.json() == {"task_id": created.json()["task_id"], "status": "leased"}
    assert task["task_id"] == created.json()["task_id"]


# ---------------------------------------------------------------------------
# Lease


def test_lease_takes_oldest_first_up_to_max_tasks(client: TestClient, auth: Headers):
    headers = auth()
    ids = [enqueue(client, headers, payload={"i": i}) for i in range(5)]
    first = lease(client, headers, max_tasks=3, lease_sec=120)
    assert [t["task_id"] for t in first] == ids[:3]
    assert [t["payload"] for t in first] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert all(t["attempt"] == 1 for t in first)
    assert len({t["lease_token"] for t in first}) == 3
    expires = [datetime.fromisoformat(t["lease_expires_at"]) for t in first]
    assert len(set(expires)) == 1
    second = lease(client, headers, worker_id="w2", max_tasks=3)
    assert [t["task_id"] for t in second] == ids[3:]
    assert lease(client, headers) == []
    assert stats(client, headers)["leased"] == 5


def test_lease_is_per_queue(client: TestClient, auth: Headers) -> None:
    headers = auth()
    enqueue(client, headers, queue="emails")
    sms = enqueue(client, headers, queue="sms.v2")
    assert [t["task_id"] for t in lease(client, headers, queue="sms.v2")] == [sms]
    assert lease(client, headers, queue="sms.v2") == []


def test_delay_is_respected(client: TestClient, auth: Headers, engine: Engine) -> None:
    headers = auth()
    task_id = enqueue(client, headers, delay_sec=3600)
    stored = row(engine, task_id)
    assert stored.visible_at - stored.created_at == timedelta(hours=1)
    assert lease(client, headers) == []
    assert stats(client, headers)["queued"] == 1
    early = qs.TaskLease(
        "acme", "emails", "w1", 10, 60, now=stored.visible_at - timedelta(seconds=1)
    )
    assert qs.task_lease(engine, early) == []
    due = qs.TaskLease("acme", "emails", "w1", 10, 60, now=stored.visible_at)
    assert [t.task_id for t in qs.task_lease(engine, due)] == [task_id]


def test_a_locked_candidate_is_skipped_not_waited_for(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    """Another lessee's transaction holds the two oldest rows: this lease skips them."""
    headers = auth()
    ids = [enqueue(client, headers, payload=i) for i in range(4)]
    with engine.connect() as other:
        other.begin()
        other.execute(
            select(queue_tasks.c.task_id)
            .where(queue_tasks.c.task_id.in_(ids[:2]))
            .with_for_update()
        ).all()
        got = qs.task_lease(engine, qs.TaskLease("acme", "emails", "w2", 10, 60))
        other.rollback()
    assert [t.task_id for t in got] == ids[2:]


def test_concurrent_lessees_never_share_a_task(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    total = 60
    for i in range(total):
        enqueue(client, headers, payload=i)
    workers = 4
    barrier = threading.Barrier(workers)
    got: dict[int, list[str]] = {w: [] for w in range(workers)}
    failures: list[BaseException] = []

    def work(w: int) -> None:
        try:
            barrier.wait()
            while True:
                batch = qs.task_lease(engine, qs.TaskLease("acme", "emails", f"w{w}", 7, 60))
                if not batch:
                    return
                got[w].extend(t.task_id for t in batch)
        except BaseException as exc:  # reported below, with the thread's error
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    leased = [task_id for ids in got.values() for task_id in ids]
    assert len(leased) == total
    assert len(set(leased)) == total
    with engine.connect() as conn:
        owners = conn.execute(
            select(queue_tasks.c.task_id, queue_tasks.c.worker_id, queue_tasks.c.attempt)
        ).all()
    by_worker = {task_id: f"w{w}" for w, ids in got.items() for task_id in ids}
    assert {str(r.task_id): r.worker_id for r in owners} == by_worker
    assert {r.attempt for r in owners} == {1}


# ---------------------------------------------------------------------------
# Ack, nack, heartbeat


def test_ack_finishes_and_a_repeat_is_harmless(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    task_id = enqueue(client, headers)
    [task] = lease(client, headers)
    wrong = client.post(
        f"/v1/tasks/{task_id}/ack", json={"lease_token": "nope", "result": 1}, headers=headers
    )
    assert wrong.status_code == 409
    assert wrong.json()["error"]["message"] == "lease token does not match"
    assert problems(wrong) == {"lease_token": "lease token does not match"}
    body = {"lease_token": task["lease_token"], "result": {"sent": True}}
    done = client.post(f"/v1/tasks/{task_id}/ack", json=body, headers=headers)
    assert done.status_code == 200 and done.json() == {"task_id": task_id, "status": "done"}
    stored = row(engine, task_id)
    assert (stored.status, stored.result) == ("done", {"sent": True})
    assert stored.finished_at is not None and stored.lease_expires_at is None
    assert client.post(f"/v1/tasks/{task_id}/ack", json=body, headers=headers).status_code == 200
    assert lease(client, headers) == []
    assert stats(client, headers) == {
        "queue": "emails",
        "queued": 0,
        "leased": 0,
        "dlq": 0,
        "oldest_age_sec": 0.0,
    }


def test_nack_retryable_reappears_after_backoff_with_next_attempt(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    task_id = enqueue(client, headers, payload="p")
    [task] = lease(client, headers)
    before = db_now(engine)
    response = client.post(
        f"/v1/tasks/{task_id}/nack",
        json={"lease_token": task["lease_token"], "retryable": True, "error": "smtp 451"},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    nacked = response.json()
    assert (nacked["status"], nacked["attempt"], nacked["dead_reason"]) == ("queued", 1, None)
    visible_at = datetime.fromisoformat(nacked["visible_at"])
    # Attempt 1 failed: full jitter in [0, base 1 s].
    assert before <= visible_at <= db_now(engine) + timedelta(seconds=1)
    stored = row(engine, task_id)
    assert stored.visible_at == visible_at and stored.lease_token is None
    assert [(e["attempt"], e["error"]) for e in stored.errors] == [(1, "smtp 451")]
    # The old token is spent.
    again = client.post(
        f"/v1/tasks/{task_id}/ack", json={"lease_token": task["lease_token"]}, headers=headers
    )
    assert again.status_code == 409
    early = qs.TaskLease("acme", "emails", "w2", 1, 60, now=visible_at - timedelta(milliseconds=1))
    if visible_at - timedelta(milliseconds=1) >= before:
        assert qs.task_lease(engine, early) == []
    [retry] = qs.task_lease(engine, qs.TaskLease("acme", "emails", "w2", 1, 60, now=visible_at))
    assert (retry.task_id, retry.attempt, retry.payload) == (task_id, 2, "p")
    assert retry.lease_token != task["lease_token"]


def test_nack_not_retryable_goes_to_dead_letters(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    task_id = enqueue(client, headers)
    [task] = lease(client, headers)
    response = client.post(
        f"/v1/tasks/{task_id}/nack",
        json={"lease_token": task["lease_token"], "retryable": False, "error": "bad address"},
        headers=headers,
    )
    assert response.json()["status"] == "dead"
    assert response.json()["dead_reason"] == "not retryable"
    assert response.json()["visible_at"] is None
    assert lease(client, headers) == []
    assert stats(client, headers)["dlq"] == 1
    stored = row(engine, task_id)
    assert stored.status == "dead" and stored.errors[0]["error"] == "bad address"


def test_nack_on_the_last_attempt_goes_to_dead_letters(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    task_id = enqueue(client, headers, max_attempts=2)
    errors = []
    for attempt in (1, 2):
        later = db_now(engine) + timedelta(minutes=10 * attempt)
        [task] = qs.task_lease(engine, qs.TaskLease("acme", "emails", "w1", 1, 60, now=later))
        assert task.attempt == attempt
        nacked = qs.task_nack(
            engine, "acme", task_id, task.lease_token, True, f"e{attempt}", now=later
        )
        errors.append(nacked)
    assert [n.status for n in errors] == ["queued", "dead"]
    assert errors[1].dead_reason == "attempts exhausted (2 of 2)"
    stored = row(engine, task_id)
    assert [e["error"] for e in stored.errors] == ["e1", "e2"]
    assert stats(client, headers)["dlq"] == 1


def test_heartbeat_extends_the_lease_up_to_the_timeout(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    task_id = enqueue(client, headers, timeout_sec=900)
    [task] = lease(client, headers, lease_sec=30)
    leased_until = datetime.fromisoformat(task["lease_expires_at"])
    beat = client.post(
        f"/v1/tasks/{task_id}/heartbeat",
        json={"lease_token": task["lease_token"], "extend_sec": 600},
        headers=headers,
    )
    assert beat.status_code == 200, beat.text
    extended = datetime.fromisoformat(beat.json()["lease_expires_at"])
    assert extended - leased_until >= timedelta(seconds=570)
    assert row(engine, task_id).lease_expires_at == extended
    # Still held after the first lease would have ended.
    late = qs.TaskLease("acme", "emails", "w2", 1, 60, now=leased_until + timedelta(seconds=1))
    assert qs.task_lease(engine, late) == []
    # Capped: the attempt may not outlive timeout_sec (900 s) from its lease.
    deadline = row(engine, task_id).deadline_at
    capped = qs.task_heartbeat(
        engine, "acme", task_id, task["lease_token"], 3600, now=extended - timedelta(seconds=1)
    )
    assert capped == deadline
    wrong = client.post(
        f"/v1/tasks/{task_id}/heartbeat",
        json={"lease_token": "x", "extend_sec": 10},
        headers=headers,
    )
    assert wrong.status_code == 409 and problems(wrong) == {
        "lease_token": "lease token does not match"
    }


def test_expired_lease_is_refused_and_the_task_leased_by_another_worker(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    # Enqueued and leased ten minutes ago for a minute: expired by the database clock now.
    past = db_now(engine) - timedelta(minutes=10)
    task_id = qs.task_enqueue(engine, qs.TaskEnqueue("acme", "emails", "p", now=past)).task_id
    [old] = qs.task_lease(engine, qs.TaskLease("acme", "emails", "w1", 1, 60, now=past))
    expired_at = old.lease_expires_at
    assert stats(client, headers)["queued"] == 1
    for action, extra in (("ack", {}), ("nack", {"error": "x"}), ("heartbeat", {"extend_sec": 5})):
        response = client.post(
            f"/v1/tasks/{task_id}/{action}",
            json={"lease_token": old.lease_token, **extra},
            headers=headers,
        )
        assert response.status_code == 409, (action, response.text)
        message = response.json()["error"]["message"]
        assert message.startswith("lease expired at ")
        assert datetime.fromisoformat(message.removeprefix("lease expired at ")) == expired_at
    [new] = lease(client, headers, worker_id="w2")
    assert (new["task_id"], new["attempt"]) == (task_id, 2)
    stale = client.post(
        f"/v1/tasks/{task_id}/ack", json={"lease_token": old.lease_token}, headers=headers
    )
    assert stale.status_code == 409
    assert stale.json()["error"]["message"] == "lease token does not match"
    ok = client.post(
        f"/v1/tasks/{task_id}/ack", json={"lease_token": new["lease_token"]}, headers=headers
    )
    assert ok.status_code == 200
    assert row(engine, task_id).worker_id == "w2"


def test_expired_lease_on_the_last_attempt_goes_to_dead_letters(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    past = db_now(engine) - timedelta(minutes=10)
    doomed = qs.task_enqueue(
        engine, qs.TaskEnqueue("acme", "emails", "doomed", max_attempts=1, now=past)
    ).task_id
    [old] = qs.task_lease(engine, qs.TaskLease("acme", "emails", "w1", 1, 60, now=past))
    assert old.task_id == doomed
    fresh = enqueue(client, headers, payload="fresh")
    # One slot asked for: the dead-lettered task does not use it up.
    [got] = lease(client, headers, worker_id="w2", max_tasks=1)
    assert got["task_id"] == fresh
    stored = row(engine, doomed)
    assert stored.status == "dead" and stored.lease_token is None
    assert stored.dead_reason.startswith("lease expired at ")
    assert stored.dead_reason.endswith("on attempt 1 of 1")
    assert stored.errors[0]["attempt"] == 1
    assert stats(client, headers) | {"oldest_age_sec": 0} == {
        "queue": "emails",
        "queued": 0,
        "leased": 1,
        "dlq": 1,
        "oldest_age_sec": 0,
    }


# ---------------------------------------------------------------------------
# Stats


def test_stats_counts_each_state(client: TestClient, auth: Headers, engine: Engine) -> None:
    headers = auth()
    now = db_now(engine)
    waited = qs.task_enqueue(
        engine, qs.TaskEnqueue("acme", "emails", {"n": 0}, now=now - timedelta(seconds=120))
    )
    for i in range(3):
        enqueue(client, headers, payload=i)
    enqueue(client, headers, delay_sec=600)
    enqueue(client, headers, queue="other")
    leased = lease(client, headers, max_tasks=2)
    assert leased[0]["task_id"] == waited.task_id
    client.post(
        f"/v1/tasks/{leased[1]['task_id']}/nack",
        json={"lease_token": leased[1]["lease_token"], "retryable": False},
        headers=headers,
    )
    counts = stats(client, headers)
    assert (counts["queued"], counts["leased"], counts["dlq"]) == (3, 1, 1)
    # The oldest visible task was enqueued just now (the 120 s one is leased).
    assert 0 <= counts["oldest_age_sec"] < 120
    long_ago = qs.TaskLease("acme", "emails", "w9", 1, 60, now=now - timedelta(seconds=200))
    assert qs.task_lease(engine, long_ago) == []  # nothing was visible 200 s ago
    # Let the live lease expire (by an explicit clock) and age the queue.
    later = qs.queue_stats(engine, "acme", "emails", now=now + timedelta(seconds=3600))
    assert (later.queued, later.leased, later.dlq) == (4, 0, 1)
    assert later.oldest_age_s >= 3600 - 60
    empty = stats(client, headers, queue="nothing-here")
    assert empty == {
        "queue": "nothing-here",
        "queued": 0,
        "leased": 0,
        "dlq": 0,
        "oldest_age_sec": 0,
    }


# ---------------------------------------------------------------------------
# Auth, tenants, bad input


def test_auth_and_scopes(client: TestClient, auth: Headers) -> None:
    assert client.post("/v1/queues/emails/tasks", json={"payload": 1}).status_code == 401
    assert client.get("/v1/queues/emails/stats").status_code == 401
    reader = auth(scopes=("read",))
    refused = client.post("/v1/queues/emails/tasks", json={"payload": 1}, headers=reader)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert (
        client.post("/v1/queues/emails/lease", json={"worker_id": "w"}, headers=reader).status_code
        == 403
    )
    assert client.get("/v1/queues/emails/stats", headers=reader).status_code == 200


def test_tenants_do_not_see_each_others_tasks(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    acme, beta = auth("acme"), auth("beta")
    task_id = enqueue(client, acme)
    assert lease(client, beta) == []
    assert stats(client, beta)["queued"] == 0
    [task] = lease(client, acme)
    for action, extra in (("ack", {}), ("nack", {}), ("heartbeat", {"extend_sec": 5})):
        response = client.post(
            f"/v1/tasks/{task_id}/{action}",
            json={"lease_token": task["lease_token"], **extra},
            headers=beta,
        )
        assert response.status_code == 404, action
        assert response.json()["error"] == {
            "code": "not_found",
            "message": "no such task",
            "fields": [],
        }
    assert row(engine, task_id).status == "leased"
    malformed = client.post("/v1/tasks/not-a-uuid/ack", json={"lease_token": "t"}, headers=acme)
    assert malformed.status_code == 422  # not an id at all: bad input, naming the field
    assert malformed.json()["error"]["fields"][0]["field"] == "task_id"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/queues/Bad Name/tasks", {"payload": 1}, "queue"),
        ("/v1/queues/" + "q" * 65 + "/tasks", {"payload": 1}, "queue"),
        ("/v1/queues/emails/tasks", {}, "payload"),
        ("/v1/queues/emails/tasks", {"payload": 1, "delay_sec": -1}, "delay_sec"),
        ("/v1/queues/emails/tasks", {"payload": 1, "delay_sec": 86_401}, "delay_sec"),
        ("/v1/queues/emails/tasks", {"payload": 1, "max_attempts": 0}, "max_attempts"),
        ("/v1/queues/emails/tasks", {"payload": 1, "max_attempts": 101}, "max_attempts"),
        ("/v1/queues/emails/tasks", {"payload": 1, "timeout_sec": 0}, "timeout_sec"),
        ("/v1/queues/emails/tasks", {"payload": 1, "timeout_sec": "5"}, "timeout_sec"),
        ("/v1/queues/emails/tasks", {"payload": 1, "priority": "high"}, "priority"),
        ("/v1/queues/emails/tasks", {"payload": "x" * 300_000}, "payload"),
        ("/v1/queues/emails/lease", {"max_tasks": 1}, "worker_id"),
        ("/v1/queues/emails/lease", {"worker_id": "w", "max_tasks": 0}, "max_tasks"),
        ("/v1/queues/emails/lease", {"worker_id": "w", "max_tasks": 101}, "max_tasks"),
        ("/v1/queues/emails/lease", {"worker_id": "w", "lease_sec": 3601}, "lease_sec"),
        ("/v1/queues/UPPER/lease", {"worker_id": "w"}, "queue"),
        ("/v1/tasks/{id}/ack", {}, "lease_token"),
        ("/v1/tasks/{id}/nack", {"lease_token": "t", "retryable": "yes"}, "retryable"),
        ("/v1/tasks/{id}/heartbeat", {"lease_token": "t"}, "extend_sec"),
        ("/v1/tasks/{id}/heartbeat", {"lease_token": "t", "extend_sec": 0}, "extend_sec"),
    ],
)
def test_bad_input_is_422_naming_the_field_and_writes_nothing(
    client: TestClient,
    auth: Headers,
    row_counts: Counts,
    engine: Engine,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    headers = auth()
    task_id = enqueue(client, headers)
    [task] = lease(client, headers)
    before = row_counts()
    stored = row(engine, task_id)
    response = client.post(path.replace("{id}", task_id), json=body, headers=headers)
    assert response.status_code == 422, response.text
    assert field in problems(response), problems(response)
    assert row_counts() == before
    assert row(engine, task_id) == stored
    assert task["lease_token"]


def test_oversized_result_is_refused(client: TestClient, auth: Headers, engine: Engine) -> None:
    headers = auth()
    task_id = enqueue(client, headers)
    [task] = lease(client, headers)
    big = {"lease_token": task["lease_token"], "result": "x" * 300_000}
    response = client.post(f"/v1/tasks/{task_id}/ack", json=big, headers=headers)
    assert response.status_code == 422 and "result" in problems(response)
    assert row(engine, task_id).status == "leased"


def test_queue_routes_are_in_the_openapi_with_bearer_security(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/queues/{queue}/tasks",
        "/v1/queues/{queue}/lease",
        "/v1/tasks/{task_id}/ack",
        "/v1/tasks/{task_id}/nack",
        "/v1/tasks/{task_id}/heartbeat",
        "/v1/queues/{queue}/stats",
    ):
        for operation in paths[path].values():
            assert operation["security"] == [{"bearer": []}]


# ---------------------------------------------------------------------------
# Batches (issue 16): enqueue many, ack many


def test_batch_enqueue_writes_all_in_order_or_nothing(
    client: TestClient, auth: Headers, row_counts: Counts, engine: Engine
) -> None:
    headers = auth()
    body = {"tasks": [{"payload": {"n": i}, "max_attempts": 2} for i in range(3)]}
    response = client.post("/v1/queues/bulk/tasks:batch", json=body, headers=headers)
    assert response.status_code == 201, response.text
    created = response.json()["tasks"]
    assert [t["status"] for t in created] == ["queued"] * 3
    assert [row(engine, t["task_id"]).payload for t in created] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert stats(client, headers, "bulk")["queued"] == 3
    leased = lease(client, headers, "bulk")
    assert sorted(t["payload"]["n"] for t in leased) == [0, 1, 2]

    before = row_counts()
    too_big = "x" * (client.app.state.settings.max_queue_payload_bytes + 1)
    bad = {"tasks": [{"payload": 1}, {"payload": too_big}, {"payload": 2, "delay_sec": -1}]}
    response = client.post("/v1/queues/bulk/tasks:batch", json=bad, headers=headers)
    assert response.status_code == 422
    fields = {f["field"] for f in response.json()["error"]["fields"]}
    assert "tasks[2].delay_sec" in fields
    bad = {"tasks": [{"payload": 1}, {"payload": too_big}]}
    response = client.post("/v1/queues/bulk/tasks:batch", json=bad, headers=headers)
    assert response.status_code == 422
    assert [f["field"] for f in response.json()["error"]["fields"]] == ["tasks[1].payload"]
    empty = client.post("/v1/queues/bulk/tasks:batch", json={"tasks": []}, headers=headers)
    assert empty.status_code == 422
    over = {"tasks": [{"payload": 1}] * (qs.MAX_BATCH_TASKS + 1)}
    assert client.post("/v1/queues/bulk/tasks:batch", json=over, headers=headers).status_code == 422
    assert row_counts() == before


def test_batch_ack_decides_each_ack_on_its_own(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers, other = auth("acme"), auth("globex")
    for _ in range(3):
        enqueue(client, headers, "jobs")
    first, second, third = lease(client, headers, "jobs")
    foreign = enqueue(client, other, "jobs")
    (foreign_lease,) = lease(client, other, "jobs")
    acks = [
        {"task_id": first["task_id"], "lease_token": first["lease_token"], "result": {"ok": 1}},
        {"task_id": second["task_id"], "lease_token": "not-the-token"},
        {"task_id": foreign, "lease_token": foreign_lease["lease_token"]},
        {"task_id": first["task_id"], "lease_token": first["lease_token"], "result": {"ok": 1}},
        {"task_id": third["task_id"].upper(), "lease_token": third["lease_token"]},
    ]
    # an item whose task_id is not an id at all is bad input: the whole batch is a 422
    # naming it, and nothing is acked
    malformed = [*acks, {"task_id": "not-a-uuid", "lease_token": "t"}]
    refused = client.post("/v1/tasks:ack", json={"acks": malformed}, headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["fields"][0]["field"] == "acks[5].task_id"
    assert row(engine, first["task_id"]).status == "leased"
    response = client.post("/v1/tasks:ack", json={"acks": acks}, headers=headers)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    # answered in the id's canonical (lower case) form, whatever case it was sent in
    assert [r["task_id"] for r in results] == [a["task_id"].lower() for a in acks]
    assert [r["status"] for r in results] == ["done", None, None, "done", "done"]
    codes = [r["error"] and r["error"]["code"] for r in results]
    assert codes == [None, "lease_refused", "not_found", None, None]
    assert row(engine, first["task_id"]).result == {"ok": 1}
    assert row(engine, second["task_id"]).status == "leased"  # the refused ack changed nothing
    assert row(engine, third["task_id"]).status == "done"
    assert row(engine, foreign).status == "leased"  # another tenant's task: not found, untouched
    # the one-task ack agrees with the batch: a repeat with the finishing token is fine
    again = client.post(
        f"/v1/tasks/{first['task_id']}/ack",
        json={"lease_token": first["lease_token"]},
        headers=headers,
    )
    assert again.status_code == 200
    assert stats(client, headers, "jobs") == {
        "queue": "jobs",
        "queued": 0,
        "leased": 1,
        "dlq": 0,
        "oldest_age_sec": 0.0,
    }
    empty = client.post("/v1/tasks:ack", json={"acks": []}, headers=headers)
    assert empty.status_code == 422

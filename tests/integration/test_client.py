"""The Python client (kit.client) against the real API on a port of this machine: jobs,
runs, dead letters and a queue worked by its worker loop, with the API's refusals as
ApiError naming each field."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from kit.client import ApiError, Client, Permanent
from kit.store.claims import Claim, run_finish_failed, runs_claim
from kit.store.tokens import token_create
from tests.integration.worker_rows import make_run

pytestmark = pytest.mark.integration


@pytest.fixture
def api(served: str, engine: Engine) -> Client:
    return Client(served, token_create(engine, "acme", ("read", "write")).token)


def test_jobs_and_runs(api: Client, engine: Engine) -> None:
    body = {"name": "hello", "schedule": {"every_s": 3600}, "task": {"type": "noop"},
            "retry": {"max_attempts": 1}}  # fmt: skip
    job = api.create_job(body, idempotency_key="hello-1")
    assert api.create_job(body, idempotency_key="hello-1")["job_id"] == job["job_id"]
    assert api.get_job(job["job_id"])["name"] == "hello"
    assert api.pause_job(job["job_id"])["paused"] and not api.resume_job(job["job_id"])["paused"]
    assert [j["job_id"] for j in api.iter_jobs(name_prefix="hel")] == [job["job_id"]]
    run = api.run_now(job["job_id"])
    assert run["status"] == "pending"
    detail = api.get_run(run["run_id"])
    assert detail["idempotency_key"] == run["run_id"] and len(detail["attempts"]) == 1
    assert [r["run_id"] for r in api.job_runs(job["job_id"])["runs"]] == [run["run_id"]]
    assert api.cancel_run(run["run_id"])["status"] == "cancelled"

    # a dead letter, replayed
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    rid = make_run(engine, job["job_id"], scheduled_at=at)
    [held] = runs_claim(engine, [Claim(rid, 1)], "w1", 30_000)
    run_finish_failed(engine, rid, held.lease_token, "boom", random.Random(0))
    [dead] = api.dead_letters(job_id=job["job_id"])["dead_letters"]
    assert dead["run_id"] == rid
    assert api.replay_dead_letter(rid)["run_status"] == "pending"

    # a refusal names every field, as the API does
    bad = {**body, "name": "bad", "schedule": {"cron": "61 * * * *", "timezone": "Mars/X"}}
    with pytest.raises(ApiError) as refused:
        api.create_job(bad)
    assert refused.value.status == 422
    assert [f for f, _ in refused.value.fields] == ["schedule.cron", "schedule.timezone"]
    api.delete_job(job["job_id"])
    with pytest.raises(ApiError) as gone:
        api.get_job(job["job_id"])
    assert gone.value.status == 404


def test_a_queue_worked_by_the_worker_loop(api: Client) -> None:
    for n in range(4):
        api.enqueue("thumbs", {"n": n}, max_attempts=2)
    api.enqueue("thumbs", {"n": "bad"})
    seen: list[object] = []

    def handler(payload: dict) -> dict:
        if payload["n"] == "bad":
            raise Permanent("not an image")
        seen.append(payload["n"])
        return {"done": payload["n"]}

    stop = threading.Event()
    handled = api.work("thumbs", handler, "w1", stop, lease_sec=30, idle_s=0.05, max_tasks=5)
    assert handled == 5 and sorted(seen) == [0, 1, 2, 3]
    stats = api.queue_stats("thumbs")
    assert (stats["queued"], stats["leased"], stats["dlq"]) == (0, 0, 1)
    assert [(q["queue"], q["dead"]) for q in api.queues()["queues"]] == [("thumbs", 1)]
    assert api.replay_queue_dead("thumbs")["replayed"] == 1
    assert api.queue_stats("thumbs")["queued"] == 1


def test_the_worker_loop_keeps_a_long_tasks_lease(api: Client) -> None:
    api.enqueue("slow", {"n": 1})
    beats = threading.Event()
    original = api.heartbeat

    def counting(*args: object, **kwargs: object) -> object:
        beats.set()
        return original(*args, **kwargs)  # type: ignore[arg-type]

    api.heartbeat = counting  # type: ignore[method-assign]

    def handler(payload: object) -> None:
        assert beats.wait(10), "no heartbeat while the task ran"

    assert api.work("slow", handler, "w1", threading.Event(), lease_sec=3, max_tasks=1) == 1
    assert api.queue_stats("slow")["queued"] == 0

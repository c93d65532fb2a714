"""What a run says it is doing, and what it printed: a run a worker holds ahead of its
second is `claimed` (never `running`) in every answer of the API; GET /v1/runs/{id}
lists each attempt with its times, worker, lag, outcome and output; an output excerpt
never exceeds its cap nor shows a secret the job marked; a worker's metrics tell held
runs from running ones."""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from kit.core.output import OUTPUT_CAP_BYTES
from kit.core.task_policy import TaskPolicy
from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.store.claims import Claim, run_finish_ok, runs_claim, runs_heartbeat
from kit.tasks.policy import PolicySource, local_policy_toml
from kit.transport import RunPublisher, TieredConsumer
from kit.worker.worker import Worker, task_executor
from tests.integration.test_worker_e2e import Running, publish, wait_for
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run, rearm_retry

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]
SECRET = "tok-5f2b9c1e7a"
# tenant acme may run /bin/sh with API_TOKEN set (what the job marks secret)
POLICY = PolicySource.fixed(
    TaskPolicy.parse(
        tomllib.loads(local_policy_toml("acme", ["/bin/sh"]) + 'env = ["API_TOKEN"]\n')
    )
)


def test_a_run_held_ahead_of_its_second_is_claimed_never_running(
    client: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth()
    job = make_job(engine)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    rid = make_run(engine, job, scheduled_at=due)
    [claimed] = runs_claim(engine, [Claim(rid, 1)], "w1", 30_000)  # as a worker claims ahead

    run = client.get(f"/v1/runs/{rid}", headers=headers).json()
    assert run["status"] == "claimed" and run["claimed_at"] and run["started_at"] is None
    assert run["attempts"][0]["outcome"] == "claimed" and run["attempts"][0]["worker_id"] == "w1"
    listed = client.get(f"/v1/jobs/{job}/runs", headers=headers).json()["runs"]
    assert [r["status"] for r in listed] == ["claimed"]
    running = client.get(f"/v1/jobs/{job}/runs?status=running", headers=headers).json()
    assert running["runs"] == []
    held = client.get(f"/v1/jobs/{job}/runs?status=claimed", headers=headers).json()
    assert [r["run_id"] for r in held["runs"]] == [rid]
    tiers = client.get("/v1/in-flight", headers=headers).json()["tiers"]
    normal = next(t for t in tiers if t["tier"] == "normal")
    assert (normal["claimed"], normal["running"]) == (1, 0)

    # its task begins (the worker writes the start with its next heartbeat): running
    started_ms = {rid: to_epoch_ms(datetime.now(UTC))}
    kept, _ = runs_heartbeat(engine, [(rid, claimed.lease_token)], 30_000, started_ms=started_ms)
    assert kept == {rid}
    assert client.get(f"/v1/runs/{rid}", headers=headers).json()["status"] == "running"
    assert run_finish_ok(engine, rid, claimed.lease_token).accepted
    done = client.get(f"/v1/runs/{rid}", headers=headers).json()
    assert done["status"] == "succeeded" and done["idempotency_key"] == rid
    [attempt] = done["attempts"]
    assert attempt["outcome"] == "succeeded" and attempt["started_at"] and attempt["finished_at"]


@pytest.fixture
def worker(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Running]:
    consumer = TieredConsumer(
        settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
    )
    running = Running(
        Worker(
            engine, consumer, publisher, "w1", concurrency=2, lease_ttl_ms=30_000,
            execute=task_executor(POLICY),
        ),
        consumer,
    )  # fmt: skip
    running.thread.start()
    yield running
    running.stop.set()
    running.thread.join(timeout=20)
    consumer.close()


# 10 KiB of numbered lines on stdout with the secret on every tenth, the secret on
# stderr, and a first attempt that fails
SCRIPT = """
i=0
while [ $i -lt 400 ]; do
  if [ $((i % 10)) -eq 7 ]; then echo "line $i token=$API_TOKEN"; else echo "line $i ......"; fi
  i=$((i + 1))
done
echo "auth failed for $API_TOKEN" >&2
[ "$CRONFLEET_ATTEMPT" -ge 2 ]
"""


def test_every_attempt_keeps_its_output_capped_and_scrubbed(
    client: TestClient,
    auth: Headers,
    engine: Engine,
    publisher: RunPublisher,
    worker: Running,
) -> None:
    task = {
        "type": "command",
        "argv": ["/bin/sh", "-c", SCRIPT],
        "env": {"API_TOKEN": SECRET},
        "secret_env": ["API_TOKEN"],
    }
    job = make_job(engine, task=task)
    rid = make_run(engine, job)
    publish(publisher, engine, rid)
    wait_for(engine, rid, "retry_scheduled")
    rearm_retry(engine, rid)
    publish(publisher, engine, rid)
    wait_for(engine, rid, "succeeded")

    body = client.get(f"/v1/runs/{rid}", headers=auth())
    assert body.status_code == 200
    assert SECRET not in body.text  # nowhere in the answer
    first, second = body.json()["attempts"]
    assert (first["attempt"], first["outcome"], second["attempt"], second["outcome"]) == (
        1,
        "failed",
        2,
        "succeeded",
    )
    for attempt in (first, second):
        assert attempt["worker_id"] == "w1" and attempt["lag_s"] is not None
        assert attempt["due_at"] and attempt["claimed_at"] and attempt["started_at"]
        assert attempt["finished_at"]
        out, err = attempt["output"], attempt["stderr"]
        assert len(out.encode()) <= OUTPUT_CAP_BYTES and len(err.encode()) <= OUTPUT_CAP_BYTES
        assert out.startswith("…") and out.rstrip().endswith("line 399 ......")  # its end
        assert "token=(secret)" in out and "auth failed for (secret)" in err
    assert "exit code 1" in first["error"]


def test_a_worker_counts_held_runs_apart_from_running_ones(
    engine: Engine, publisher: RunPublisher, worker: Running
) -> None:
    job = make_job(engine)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    publish(publisher, engine, make_run(engine, job, scheduled_at=due))
    metrics = worker.metrics
    wait_until("the run to be held", lambda: metrics.value("cronfleet_worker_held") == 1)
    assert metrics.value("cronfleet_worker_in_flight") == 0  # held, not executing

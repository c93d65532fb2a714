"""A task type added in one place reaches the whole kit: a throwaway `echo` type,
registered before the API is imported (as kit.tasks.registry's BUILTIN are), is accepted
by the real API, found by the jobs list's filter, and run by a real worker off Kafka.

In a subprocess: the API's models are built from the registry when kit.api is imported,
and this session's has long been. Waits poll up to a generous limit; nothing is timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.settings import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys, threading, time, uuid
from typing import Literal
from pydantic import Field
from kit.tasks import TaskResult, TaskSpec, TaskType, registry

# -- the new type: this is all of it ----------------------------------------------------
class EchoTask(TaskSpec):
    type: Literal["echo"]
    text: str = Field(min_length=1)

def run_echo(spec, ctx):
    with open(LEDGER, "a") as ledger:  # the run id is the idempotency key, as for any task
        ledger.write(f"{spec['text']} {ctx.run_id} {ctx.tenant}\n")
    return TaskResult(True, None, spec["text"])

registry.register(TaskType("echo", EchoTask, run_echo))
# ----------------------------------------------------------------------------------------

from datetime import datetime
from fastapi.testclient import TestClient
from kit.api.app import create_app
from kit.settings import load_settings
from kit.store.claims import RunPointer
from kit.store.db import engine_for
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.worker.worker import Worker, task_executor

args = json.loads(sys.argv[1])
LEDGER = args["ledger"]
settings = load_settings(database_url=args["db_url"], task_policy_file=args["policy"])
engine = engine_for(args["db_url"], pool_size=4)
auth = {"Authorization": f"Bearer {args['token']}"}
out = {}
with TestClient(create_app(settings, engine)) as api:
    body = {"name": "echoes", "schedule": {"every_s": 3600}, "task": {"type": "echo", "text": "hi"}}
    created = api.post("/v1/jobs", json=body, headers=auth)
    out["created"] = created.status_code
    job_id = created.json()["job_id"]
    bad = api.post("/v1/jobs", json={**body, "name": "x", "task": {"type": "echo"}}, headers=auth)
    out["refused"] = [bad.status_code, bad.json()["error"]["fields"]]
    listed = api.get("/v1/jobs", params={"task_type": "echo"}, headers=auth).json()
    out["listed"] = [j["name"] for j in listed["jobs"]]
    sleeps = api.get("/v1/jobs", params={"task_type": "sleep"}, headers=auth).json()
    out["listed_sleep"] = sleeps["count"]
    run = api.post(f"/v1/jobs/{job_id}/runs", headers=auth).json()
    out["run_id"] = run["run_id"]
    # what the reaper does with a manual run: publish its pointer
    publisher = RunPublisher(settings.kafka_bootstrap, topic_prefix=args["prefix"])
    at = datetime.fromisoformat(run["scheduled_at"])
    pointer = RunPointer(run["run_id"], run["job_id"], run["attempt"], at, run["priority"])
    publisher.publish([RunMessage.of(pointer)])
    consumer = TieredConsumer(settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}",
                              topic_prefix=args["prefix"])
    worker = Worker(engine, consumer, publisher, "w-echo", concurrency=2, lease_ttl_ms=30_000,
                    execute=task_executor())
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        status = api.get(f"/v1/runs/{run['run_id']}", headers=auth).json()["status"]
        if status in ("succeeded", "dead", "retry_scheduled"):
            break
        time.sleep(0.2)
    out["status"] = status
    stop.set()
    thread.join(timeout=20)
    consumer.close()
    publisher.close()
engine.dispose()
print(json.dumps(out))
"""


def test_a_new_task_type_is_accepted_by_the_api_and_run_by_a_worker(
    settings: Settings, make_token, prefix: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "echo.ledger"
    args = {
        "db_url": settings.database_url,
        "policy": settings.task_policy_file,
        "token": make_token("acme", ("read", "write")),
        "prefix": prefix,
        "ledger": str(ledger),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["created"] == 201
    assert out["refused"] == [422, [{"field": "task.text", "reason": "is required"}]]
    assert out["listed"] == ["echoes"] and out["listed_sleep"] == 0
    assert out["status"] == "succeeded"
    assert ledger.read_text() == f"hi {out['run_id']} acme\n"

"""The operator's tenant limits at the API, on the real database (kit.api.tenancy): the
priority tiers a tenant may use, its most jobs, its most queued tasks per queue, and its
API requests per second; each refusal in the common error shape, counted on /metrics,
with nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.settings import Settings
from tests.integration.console_client import login
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

Headers = Callable[..., dict[str, str]]

POLICY = """
[defaults]
tiers = ["normal", "low"]

[tenants.lowly]
tiers = ["low"]

[tenants.capped]
max_jobs = 3

[tenants.noisy]
api_rate_per_s = 0.01
api_burst = 2

[tenants.filler]
max_queued_per_queue = 2

[tenants.ops]
api_rate_per_s = 0.01
api_burst = 1
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def limited(settings: Settings, engine: Engine, policy_file: Path) -> Iterator[TestClient]:
    mine = settings.model_copy(
        update={"tenant_policy_file": str(policy_file), "operator_tenant": "ops"}
    )
    with TestClient(create_app(mine, engine)) as client:
        yield client


def job(name: str = "report", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": {"cron": "0 3 * * *", "timezone": "UTC"},
        "task": {"type": "noop"},
        **fields,
    }


def fields_of(response: Any) -> dict[str, str]:
    return {f["field"]: f["reason"] for f in response.json()["error"]["fields"]}


def job_count(engine: Engine, tenant: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM jobs WHERE tenant = :t"), {"t": tenant}
        ).scalar_one()


def refused_metric(client: TestClient, tenant: str, reason: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("cronfleet_api_tenant_refused_total{") and (
            f'tenant="{tenant}"' in line and f'reason="{reason}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- priorities are the operator's ----------------------------------------------------------


def test_a_tier_the_tenant_may_not_use_is_refused_and_nothing_is_written(
    limited: TestClient, auth: Headers, row_counts: Callable[[], dict[str, int]]
) -> None:
    h = auth("beta")
    before = row_counts()
    got = limited.post("/v1/jobs", json=job(priority="critical"), headers=h)
    assert got.status_code == 403
    assert "critical" in fields_of(got)["priority"]
    assert got.json()["error"]["code"] == "forbidden"
    batch = {"jobs": [job("a"), job("b", priority="high")]}
    got = limited.post("/v1/jobs:batch", json=batch, headers=h)
    assert got.status_code == 403 and "jobs[1].priority" in fields_of(got)
    assert row_counts() == before
    assert refused_metric(limited, "beta", "tiers") == 2


def test_a_job_naming_no_tier_gets_the_tenants_default(limited: TestClient, auth: Headers) -> None:
    made = limited.post("/v1/jobs", json=job(), headers=auth("lowly"))
    assert made.status_code == 201 and made.json()["priority"] == "low"
    made = limited.post("/v1/jobs", json=job(), headers=auth("beta"))
    assert made.status_code == 201 and made.json()["priority"] == "normal"
    batch = limited.post("/v1/jobs:batch", json={"jobs": [job("x")]}, headers=auth("lowly"))
    assert batch.status_code == 201


def test_an_edit_run_now_and_backfill_refuse_a_tier_the_tenant_may_not_use(
    limited: TestClient, auth: Headers, engine: Engine, policy_file: Path
) -> None:
    h = auth("beta")
    made = limited.post("/v1/jobs", json=job(priority="normal"), headers=h).json()
    edit = limited.patch(f"/v1/jobs/{made['job_id']}", json={"priority": "high"}, headers=h)
    assert edit.status_code == 403 and "priority" in fields_of(edit)
    # the operator takes `normal` back from beta: its existing job may not be run by hand
    policy_file.write_text(POLICY.replace('tiers = ["normal", "low"]', 'tiers = ["low"]'))
    os.utime(policy_file, ns=(time.time_ns() + 10**9,) * 2)

    def read_again() -> bool:  # a job naming no tier now gets `low`
        got = limited.post("/v1/jobs", json=job(f"probe-{time.monotonic_ns()}"), headers=h)
        return got.json()["priority"] == "low"

    wait_until("the edited tenant policy to be read", read_again, 10, poll_s=0.2)
    got = limited.post(f"/v1/jobs/{made['job_id']}/runs", headers=h)
    assert got.status_code == 403 and "not 'normal'" in fields_of(got)["priority"]
    body = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"}
    got = limited.post(f"/v1/jobs/{made['job_id']}:backfill", json=body, headers=h)
    assert got.status_code == 403 and "priority" in fields_of(got)
    with engine.connect() as conn:
        runs = conn.execute(
            text("SELECT count(*) FROM runs WHERE job_id = :j"), {"j": made["job_id"]}
        ).scalar_one()
    assert runs == 0


# -- most jobs ---------------------------------------------------------------------------


def test_max_jobs_refuses_the_job_past_it_naming_the_count_and_the_limit(
    limited: TestClient, auth: Headers, engine: Engine
) -> None:
    h = auth("capped")
    for i in range(2):
        assert limited.post("/v1/jobs", json=job(f"j{i}"), headers=h).status_code == 201
    batch = {"jobs": [job("b1"), job("b2")]}
    got = limited.post("/v1/jobs:batch", json=batch, headers=h)
    assert got.status_code == 403 and got.json()["error"]["code"] == "max_jobs"
    reason = fields_of(got)["max_jobs"]
    assert "2 jobs" in reason and "limit is 3" in reason
    assert job_count(engine, "capped") == 2  # the batch crossing the limit wrote nothing
    assert limited.post("/v1/jobs", json=job("j2"), headers=h).status_code == 201
    got = limited.post("/v1/jobs", json=job("j3"), headers=h)
    assert got.status_code == 403 and "3 jobs" in fields_of(got)["max_jobs"]
    assert job_count(engine, "capped") == 3
    assert limited.post("/v1/jobs", json=job("other"), headers=auth("beta")).status_code == 201
    assert refused_metric(limited, "capped", "max_jobs") == 2
    metrics = limited.get("/metrics").text
    assert 'cronfleet_api_tenant_jobs_refused_total{tenant="capped"} 3.0' in metrics


# -- API requests per second --------------------------------------------------------------


def test_a_tenant_over_its_rate_gets_429_with_retry_after_and_another_does_not(
    limited: TestClient, auth: Headers, make_token: Callable[..., str]
) -> None:
    noisy, calm = auth("noisy"), auth("calm")
    answers = [limited.get("/v1/jobs", headers=noisy).status_code for _ in range(3)]
    assert answers == [200, 200, 429]  # a burst of 2, then one per 100 s
    got = limited.get("/v1/jobs", headers=noisy)
    assert got.status_code == 429
    assert int(got.headers["Retry-After"]) >= 1
    assert got.json()["error"]["code"] == "rate_limited"
    assert "api_rate_per_s" in fields_of(got)
    assert all(limited.get("/v1/jobs", headers=calm).status_code == 200 for _ in range(5))
    assert refused_metric(limited, "noisy", "api_rate") == 2
    # the operator's own token (its tenant, `admin`) is never limited, even with a rate set
    operator = {"Authorization": f"Bearer {make_token('ops', ('admin',))}"}
    assert all(limited.get("/v1/jobs", headers=operator).status_code == 200 for _ in range(3))
    # another token of the same tenant shares its bucket
    assert limited.get("/v1/jobs", headers=auth("noisy")).status_code == 429


def test_the_consoles_requests_count_against_the_tenants_rate(
    limited: TestClient, make_token: Callable[..., str]
) -> None:
    login(limited, make_token("noisy"))
    statuses = [limited.get("/console/jobs").status_code for _ in range(3)]
    assert statuses[-1] == 429
    assert int(limited.get("/console/jobs").headers["Retry-After"]) >= 1


# -- queued tasks per queue --------------------------------------------------------------


def test_an_enqueue_past_the_queue_limit_gets_429_and_writes_nothing(
    limited: TestClient, auth: Headers, engine: Engine
) -> None:
    h = auth("filler")
    assert limited.post("/v1/queues/q/tasks", json={"payload": 1}, headers=h).status_code == 201
    batch = {"tasks": [{"payload": 2}, {"payload": 3}]}
    got = limited.post("/v1/queues/q/tasks:batch", json=batch, headers=h)
    assert got.status_code == 429 and int(got.headers["Retry-After"]) >= 1
    assert "max_queued_per_queue" in fields_of(got)
    assert limited.post("/v1/queues/q/tasks", json={"payload": 2}, headers=h).status_code == 201
    got = limited.post("/v1/queues/q/tasks", json={"payload": 3}, headers=h)
    assert got.status_code == 429 and "2 unfinished tasks" in fields_of(got)["max_queued_per_queue"]
    with engine.connect() as conn:
        queued = conn.execute(
            text("SELECT count(*) FROM queue_tasks WHERE tenant = 'filler'")
        ).scalar_one()
    assert queued == 2
    # another queue of the tenant has its own count
    assert limited.post("/v1/queues/r/tasks", json={"payload": 1}, headers=h).status_code == 201
    # a lease frees nothing (a leased task is unfinished); an ack does
    lease = {"worker_id": "w", "max_tasks": 1}
    leased = limited.post("/v1/queues/q/lease", json=lease, headers=h).json()
    task = leased["tasks"][0]
    ack = {"lease_token": task["lease_token"], "result": None}
    assert limited.post(f"/v1/tasks/{task['task_id']}/ack", json=ack, headers=h).status_code == 200
    assert limited.post("/v1/queues/q/tasks", json={"payload": 4}, headers=h).status_code == 201
    assert refused_metric(limited, "filler", "max_queued_per_queue") == 2


# -- the file ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [("api", "--port", "1"), ("worker",)], ids=["api", "worker"])
def test_a_service_refuses_a_bad_file_at_start_with_one_line(
    tmp_path: Path, settings: Settings, command: tuple[str, ...]
) -> None:
    bad = tmp_path / "tenants.toml"
    bad.write_text("[tenants.acme]\nweight = -2\n")
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "CRONFLEET_DATABASE_URL": settings.database_url,
            "CRONFLEET_TENANT_POLICY_FILE": str(bad),
        },
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert (
        str(bad) in lines[0] and "tenants.acme.weight: must be a number greater than 0" in lines[0]
    )


def test_an_edit_that_breaks_the_file_fails_closed_then_recovers(
    limited: TestClient, auth: Headers, policy_file: Path
) -> None:
    h = auth("beta")
    assert limited.post("/v1/jobs", json=job("before"), headers=h).status_code == 201
    policy_file.write_text(POLICY + "\n[tenants.beta]\nweight = 0\n")
    os.utime(policy_file, ns=(time.time_ns() + 10**9,) * 2)

    def refused() -> bool:
        return limited.post("/v1/jobs", json=job("during"), headers=h).status_code == 403

    wait_until("the broken edit to fail closed", refused, 10, poll_s=0.2)
    policy_file.write_text(POLICY)
    os.utime(policy_file, ns=(time.time_ns() + 2 * 10**9,) * 2)

    def created() -> bool:
        return limited.post("/v1/jobs", json=job("after"), headers=h).status_code == 201

    wait_until("the fixed file to be read again", created, 10, poll_s=0.2)

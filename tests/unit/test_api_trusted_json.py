"""The hot jobs routes answer with `trusted_json(job_fields(...))` instead of returning a
JobOut for FastAPI to validate and serialize: the bytes must be the ones the response
model would give (same fields, same order, same serializer), for records as the store
returns them (times in any zone, with and without microseconds, absent values, secret
task values)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from fastapi.encoders import jsonable_encoder

from kit.api.models import (
    JobOut,
    RunOut,
    RunPageOut,
    job_fields,
    run_fields,
    trusted_json,
)
from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import parse_schedule
from kit.store.jobs import JobRecord, JobSpec
from kit.store.runs import RunRecord

AT = datetime(2030, 1, 7, 10, 2, 30, 123456, tzinfo=ZoneInfo("Etc/UTC"))
SCHEDULES = [
    {"cron": "*/15 * * * *", "timezone": "Europe/Paris"},
    {"every_s": 300, "anchor": "2030-01-01T00:00:00Z"},
    {"at": "2030-02-01T09:00:00+01:00"},
]
TASKS = [
    {"type": "noop"},
    {
        "type": "http",
        "url": "https://example.org/x",
        "method": "POST",
        "headers": {"Authorization": "Bearer secret", "X-Plain": "v"},
        "body": {"n": 10**30, "s": "é\u2028", "f": 1.5, "l": [None, True]},
    },
    {
        "type": "command",
        "argv": ["/bin/echo", "hi"],
        "env": {"TOKEN": "s3cret", "PLAIN": "p"},
        "secret_env": ["TOKEN"],
    },
]


def record(schedule: dict, task: dict, paused: bool, next_fire_at: datetime | None) -> JobRecord:
    spec = JobSpec(
        name="report \u00e9",
        schedule=parse_schedule(schedule, now=AT),
        task=task,
        retry=RetryPolicy().to_dict(),
        misfire=MisfirePolicy().to_dict(),
        priority="high",
        paused=paused,
        pause_after_dead=None if paused else 3,
    )
    return JobRecord(
        job_id="0b7f1d2e-8f5c-4a55-9f0e-3a3c1d2e4f50",
        tenant="acme",
        spec=spec,
        version=4,
        created_at=AT,
        updated_at=AT.astimezone(timezone(timedelta(hours=-3, minutes=-30))),
        next_fire_at=next_fire_at,
    )


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("paused", [False, True])
@pytest.mark.parametrize(
    "next_fire_at", [None, datetime(2030, 1, 7, 10, 15, tzinfo=UTC), AT.replace(microsecond=0)]
)
def test_a_job_is_the_bytes_jobout_gives(
    schedule: dict, task: dict, paused: bool, next_fire_at: datetime | None
) -> None:
    job = record(schedule, task, paused, next_fire_at)
    expected = JobOut.of(job).model_dump_json().encode()
    assert trusted_json(job_fields(job)).body == expected
    assert b"s3cret" not in expected and b"Bearer secret" not in expected
    assert list(job_fields(job)) == list(JobOut.model_fields)


def run(status: str, finished: datetime | None) -> RunRecord:
    return RunRecord(
        run_id="018f0000-0000-7000-8000-000000000001",
        job_id="0b7f1d2e-8f5c-4a55-9f0e-3a3c1d2e4f50",
        tenant="acme",
        job_version=2,
        priority="normal",
        scheduled_at=AT,
        attempt=1,
        status=status,
        trigger_kind="schedule",
        worker_id="w-1" if finished else None,
        lease_expires_at=None,
        dispatched_at=None,
        started_at=finished,
        finished_at=finished,
        error="boom \u0000-free" if status == "dead" else None,
        skip_reason=None,
        created_at=AT,
        cancelled_by=None,
    )


def test_a_page_of_runs_is_the_bytes_runpageout_gives() -> None:
    runs = [run("pending", None), run("dead", AT + timedelta(seconds=3)), run("succeeded", AT)]
    for next_cursor in (None, "MTIzOmFi"):
        expected = RunPageOut(runs=[RunOut.of(r) for r in runs], next_cursor=next_cursor)
        body = {"runs": [run_fields(r) for r in runs], "next_cursor": next_cursor}
        assert trusted_json(body).body == expected.model_dump_json().encode()
    assert list(run_fields(runs[0])) == list(RunOut.model_fields)


def test_the_response_is_json_with_its_status_and_headers() -> None:
    job = record(SCHEDULES[0], TASKS[0], False, None)
    response = trusted_json(job_fields(job), 201, {"Idempotent-Replayed": "true"})
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    assert response.headers["idempotent-replayed"] == "true"
    assert jsonable_encoder(JobOut.of(job))["job_id"] == job.job_id

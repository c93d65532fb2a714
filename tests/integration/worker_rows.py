"""Rows for the worker, reaper and dead-letter tests: a job made through the job
repository and runs inserted directly, so these tests do not depend on the scheduler."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select, text

from kit.core.ids import run_id as make_run_id
from kit.core.schedule import parse_schedule
from kit.core.task_policy import TaskPolicy
from kit.store.jobs import JobCreate, JobSpec, job_create
from kit.store.schema import runs
from kit.tasks.policy import PolicySource, local_policy_toml

# The operator's task policy of the workers these tests start: tenant acme may run
# /bin/sh (commands are the operator's decision; by default nobody runs any), as `nobody`
# where the tests run as root: what its commands write goes to the `shared_dir` fixture.
COMMANDS = PolicySource.fixed(
    TaskPolicy.parse(tomllib.loads(local_policy_toml("acme", ["/bin/sh"])))
)


def make_job(
    engine: Engine,
    task: dict[str, Any] | None = None,
    retry: dict[str, Any] | None = None,
    tenant: str = "acme",
    name: str = "job",
    timeout_s: int = 60,
    pause_after_dead: int | None = None,
    overlap: str = "allow",
) -> str:
    spec = JobSpec(
        name=name,
        schedule=parse_schedule({"every_s": 3600}, now=datetime.now(UTC)),
        task=task or {"type": "noop"},
        retry=retry or {"max_attempts": 3, "base_s": 1.0, "cap_s": 10.0, "jitter": "none"},
        misfire={"kind": "run_once", "deadline_s": 60},
        timeout_s=timeout_s,
        overlap=overlap,
        pause_after_dead=pause_after_dead,
    )
    return job_create(engine, JobCreate(tenant=tenant, spec=spec)).job.job_id


def make_run(
    engine: Engine,
    job_id: str,
    scheduled_at: datetime | None = None,
    tenant: str = "acme",
    status: str = "pending",
    **values: Any,
) -> str:
    at = scheduled_at or datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    rid = make_run_id(job_id, at)
    with engine.begin() as conn:
        conn.execute(
            runs.insert().values(
                run_id=rid,
                job_id=job_id,
                tenant=tenant,
                job_version=1,
                scheduled_at=at,
                status=status,
                trigger_kind="schedule",
                **values,
            )
        )
    return rid


def run_row(engine: Engine, run_id: str) -> Any:
    with engine.begin() as conn:
        return conn.execute(select(runs).where(runs.c.run_id == run_id)).one()


def rearm_retry(engine: Engine, run_id: str) -> int:
    """The scheduler's retry re-arm (RUN_CONTRACT): the retry trigger of the run fires,
    the run goes retry_scheduled -> pending at the trigger's attempt, the trigger goes.
    Returns the attempt."""
    with engine.begin() as conn:
        trig = conn.execute(
            text(
                """
                DELETE FROM triggers t USING runs r
                WHERE t.kind = 'retry' AND t.job_id = r.job_id
                  AND t.run_scheduled_at = r.scheduled_at AND r.run_id = :run_id
                RETURNING t.attempt
                """
            ),
            {"run_id": run_id},
        ).one()
        conn.execute(
            text(
                """
                UPDATE runs SET status = 'pending', attempt = :attempt, dispatched_at = NULL,
                    retry_at = NULL
                WHERE run_id = :run_id AND status = 'retry_scheduled'
                """
            ),
            {"run_id": run_id, "attempt": trig.attempt},
        )
    return trig.attempt


def expire_lease(engine: Engine, run_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET lease_expires_at = now() - interval '1 s' WHERE run_id = :r"),
            {"r": run_id},
        )

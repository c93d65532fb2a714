"""The job repository against the real PostgreSQL: a job and its trigger are written
together, edits replace the trigger with one of the new version, deletes keep history.

The operations the HTTP API runs (create, get, edit, delete, a job's runs) are driven
both ways the store offers them (`store`): on an Engine, and as the API does, on the
async pool (`*_async`), so neither driver can drift from what these tests hold."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select

from kit.core.ids import run_id
from kit.core.jitter import jitter_offset_ms
from kit.core.partitions import partition_of
from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import parse_schedule
from kit.store import jobs as job_store
from kit.store import runs as run_store
from kit.store.errors import IdempotencyConflict, JobNotFound, NameTaken
from kit.store.jobs import JobCreate, JobSpec, JobUpdate, jobs_create_batch
from kit.store.pg_async import AsyncPool, conninfo_of
from kit.store.runs import run_now
from kit.store.schema import api_tokens, jobs, triggers
from kit.store.tokens import token_create, token_revoke, token_verify

pytestmark = pytest.mark.integration

NOW = datetime(2030, 1, 7, 10, 2, 30, tzinfo=UTC)  # explicit time: no clock in assertions
OPERATIONS = ("job_create", "job_get", "job_update", "job_delete", "runs_list")


class Store:
    """The jobs API's store operations on one driver: `store.job_get(tenant, job_id)`."""

    def __init__(self, engine: Engine, pool: AsyncPool | None) -> None:
        self.engine, self.pool = engine, pool

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in OPERATIONS:
            raise AttributeError(name)
        module = run_store if name == "runs_list" else job_store
        if self.pool is None:
            sync = getattr(module, name)
            return lambda *args, **kwargs: sync(self.engine, *args, **kwargs)
        run = getattr(module, f"{name}_async")
        pool = self.pool
        return lambda *args, **kwargs: asyncio.run(run(pool, *args, **kwargs))


@pytest.fixture(params=["engine", "async pool"])
def store(request: pytest.FixtureRequest, engine: Engine) -> Iterator[Store]:
    if request.param == "engine":
        yield Store(engine, None)
        return
    pool = AsyncPool(conninfo_of(engine.url), size=2)
    yield Store(engine, pool)
    asyncio.run(pool.close())


def spec(name: str = "report", schedule: dict | None = None, **extra: object) -> JobSpec:
    return JobSpec(
        name=name,
        schedule=parse_schedule(schedule or {"cron": "*/15 * * * *"}, now=NOW),
        task={"type": "noop"},
        retry=RetryPolicy().to_dict(),
        misfire=MisfirePolicy().to_dict(),
        **extra,  # type: ignore[arg-type]
    )


def trigger_rows(engine: Engine, job_id: str | None = None) -> list:
    query = select(triggers).order_by(triggers.c.fire_at)
    if job_id is not None:
        query = query.where(triggers.c.job_id == job_id)
    with engine.connect() as conn:
        return list(conn.execute(query))


def test_create_writes_job_and_first_trigger(store: Store, engine: Engine) -> None:
    created = store.job_create(JobCreate(tenant="acme", spec=spec(), partitions=64, now=NOW))
    job = created.job
    assert created.created and job.version == 1 and job.status == "active"
    [trigger] = trigger_rows(engine, job.job_id)
    assert trigger.partition_id == partition_of(job.job_id, 64)
    assert trigger.fire_at == datetime(2030, 1, 7, 10, 15, tzinfo=UTC)
    assert (trigger.job_version, trigger.kind, trigger.attempt) == (1, "schedule", 1)
    assert job.next_fire_at == trigger.fire_at
    assert store.job_get("acme", job.job_id) == job


def test_trigger_fire_time_carries_the_jobs_deterministic_jitter(
    store: Store, engine: Engine
) -> None:
    job = store.job_create(JobCreate(tenant="acme", spec=spec(jitter_s=600), now=NOW)).job
    [trigger] = trigger_rows(engine, job.job_id)
    offset = timedelta(milliseconds=jitter_offset_ms(job.job_id, 600_000))
    assert trigger.fire_at == datetime(2030, 1, 7, 10, 15, tzinfo=UTC) + offset


def test_create_with_taken_name_writes_nothing(
    store: Store, engine: Engine, row_counts: Callable[[], dict[str, int]]
) -> None:
    store.job_create(JobCreate(tenant="acme", spec=spec(), now=NOW))
    before = row_counts()
    with pytest.raises(NameTaken):
        store.job_create(
            JobCreate(tenant="acme", spec=spec(), now=NOW, idempotency_key="k", request_hash="h"),
        )
    assert row_counts() == before
    # The same name in another tenant is a different job.
    store.job_create(JobCreate(tenant="other", spec=spec(), now=NOW))


def test_idempotency_key_returns_the_same_job_or_conflicts(store: Store, engine: Engine) -> None:
    params = JobCreate(tenant="acme", spec=spec(), now=NOW, idempotency_key="k1", request_hash="a")
    first = store.job_create(params)
    again = store.job_create(params)
    assert (first.created, again.created) == (True, False)
    assert again.job.job_id == first.job.job_id
    with engine.connect() as conn:
        assert len(conn.execute(select(jobs)).all()) == 1
    with pytest.raises(IdempotencyConflict, match="different request body"):
        store.job_create(
            JobCreate(tenant="acme", spec=spec(), now=NOW, idempotency_key="k1", request_hash="b"),
        )
    store.job_delete("acme", first.job.job_id)
    with pytest.raises(IdempotencyConflict, match="deleted"):
        store.job_create(params)


def test_edit_bumps_version_and_replaces_the_trigger(store: Store, engine: Engine) -> None:
    job = store.job_create(JobCreate(tenant="acme", spec=spec(), now=NOW)).job
    later = NOW + timedelta(minutes=1)
    edited = store.job_update(
        JobUpdate(
            tenant="acme",
            job_id=job.job_id,
            changes={"schedule": parse_schedule({"cron": "0 12 * * *"}, now=NOW)},
            now=later,
        ),
    )
    assert edited.version == 2
    rows = trigger_rows(engine, job.job_id)
    assert [(r.job_version, r.fire_at) for r in rows] == [
        (2, datetime(2030, 1, 7, 12, 0, tzinfo=UTC))
    ]
    # An edit that leaves the schedule alone keeps the fire time, under the new version.
    renamed = store.job_update(
        JobUpdate(tenant="acme", job_id=job.job_id, changes={"name": "renamed"}, now=later)
    )
    assert renamed.version == 3 and renamed.spec.name == "renamed"
    assert [(r.job_version, r.fire_at) for r in trigger_rows(engine, job.job_id)] == [
        (3, datetime(2030, 1, 7, 12, 0, tzinfo=UTC))
    ]


def test_pause_keeps_the_trigger_and_resume_keeps_it_firing(store: Store, engine: Engine) -> None:
    job = store.job_create(JobCreate(tenant="acme", spec=spec(), now=NOW)).job
    paused = store.job_update(
        JobUpdate(tenant="acme", job_id=job.job_id, changes={"paused": True}, now=NOW)
    )
    assert paused.status == "paused" and paused.version == 2
    [trigger] = trigger_rows(engine, job.job_id)
    assert trigger.job_version == 2 and trigger.fire_at == job.next_fire_at
    resumed = store.job_update(
        JobUpdate(tenant="acme", job_id=job.job_id, changes={"paused": False}, now=NOW)
    )
    assert resumed.status == "active" and resumed.version == 3
    assert [r.job_version for r in trigger_rows(engine, job.job_id)] == [3]


def test_a_fired_one_off_stays_fired_across_an_edit(store: Store, engine: Engine) -> None:
    at = {"at": (NOW + timedelta(hours=1)).isoformat()}
    job = store.job_create(JobCreate(tenant="acme", spec=spec(schedule=at), now=NOW)).job
    assert trigger_rows(engine, job.job_id)[0].fire_at == NOW + timedelta(hours=1)
    with engine.begin() as conn:  # what the scheduler does once it fired
        conn.execute(triggers.delete().where(triggers.c.job_id == job.job_id))
    edited = store.job_update(
        JobUpdate(tenant="acme", job_id=job.job_id, changes={"priority": "high"}, now=NOW)
    )
    assert edited.status == "finished" and trigger_rows(engine, job.job_id) == []


def test_delete_removes_triggers_and_keeps_runs(store: Store, engine: Engine) -> None:
    job = store.job_create(JobCreate(tenant="acme", spec=spec(), now=NOW)).job
    other = store.job_create(JobCreate(tenant="acme", spec=spec("other"), now=NOW)).job
    run, _ = run_now(engine, "acme", job.job_id, now=NOW)
    store.job_delete("acme", job.job_id)
    assert trigger_rows(engine, job.job_id) == []
    assert len(trigger_rows(engine, other.job_id)) == 1
    with pytest.raises(JobNotFound):
        store.job_get("acme", job.job_id)
    history = store.runs_list("acme", job.job_id).runs
    assert [r.run_id for r in history] == [run.run_id]
    # the run was owed but never started: its history says why it will not run
    assert (history[0].status, history[0].error) == ("cancelled", "job deleted")
    with pytest.raises(JobNotFound):
        store.job_delete("acme", job.job_id)


def test_an_edit_keeps_the_retry_a_failed_run_is_owed(store: Store, engine: Engine) -> None:
    job = store.job_create(JobCreate(tenant="acme", spec=spec(), now=NOW)).job
    retry_at = NOW + timedelta(seconds=30)
    with engine.begin() as conn:
        conn.execute(
            triggers.insert().values(
                partition_id=partition_of(job.job_id),
                fire_at=retry_at,
                job_id=job.job_id,
                job_version=1,
                kind="retry",
                attempt=2,
                run_scheduled_at=NOW,
            )
        )
    store.job_update(JobUpdate(tenant="acme", job_id=job.job_id, changes={"name": "x"}, now=NOW))
    kinds = sorted((r.kind, r.job_version) for r in trigger_rows(engine, job.job_id))
    assert kinds == [("retry", 1), ("schedule", 2)]


def _job_with_a_fire_owed(store: Store, name: str) -> tuple[str, datetime, datetime]:
    """An hourly job with 50 minutes of jitter, edited after its 12:00 occurrence passed
    but before its jittered fire: (job id, the old trigger's fire time, the edit's now).
    Job ids are random; one whose jitter is under 2 s (1 in 1,500) is deleted and drawn
    again, so there is always an instant between the occurrence and its fire."""
    noon = datetime(2030, 1, 7, 12, tzinfo=UTC)
    for attempt in range(5):
        job = store.job_create(
            JobCreate(
                tenant="acme",
                spec=spec(f"{name}-{attempt}", {"cron": "0 * * * *"}, jitter_s=3000),
                now=datetime(2030, 1, 7, 11, 0, 1, tzinfo=UTC),
            ),
        ).job
        fire_at = job.next_fire_at
        assert fire_at is not None and noon <= fire_at < noon + timedelta(minutes=50)
        if fire_at - noon >= timedelta(seconds=2):
            return job.job_id, fire_at, noon + (fire_at - noon) / 2
        store.job_delete("acme", job.job_id)
    raise AssertionError("five job ids in a row drew under 2 s of jitter")


def test_a_jitter_edit_keeps_the_fire_it_owed(store: Store, engine: Engine) -> None:
    """Regression (issue 7, item 13): a new jitter recomputed the trigger from now, so the
    12:00 occurrence, whose jittered fire had not come yet, was silently dropped."""
    job_id, _old, at = _job_with_a_fire_owed(store, "jittered")
    store.job_update(JobUpdate(tenant="acme", job_id=job_id, changes={"jitter_s": 0}, now=at))
    [trigger] = trigger_rows(engine, job_id)
    assert trigger.fire_at == datetime(2030, 1, 7, 12, tzinfo=UTC)  # owed: fires (late) now


def test_a_schedule_edit_records_the_fire_it_no_longer_owes(store: Store, engine: Engine) -> None:
    """The 12:00 occurrence of the old schedule is not one of the new one: it does not run,
    and the run history says why instead of leaving a silent gap."""
    job_id, old, at = _job_with_a_fire_owed(store, "rescheduled")
    new = parse_schedule({"cron": "30 * * * *"}, now=at)
    store.job_update(JobUpdate(tenant="acme", job_id=job_id, changes={"schedule": new}, now=at))
    history = store.runs_list("acme", job_id).runs
    assert [(r.run_id, r.status, r.skip_reason) for r in history] == [
        (run_id(job_id, old), "skipped", "edited")
    ]
    [trigger] = trigger_rows(engine, job_id)
    assert trigger.fire_at - datetime(2030, 1, 7, 12, 30, tzinfo=UTC) == timedelta(
        milliseconds=jitter_offset_ms(job_id, 3_000_000)
    )


def test_a_schedule_edit_keeps_an_owed_fire_both_schedules_have(
    store: Store, engine: Engine
) -> None:
    job_id, old, at = _job_with_a_fire_owed(store, "widened")
    new = parse_schedule({"cron": "0,30 * * * *"}, now=at)
    store.job_update(JobUpdate(tenant="acme", job_id=job_id, changes={"schedule": new}, now=at))
    [trigger] = trigger_rows(engine, job_id)
    assert trigger.fire_at == old  # the 12:00 occurrence still fires, at its own time
    assert store.runs_list("acme", job_id).runs == []


def test_other_tenants_job_is_not_found(store: Store, engine: Engine) -> None:
    job = store.job_create(JobCreate(tenant="acme", spec=spec(), now=NOW)).job
    for call in (
        lambda: store.job_get("rival", job.job_id),
        lambda: store.job_delete("rival", job.job_id),
        lambda: store.job_update(JobUpdate(tenant="rival", job_id=job.job_id, changes={})),
        lambda: run_now(engine, "rival", job.job_id),
        lambda: store.job_get("acme", "not-a-uuid"),
    ):
        with pytest.raises(JobNotFound):
            call()
    assert store.job_get("acme", job.job_id).version == 1


def test_batch_writes_every_job_and_trigger(store: Store, engine: Engine) -> None:
    specs = [spec(f"job-{i}", {"every_s": 60 + i, "anchor": NOW.isoformat()}) for i in range(3000)]
    job_ids = jobs_create_batch(engine, "acme", specs, partitions=1024, now=NOW)
    assert len(set(job_ids)) == 3000
    rows = {r.job_id: r for r in trigger_rows(engine)}
    assert set(rows) == set(job_ids)
    for i in (0, 1234, 2999):
        assert rows[job_ids[i]].partition_id == partition_of(job_ids[i], 1024)
        assert rows[job_ids[i]].fire_at == NOW + timedelta(seconds=60 + i)
    assert store.job_get("acme", job_ids[7]).spec.name == "job-7"


def test_batch_is_all_or_nothing(
    store: Store, engine: Engine, row_counts: Callable[[], dict[str, int]]
) -> None:
    store.job_create(JobCreate(tenant="acme", spec=spec("taken"), now=NOW))
    before = row_counts()
    specs = [spec(f"job-{i}") for i in range(500)] + [spec("taken")]
    with pytest.raises(NameTaken) as refused:
        jobs_create_batch(engine, "acme", specs, now=NOW)
    assert refused.value.names == ["taken"]
    with pytest.raises(NameTaken):
        jobs_create_batch(engine, "acme", [spec("twice"), spec("twice")], now=NOW)
    assert row_counts() == before


def test_run_now_is_one_run_per_millisecond(store: Store, engine: Engine) -> None:
    job = store.job_create(JobCreate(tenant="acme", spec=spec(), now=NOW)).job
    first, created = run_now(engine, "acme", job.job_id, now=NOW + timedelta(microseconds=100))
    second, again = run_now(engine, "acme", job.job_id, now=NOW + timedelta(microseconds=900))
    assert (created, again) == (True, False)
    assert first == second
    assert first.run_id == run_id(job.job_id, NOW)
    assert (first.status, first.trigger_kind, first.dispatched_at) == ("pending", "manual", None)
    third, created = run_now(engine, "acme", job.job_id, now=NOW + timedelta(milliseconds=1))
    assert created and third.run_id != first.run_id


def test_tokens_verify_by_hash_and_revoke(engine: Engine) -> None:
    issued = token_create(engine, "acme", ["read"])
    assert issued.token.startswith(f"cf_{issued.token_id}_")
    info = token_verify(engine, issued.token)
    assert info is not None and info.tenant == "acme" and info.scopes == ("read",)
    assert not info.allows("write")
    with engine.connect() as conn:
        stored = conn.execute(select(api_tokens)).one()
    secret = issued.token.split("_", 2)[2]
    assert secret not in str(tuple(stored)) and len(stored.secret_hash) == 64
    assert (
        token_verify(engine, issued.token[:-1] + ("A" if issued.token[-1] != "A" else "B")) is None
    )
    assert token_verify(engine, "cf_0000000000000000_" + secret) is None
    assert token_revoke(engine, issued.token_id)
    assert token_verify(engine, issued.token) is None

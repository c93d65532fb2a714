"""The run history on the real PostgreSQL: `runs` partitioned by day on ranges of the
run id. A run lands in its day; a day past the retention is dropped whole, except the
runs the kit still needs (live, or with a dead letter), which survive it and still
claim, finish and list; the default partition is pruned by the same rule; a day made
late takes its runs out of the default partition; a database at 0010 keeps every row."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import Engine, create_engine, text

from kit.core.ids import run_id
from kit.core.retention import run_kept_past_retention
from kit.store import migrate
from kit.store.claims import Claim, runs_claim, runs_finish_ok
from kit.store.dead_letters import dead_letters_list
from kit.store.run_history import (
    DEFAULT_PARTITION,
    create_day_in,
    ensure_run_days,
    maintain_run_history,
    partition_name,
    run_partitions,
)
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration
DAY = 86_400
STATUSES = ("pending", "running", "retry_scheduled", "succeeded", "dead", "skipped", "cancelled")


def where(engine: Engine, rid: str) -> str:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT tableoid::regclass::text FROM runs WHERE run_id = :r"), {"r": rid}
        ).scalar_one()


def days(engine: Engine) -> list[date]:
    with engine.connect() as conn:
        return [p.day for p in run_partitions(conn) if p.day is not None]


def put_run(engine: Engine, job: str, at: datetime, status: str) -> str:
    extra: dict[str, object] = {}
    if status == "running":
        extra = {"lease_token": str(uuid.uuid4()), "lease_expires_at": at + timedelta(hours=1)}
    return make_run(engine, job, scheduled_at=at, status=status, **extra)


def test_a_migrated_database_has_its_days_and_a_run_lands_in_its_own(engine: Engine) -> None:
    with engine.connect() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
        names = [p.name for p in run_partitions(conn)]
    today = now.astimezone(UTC).date()
    assert DEFAULT_PARTITION in names
    for offset in range(-1, 4):
        assert partition_name(today + timedelta(days=offset)) in names
    job = make_job(engine)
    at = datetime.combine(today, datetime.min.time(), UTC) + timedelta(days=1, hours=23)
    assert where(engine, put_run(engine, job, at, "pending")) == partition_name(at.date())
    far = at + timedelta(days=200)  # no day of its own: the default partition takes it
    assert where(engine, put_run(engine, job, far, "pending")) == DEFAULT_PARTITION


def test_a_day_past_the_retention_is_dropped_but_what_the_kit_needs_survives(
    engine: Engine,
) -> None:
    """Every status, with and without a dead letter, on an old day and on a recent
    one: after the pass exactly the old day's rows the core keeps are left, now in the
    default partition, and the recent day is untouched."""
    job = make_job(engine)
    old_day = date(2026, 1, 10)
    now = datetime(2026, 2, 20, 12, tzinfo=UTC)  # retention 30 days: Jan 10 is past it
    with engine.begin() as conn:
        create_day_in(conn, old_day)
    ensure_run_days(engine, ahead_days=0, now=now)
    assert old_day in days(engine) and now.date() in days(engine)
    expect_kept, recent = set(), set()
    for i, status in enumerate(STATUSES):
        for with_letter in (False, True):
            at = datetime.combine(old_day, datetime.min.time(), UTC) + timedelta(
                minutes=i * 2 + with_letter
            )
            rid = put_run(engine, job, at, status)
            if with_letter:
                with engine.begin() as conn:
                    conn.execute(
                        text(
                            "INSERT INTO dead_letters (run_id, job_id, tenant, errors)"
                            ' VALUES (:r, :j, \'acme\', \'[{"attempt": 1, "error": "x"}]\')'
                        ),
                        {"r": rid, "j": job},
                    )
            if run_kept_past_retention(status, with_letter):
                expect_kept.add(rid)
            assert where(engine, rid) == partition_name(old_day)
        recent.add(put_run(engine, job, now - timedelta(hours=1, minutes=i), status))

    done = maintain_run_history(engine, 30 * DAY, ahead_days=1, now=now)

    assert [d.day for d in done.dropped] == [old_day]
    # 3 live statuses with and without a letter, 4 finished ones with a letter
    assert done.dropped[0].kept == len(expect_kept) == 10
    assert old_day not in days(engine)
    with engine.connect() as conn:
        left = set(
            conn.execute(
                text("SELECT run_id::text FROM runs WHERE job_id = :j AND scheduled_at < :cut"),
                {"j": job, "cut": now - timedelta(days=2)},
            ).scalars()
        )
    assert left == expect_kept
    assert {where(engine, r) for r in expect_kept} == {DEFAULT_PARTITION}
    assert {where(engine, r) for r in recent} == {partition_name(now.date())}
    assert len(dead_letters_list(engine, "acme").dead_letters) == len(STATUSES)  # still listed

    # a kept pending run still claims and finishes by its id alone
    pending = run_id(job, datetime.combine(old_day, datetime.min.time(), UTC))
    [claimed] = runs_claim(engine, [Claim(pending, 1)], "w1", ttl_ms=60_000)
    accepted, _ = runs_finish_ok(engine, [(pending, claimed.lease_token)])
    assert accepted == {pending}

    # the next pass prunes the default partition by the same rule: the run that has just
    # succeeded goes, the live and dead-lettered ones stay
    again = maintain_run_history(engine, 30 * DAY, ahead_days=1, now=now)
    assert again.dropped == [] and again.pruned_default == 1
    with engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM runs WHERE run_id = :r"), {"r": pending}
            ).scalar_one()
            == 0
        )
    assert {where(engine, r) for r in expect_kept - {pending}} == {DEFAULT_PARTITION}


def test_a_day_made_late_takes_its_runs_out_of_the_default_partition(engine: Engine) -> None:
    job = make_job(engine)
    later = date(2031, 3, 4)
    at = datetime.combine(later, datetime.min.time(), UTC) + timedelta(hours=5)
    rid = put_run(engine, job, at, "pending")
    other = put_run(engine, job, at + timedelta(days=1), "pending")
    assert where(engine, rid) == DEFAULT_PARTITION
    done = maintain_run_history(
        engine, 30 * DAY, ahead_days=0, now=datetime.combine(later, datetime.min.time(), UTC)
    )
    assert later in done.created and done.moved_into_created == 1
    assert where(engine, rid) == partition_name(later)
    assert where(engine, other) == DEFAULT_PARTITION  # the next day was not made


def test_a_database_at_0010_keeps_every_run_through_the_partitioning(
    admin_engine: Engine, db_url: str
) -> None:
    """Old (version-5) ids are re-keyed to the new layout, so the kit's own rule names
    them (a retry's re-arm, explain, backfill); their dead letters follow; every row is
    kept, yesterday's and today's in their days, older ones in the default partition."""
    name = f"{db_url.rsplit('/', 1)[1]}_m"
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = db_url.rsplit("/", 1)[0] + "/" + name
    try:
        migrate.upgrade(url, "0010")
        engine = create_engine(url)
        job = str(uuid.uuid4())
        with engine.connect() as conn:
            today = conn.execute(text("SELECT now()")).scalar_one().astimezone(UTC)
        ats = [today - timedelta(days=40) + timedelta(days=i) for i in range(41)]
        old = {str(uuid.uuid5(uuid.NAMESPACE_URL, f"run-{i}")): at for i, at in enumerate(ats)}
        with engine.begin() as conn:
            for i, (rid, at) in enumerate(old.items()):
                status = STATUSES[i % len(STATUSES)]
                conn.execute(
                    text(
                        "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at,"
                        " status, trigger_kind, lease_token) VALUES (:r, :j, 'acme', 1, :at,"
                        " :s, 'schedule', CASE WHEN :s = 'running' THEN 'tok' END)"
                    ),
                    {"r": rid, "j": job, "at": at, "s": status},
                )
            dead = next(r for i, r in enumerate(old) if STATUSES[i % len(STATUSES)] == "dead")
            conn.execute(
                text("INSERT INTO dead_letters (run_id, job_id, tenant) VALUES (:r, :j, 'acme')"),
                {"r": dead, "j": job},
            )
        engine.dispose()
        migrate.upgrade(url)
        engine = create_engine(url)
        with engine.connect() as conn:
            found = dict(
                conn.execute(
                    text("SELECT run_id::text, scheduled_at FROM runs WHERE job_id = :j"),
                    {"j": job},
                ).all()
            )
            kind = conn.execute(
                text("SELECT relkind FROM pg_class WHERE relname = 'runs'")
            ).scalar_one()
            letter = conn.execute(text("SELECT run_id::text FROM dead_letters")).scalar_one()
        assert kind == "p"
        assert found == {run_id(job, at): at for at in old.values()}  # every row, re-keyed
        assert letter == run_id(job, old[dead])
        for rid, at in found.items():
            if at.date() >= today.date() - timedelta(days=1):
                assert where(engine, rid) == partition_name(at.date())
            else:
                assert where(engine, rid) == DEFAULT_PARTITION
        engine.dispose()
    finally:
        with admin_engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_maintenance_processes_side_by_side_make_and_drop_each_day_once(engine: Engine) -> None:
    """Any number of maintenance processes may run: passes at the same instant from
    several threads agree (no error, each day made once, the old day dropped once)."""
    from concurrent.futures import ThreadPoolExecutor

    now = datetime(2031, 6, 15, 12, tzinfo=UTC)
    with engine.begin() as conn:
        create_day_in(conn, date(2031, 5, 1))
    with ThreadPoolExecutor(4) as pool:
        passes = list(
            pool.map(
                lambda _: maintain_run_history(engine, 30 * DAY, ahead_days=2, now=now), range(4)
            )
        )
    created = [d for p in passes for d in p.created]
    assert sorted(created) == [date(2031, 6, d) for d in (14, 15, 16, 17)]
    dropped = [d.day for p in passes for d in p.dropped]
    assert len(dropped) == len(set(dropped)) and date(2031, 5, 1) in dropped
    assert all(d < date(2031, 5, 15) for d in dropped)  # only days past the retention
    assert date(2031, 5, 1) not in days(engine)


def test_the_maintenance_cli_makes_the_days_ahead_and_refuses_a_bad_retention(
    engine: Engine, db_url: str
) -> None:
    """Through `cronfleet maintenance --once`, as an operator runs it: the days ahead the
    setting asks for are made and named; a retention under a day is refused in one line."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "CRONFLEET_DATABASE_URL": db_url, "CRONFLEET_RUN_DAYS_AHEAD": "6"}
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "maintenance", "--once"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        today = conn.execute(text("SELECT now()")).scalar_one().astimezone(UTC).date()
    made = [str(today + timedelta(days=d)) for d in (4, 5, 6)]  # upgrade made up to +3
    assert f"run days created: {', '.join(made)}" in done.stdout
    assert "runs: 0 expired" in done.stdout
    assert {today + timedelta(days=d) for d in range(-1, 7)} <= set(days(engine))
    bad = subprocess.run(
        [sys.executable, "-m", "kit.cli", "maintenance", "--once"],
        env={**env, "CRONFLEET_RUN_RETENTION_S": "3600"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        .splitlines()[0]
        .startswith("cronfleet maintenance: CRONFLEET_RUN_RETENTION_S: ")
    )

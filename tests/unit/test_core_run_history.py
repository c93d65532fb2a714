"""The run id layout and the run history's days: what decides which partition a run is
in, when a day is made and when it is dropped (kit.core.ids, kit.core.retention)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.core.ids import MAX_RUN_MS, run_id, run_id_floor, scheduled_ms_of
from kit.core.retention import (
    DAY_MS,
    day_bounds_ms,
    day_of_ms,
    plan_run_days,
    run_day_expired,
    run_history_cutoff_ms,
    run_kept_past_retention,
)
from kit.core.timeutil import to_epoch_ms

JOB = "0b5c7a3e-2f0d-4c55-8d0e-0f3c3b0f1a11"
ms_values = st.integers(min_value=0, max_value=MAX_RUN_MS - 1)
job_ids = st.uuids().map(str)


def test_a_run_id_is_a_version_8_uuid_of_the_job_and_instant() -> None:
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    rid = run_id(JOB, at)
    assert run_id(JOB, to_epoch_ms(at)) == rid  # datetime and epoch ms agree
    parsed = uuid.UUID(rid)
    assert parsed.version == 8 and parsed.variant == uuid.RFC_4122
    assert scheduled_ms_of(rid) == to_epoch_ms(at)
    assert run_id(JOB, to_epoch_ms(at) + 1) != rid
    assert run_id("another job", at) != rid


def test_an_old_version_5_id_carries_no_instant() -> None:
    assert scheduled_ms_of(str(uuid.uuid5(uuid.NAMESPACE_URL, "x"))) is None


def test_instants_outside_48_bits_are_refused() -> None:
    for ms in (-1, MAX_RUN_MS + 1):
        with pytest.raises(ValueError, match="epoch ms"):
            run_id(JOB, ms)
        with pytest.raises(ValueError, match="epoch ms"):
            run_id_floor(ms)


@given(job_ids, ms_values)
def test_an_id_lies_between_the_floors_of_its_instant_and_the_next(job: str, ms: int) -> None:
    """Bytewise order (PostgreSQL's uuid order, and Python's) puts every run of an
    instant in [floor(ms), floor(ms + 1)): a day's partition bounds hold its runs."""
    rid = uuid.UUID(run_id(job, ms))
    assert uuid.UUID(run_id_floor(ms)) <= rid < uuid.UUID(run_id_floor(ms + 1))
    assert rid.bytes >= uuid.UUID(run_id_floor(ms)).bytes


@given(job_ids, job_ids, ms_values, ms_values)
def test_ids_sort_as_their_instants(a: str, b: str, ms_a: int, ms_b: int) -> None:
    if ms_a < ms_b:
        assert uuid.UUID(run_id(a, ms_a)) < uuid.UUID(run_id(b, ms_b))


@given(st.integers(min_value=0, max_value=10**14))
def test_an_instant_is_in_the_day_whose_bounds_hold_it(ms: int) -> None:
    start, end = day_bounds_ms(day_of_ms(ms))
    assert start <= ms < end and end - start == DAY_MS
    assert datetime.fromtimestamp(start / 1000, UTC).time() == datetime.min.time()


def test_the_cutoff_is_the_start_of_the_day_the_retention_reaches_back_to() -> None:
    now = to_epoch_ms(datetime(2026, 12, 31, 15, 0, tzinfo=UTC))
    cutoff = run_history_cutoff_ms(now, 30 * 86_400)
    assert cutoff == to_epoch_ms(datetime(2026, 12, 1, tzinfo=UTC))
    assert not run_day_expired(date(2026, 12, 1), now, 30 * 86_400)  # its end is not old enough
    assert run_day_expired(date(2026, 11, 30), now, 30 * 86_400)


@given(
    st.integers(min_value=10**12, max_value=3 * 10**12),
    st.integers(min_value=0, max_value=10),
    st.integers(min_value=86_400, max_value=90 * 86_400),
    st.sets(st.integers(min_value=-100, max_value=15), max_size=40),
)
def test_a_pass_creates_what_is_missing_and_drops_only_what_expired(
    now_ms: int, ahead: int, retention_s: int, offsets: set[int]
) -> None:
    today = day_of_ms(now_ms).toordinal()
    existing = {date.fromordinal(today + o) for o in offsets}
    plan = plan_run_days(now_ms, existing, ahead, retention_s)
    wanted = {date.fromordinal(today + o) for o in range(-1, ahead + 1)}
    assert set(plan.create) == wanted - existing  # retention >= 1 day: none wanted expired
    for day in plan.drop:
        assert day in existing
        # every instant of the day is older than the retention
        assert day_bounds_ms(day)[1] <= now_ms - retention_s * 1000
    for day in existing - set(plan.drop):
        assert day_bounds_ms(day)[1] > run_history_cutoff_ms(now_ms, retention_s)
    assert list(plan.drop) == sorted(plan.drop)


def test_a_day_already_expired_is_never_created() -> None:
    now = to_epoch_ms(datetime(2026, 12, 1, 0, 30, tzinfo=UTC))
    plan = plan_run_days(now, [], 2, 0)  # retention 0: yesterday is already past it
    assert date(2026, 11, 30) not in plan.create
    assert plan.create[0] == date(2026, 12, 1)


def test_live_and_dead_lettered_runs_are_kept_past_the_retention() -> None:
    for status in ("pending", "running", "retry_scheduled"):
        assert run_kept_past_retention(status, False)
    for status in ("succeeded", "dead", "skipped", "cancelled"):
        assert not run_kept_past_retention(status, False)
    assert run_kept_past_retention("dead", True)


@given(job_ids, ms_values)
def test_migration_0011_re_keys_with_the_cores_own_layout(job: str, ms: int) -> None:
    """The migration keeps a frozen copy of the id function; while the layout stays,
    it must name every run exactly as the core does."""
    import importlib

    migration = importlib.import_module(
        "kit.store.migrations.versions.0011_runs_partitioned_by_day"
    )
    assert migration.run_id_v8(job, ms) == run_id(job, ms)

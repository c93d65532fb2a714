"""Rules the full mutation run of kit/core (docs/mutation.md) found unguarded: each test
asserts the rule as documented, not the mutant that showed it missing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kit.core.dispatch import rescan_at_once
from kit.core.errors import FieldError
from kit.core.policies import MisfirePolicy
from kit.core.queue_task import QueueTask, TaskStatus, ack_task, lease_task
from kit.core.task_policy import CommandPermit, TaskPolicy

# --- dispatch


def test_a_full_scan_that_took_one_trigger_scans_again_at_once():
    assert rescan_at_once(True, 1) is True
    assert rescan_at_once(True, 0) is False
    assert rescan_at_once(False, 5) is False


# --- misfire policy


def test_a_misfire_object_may_leave_out_either_field():
    assert MisfirePolicy.parse({"deadline_s": 30}) == MisfirePolicy("run_once", 30)
    assert MisfirePolicy.parse({"kind": "skip_late"}) == MisfirePolicy("skip_late", 60)
    assert MisfirePolicy.parse({}) == MisfirePolicy()


# --- task policy


def test_a_tenant_without_commands_has_no_permit_and_one_with_them_keeps_its_user():
    policy = TaskPolicy.parse(
        {
            "tenants": {
                "web": {"http_allow_hosts": ["10.0.0.1"]},
                "ops": {"commands": ["/bin/true"], "run_as": "ops"},
            }
        }
    )
    assert policy.tenants["web"].commands is None
    assert policy.tenants["ops"].commands == CommandPermit(frozenset({"/bin/true"}), "ops")


def test_a_bad_host_list_is_named_by_its_tenant():
    with pytest.raises(FieldError) as info:
        TaskPolicy.parse({"tenants": {"acme": {"http_allow_hosts": "10.0.0.1"}}})
    assert info.value.field == "tenants.acme.http_allow_hosts"


# --- queue task


def _task(**changes: object) -> QueueTask:
    base = {
        "task_id": "t",
        "status": TaskStatus.queued,
        "attempt": 0,
        "max_attempts": 3,
        "timeout_ms": 60_000,
        "visible_at_ms": 1000,
    }
    return QueueTask(**{**base, **changes})  # type: ignore[arg-type]


def test_a_lease_of_one_millisecond_is_allowed_and_of_zero_is_not():
    t = lease_task(_task(), "w", "tok", 1000, 1)
    assert t.accepted is True and t.task.lease_expires_at_ms == 1001
    with pytest.raises(ValueError, match=r"^lease_ms must be positive$"):
        lease_task(_task(), "w", "tok", 1000, 0)


def test_a_refused_lease_leaves_the_task_as_it_was_and_says_why():
    done = _task(status=TaskStatus.done)
    t = lease_task(done, "w", "tok", 5000, 1000)
    assert (t.accepted, t.task, t.reason, t.event) == (
        False,
        done,
        "not leasable: status is done",
        None,
    )
    early = _task()
    t = lease_task(early, "w", "tok", 999, 1000)
    assert (t.accepted, t.task, t.reason) == (
        False,
        early,
        "not visible until 1970-01-01T00:00:01Z",
    )


def test_the_last_attempts_expired_lease_dead_letters_the_task_without_its_lease():
    leased = _task(
        status=TaskStatus.leased,
        attempt=3,
        visible_at_ms=4000,
        lease_token="old",
        lease_expires_at_ms=4000,
        deadline_ms=9000,
        worker_id="w1",
    )
    t = lease_task(leased, "w2", "tok", 5000, 1000)
    assert t.accepted and t.event == "expire_dead" and t.task.status is TaskStatus.dead
    assert (t.task.lease_token, t.task.lease_expires_at_ms, t.task.deadline_ms) == (None,) * 3
    assert t.task.dead_reason == "lease expired at 1970-01-01T00:00:04Z on attempt 3 of 3"
    # a lease row without its expiry is dated by its visibility (which a lease sets)
    t = lease_task(replace(leased, lease_expires_at_ms=None), "w2", "tok", 5000, 1000)
    assert t.task.dead_reason == "lease expired at 1970-01-01T00:00:04Z on attempt 3 of 3"


def test_an_ack_ends_the_lease_and_keeps_the_token_for_a_replay():
    leased = lease_task(_task(), "w", "tok", 1000, 5000).task
    t = ack_task(leased, "tok", 2000)
    assert t.accepted and t.task.status is TaskStatus.done
    assert (t.task.lease_expires_at_ms, t.task.deadline_ms) == (None, None)
    assert t.task.lease_token == "tok"
    replay = ack_task(t.task, "tok", 9000)
    assert replay.accepted and replay.event == "ack_replay" and replay.task == t.task
    refused = ack_task(t.task, "other", 9000)
    assert refused.accepted is False and refused.task == t.task
    assert refused.reason == "task is not leased: status is done"


# --- instants are answered in UTC whatever the machine's zone


@pytest.fixture
def kolkata_local_time(monkeypatch: pytest.MonkeyPatch):
    """The process's local zone set to +05:30 (what astimezone() with no zone uses)."""
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_an_instant_is_checked_from_its_first_moment_and_returned_in_utc(kolkata_local_time):
    from datetime import UTC, datetime, timedelta, timezone

    from kit.core.schedule import MIN_INSTANT, check_instant_range

    assert check_instant_range(MIN_INSTANT, "at") == MIN_INSTANT
    got = check_instant_range(datetime(2030, 1, 1, 9, tzinfo=timezone(timedelta(hours=2))), "at")
    assert got == datetime(2030, 1, 1, 7, tzinfo=UTC) and got.tzinfo is UTC


def test_a_backfill_into_the_future_names_now_in_utc(kolkata_local_time):
    from datetime import UTC, datetime

    from kit.core.owed import ScheduleEra, plan_backfill
    from kit.core.schedule import CronSchedule

    era = ScheduleEra(CronSchedule("0 * * * *"), since=datetime(2030, 1, 1, tzinfo=UTC))
    now = datetime(2030, 1, 2, tzinfo=UTC)
    with pytest.raises(FieldError) as info:
        plan_backfill(
            "j", [era], datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 3, tzinfo=UTC), now, 10
        )
    assert (
        info.value.reason == "is in the future; a backfill ends at most now (2030-01-02T00:00:00Z)"
    )


def test_an_interval_anchor_is_kept_in_utc(kolkata_local_time):
    from datetime import UTC, datetime

    from kit.core.schedule import parse_schedule

    now = datetime(2030, 1, 1, tzinfo=UTC)
    s = parse_schedule({"every_s": 60, "anchor": "2030-01-01T09:00:00.5+02:00"}, now)
    assert s.anchor == datetime(2030, 1, 1, 7, tzinfo=UTC) and s.anchor.tzinfo is UTC


# --- schedule bounds


def test_interval_and_instant_bounds_are_inclusive():
    from datetime import UTC, datetime

    from kit.core.schedule import (
        MAX_INSTANT_CHARS,
        MAX_INTERVAL_S,
        MIN_INTERVAL_S,
        parse_instant,
        parse_schedule,
    )

    now = datetime(2030, 1, 1, tzinfo=UTC)
    for every in (MIN_INTERVAL_S, MAX_INTERVAL_S):
        assert parse_schedule({"every_s": every}, now).every_s == every
    longest = "2030-01-01T00:00:00." + "0" * (MAX_INSTANT_CHARS - 26) + "+00:00"
    assert len(longest) == MAX_INSTANT_CHARS
    assert parse_instant(longest, "at") == now


# --- partitions: the hash is stable (a job's partition never moves on an upgrade)


def test_a_jobs_partition_is_a_fixed_function_of_its_id():
    from kit.core.partitions import partition_of, partitions_of

    ids = ["job-1", "0b7a39a4-9a55-4a7e-8f6d-5d1c3c1f0001", ""]
    # blake2b, 8-byte digest, big-endian, modulo the count
    assert [partition_of(j) for j in ids] == [363, 703, 692]
    assert partition_of("job-1", 7) == 136856926666863979 % 7
    assert partitions_of(ids) == [363, 703, 692]
    for bad in (0, -1):
        with pytest.raises(ValueError, match=r"^partitions must be at least 1$"):
            partition_of("job-1", bad)
        with pytest.raises(ValueError, match=r"^partitions must be at least 1$"):
            partitions_of(ids, bad)


# --- retention


def test_the_cutoff_reaches_back_exactly_the_retention():
    from kit.core.retention import DAY_MS, plan_run_days, run_days_wanted, run_history_cutoff_ms

    now = 10 * DAY_MS + 100_000  # 100 s into day 10
    assert run_history_cutoff_ms(now, 3 * 86_400) == 7 * DAY_MS
    assert run_history_cutoff_ms(now, 3 * 86_400 + 100) == 7 * DAY_MS
    assert run_history_cutoff_ms(now, 3 * 86_400 + 101) == 6 * DAY_MS
    with pytest.raises(ValueError, match=r"^ahead_days must be >= 0$"):
        run_days_wanted(now, -1)
    with pytest.raises(ValueError, match=r"^retention_s must be >= 0$"):
        plan_run_days(now, [], 1, -1)


# --- the timer wheel


def test_items_due_together_in_one_tier_pop_in_the_order_they_were_added():
    from kit.core.dispatch import TimerWheel

    wheel: TimerWheel[str] = TimerWheel()
    for item in ("c", "a", "b", "a2"):
        wheel.add(1000, item, "normal")
    assert wheel.pop_due(1000) == ["c", "a", "b", "a2"]


def test_a_cron_of_the_longest_length_is_read():
    from kit.core.schedule import MAX_CRON_CHARS, parse_cron

    longest = "0" + " " * (MAX_CRON_CHARS - 8) + "* * * *"
    assert len(longest) == MAX_CRON_CHARS
    assert parse_cron(longest) == "0 * * * *"


# --- redaction of a cut excerpt


def test_an_excerpt_loses_the_longest_secrets_length_at_each_cut_edge():
    from kit.core.redaction import MASK, scrub_excerpt

    secret = "hunter22"  # 8 characters
    assert scrub_excerpt("0123456789abcdef", [secret, "abc"], True, False) == "…89abcdef"
    assert scrub_excerpt("0123456789abcdef", [secret], False, True) == "01234567…"
    assert scrub_excerpt("0123456789abcdef", [secret], True, True) == "……"
    assert scrub_excerpt("xx hunter22 yy", [secret], False, False) == f"xx {MASK} yy"
    # shorter than the edge: nothing of it is kept
    assert scrub_excerpt("ab", [secret], False, True) == "…"
    # no secret long enough to recognise: an excerpt is kept whole
    assert scrub_excerpt("0123456789", ["abc"], True, True) == "0123456789"
    assert scrub_excerpt("0123456789", [], True, True) == "0123456789"


# --- retry backoff


def test_backoff_follows_its_formula_up_to_the_64th_attempt_and_draws_zero_too():
    import random

    from kit.core.retry import RetryPolicy, backoff_ceiling_ms, backoff_delay_ms

    tiny = RetryPolicy(max_attempts=100, base_s=1e-20, cap_s=60.0)
    assert backoff_ceiling_ms(tiny, 64) == round(1e-17 * 2**63)  # 92 ms, under the cap
    with pytest.raises(ValueError, match=r"^attempt is 1-based$"):
        backoff_ceiling_ms(tiny, 0)
    one_ms = RetryPolicy(base_s=0.001, cap_s=0.001)
    draws = {backoff_delay_ms(one_ms, 1, random.Random(seed)) for seed in range(20)}
    assert draws == {0, 1}


# --- recovery


def test_a_partition_never_committed_has_read_nothing():
    from kit.core.recovery import QueueSample, caught_up_at

    samples = [QueueSample(1000, {0: 1, 1: 0}), QueueSample(2000, {0: 1, 1: 1})]
    assert caught_up_at(samples, {0: 1}) == 1000  # partition 1 had nothing at 1000
    assert caught_up_at(samples, {0: 1, 1: 1}) == 2000
    assert caught_up_at(samples, {}) is None


# --- misfire and overlap policies


def test_skip_late_fires_up_to_exactly_its_deadline():
    from kit.core.policies import plan_misfire

    now = 100_000
    plan = plan_misfire(
        [now - 10_000, now - 10_001, now - 10_005], now, MisfirePolicy("skip_late", 10)
    )
    assert (plan.fire_ms, plan.skipped_ms) == ([now - 10_000], [now - 10_005, now - 10_001])
    assert MisfirePolicy("skip_late", 7 * 86_400).deadline_s == 7 * 86_400  # the longest


def test_a_negative_running_count_is_a_bug():
    from kit.core.policies import OverlapPolicy, decide_overlap

    with pytest.raises(ValueError, match=r"^running_count must not be negative$"):
        decide_overlap(OverlapPolicy.forbid, -1)


def test_the_core_refuses_a_naive_datetime_by_saying_so():
    from datetime import datetime

    from kit.core.timeutil import to_epoch_ms

    with pytest.raises(ValueError, match=r"^naive datetime: the core only takes aware datetimes$"):
        to_epoch_ms(datetime(2030, 1, 1))

"""Edges and contracts of kit/core that the first mutation run showed no test would
notice (docs/mutation.md): inclusive bounds, zero allowed where zero is meaningful,
what a finished queue task keeps of its lease, the order secrets are scrubbed in, and
the words explain gives for a run. The second part (from "The full run") holds what the
full run of 2026-12-01 found."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kit.core.audit import REDACTED, job_diff, redacted
from kit.core.dispatch import rescan_at_once, scan_window
from kit.core.errors import FieldError
from kit.core.outcome import budget_attempt, should_pause
from kit.core.owed import EARLIEST, LATEST, Outcome, OwedFire, RunView, check_instant, explain_fires
from kit.core.policies import MisfirePolicy
from kit.core.queue_task import (
    QueueTask,
    TaskStatus,
    ack_task,
    heartbeat_task,
    leasable,
    lease_task,
    nack_task,
)
from kit.core.recovery import unclaimed_cutoff
from kit.core.redaction import redact_task, secret_values
from kit.core.retention import Retention
from kit.core.task_policy import CommandPermit, TaskPolicy, env_name_refusal

T0 = 1_700_000_000_000
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_a_zero_scan_ahead_is_allowed_a_negative_one_is_not():
    assert scan_window(5_000, 0) == (5_000, 5_000)
    assert scan_window(5_000, 1) == (5_000, 5_001)
    with pytest.raises(FieldError):
        scan_window(5_000, -1)


def test_instant_bounds_are_inclusive():
    assert check_instant(EARLIEST, "from") == EARLIEST
    assert check_instant(LATEST, "to") == LATEST
    with pytest.raises(FieldError):
        check_instant(LATEST + timedelta(microseconds=1), "to")


def _fire(run_id: str) -> OwedFire:
    return OwedFire(NOW - timedelta(hours=1), NOW - timedelta(hours=1), run_id, 0)


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        (
            RunView("r", "pending", skip_reason="queued"),
            "queued behind an active run of the job (overlap: queue)",
        ),
        (RunView("r", "pending"), None),
        (RunView("r", "succeeded", skip_reason="queued"), None),
        (RunView("r", "succeeded", trigger_kind="backfill"), "run by a backfill"),
        (RunView("r", "dead", error="exit 3"), "exit 3"),
        (RunView("r", "cancelled", error="cancelled by alice"), "cancelled by alice"),
        (RunView("r", "dead"), None),
        (RunView("r", "succeeded", error="a retry's earlier error"), None),
    ],
)
def test_explain_says_why_a_run_ran_as_it_did(run, reason):
    [got] = explain_fires([_fire("r")], {"r": run}, NOW)
    assert (got.outcome, got.reason) == (Outcome.ran, reason)


def _queued(**changes: object) -> QueueTask:
    task = QueueTask("t1", TaskStatus.queued, 0, 3, 300_000, T0)
    return replace(task, **changes)


def test_a_task_is_leasable_from_the_millisecond_it_is_visible():
    assert leasable(_queued(), T0)
    assert not leasable(_queued(), T0 - 1)


def test_a_heartbeat_must_extend_by_at_least_a_millisecond():
    task = lease_task(_queued(), "w1", "tok", T0, 30_000).task
    assert heartbeat_task(task, "tok", T0 + 1, 1).task.lease_expires_at_ms == T0 + 2
    with pytest.raises(ValueError, match=r"^extend_ms must be positive$"):
        heartbeat_task(task, "tok", T0 + 1, 0)


@pytest.mark.parametrize("retryable", [False, True])
def test_a_nacked_task_keeps_nothing_of_its_lease(retryable):
    task = lease_task(_queued(max_attempts=1 if retryable else 3), "w1", "tok", T0, 30_000).task
    dead = nack_task(task, "tok", retryable, T0 + 1, random.Random(1)).task
    assert dead.status is TaskStatus.dead
    assert (dead.lease_token, dead.lease_expires_at_ms, dead.deadline_ms) == (None, None, None)
    again = lease_task(_queued(), "w1", "tok", T0, 30_000).task
    retry = nack_task(again, "tok", True, T0 + 1, random.Random(1)).task
    assert retry.status is TaskStatus.queued
    assert (retry.lease_token, retry.lease_expires_at_ms, retry.deadline_ms) == (None, None, None)
    assert retry.worker_id is None


def test_a_tenants_hosts_are_joined_to_everyones():
    policy = TaskPolicy.parse(
        {"tenants": {"acme": {"http_allow_hosts": ["db.internal", "10.1.0.0/16"]}}}, "10.0.0.0/8"
    )
    assert policy.for_tenant("acme").http_allow_hosts == "10.0.0.0/8,db.internal,10.1.0.0/16"
    assert policy.for_tenant("other").http_allow_hosts == "10.0.0.0/8"
    assert TaskPolicy.parse({}).for_tenant("acme").http_allow_hosts == ""


def test_always_refused_environment_names_whatever_their_case():
    for name in ("LD_PRELOAD", "ld_library_path", "cronfleet_database_url", "Bash_Env", "PATH"):
        assert (env_name_refusal(name) or "").startswith("is never a name a job may set: "), name
    assert env_name_refusal("OLD_VALUE") is None and env_name_refusal("APP_LD_X") is None
    for name in ("", "1A", "A-B", "A=B", "BASH_FUNC_x%%", "A B"):
        assert env_name_refusal(name) == (
            "must be a name of letters, digits and '_' that does not start with a digit"
        ), name


def test_unclaimed_cutoff_is_the_grace_before_the_caught_up_instant():
    assert unclaimed_cutoff(10_000, 3_000) == 7_000


def test_budget_and_pause_edges():
    assert budget_attempt(1, 0) == 1
    with pytest.raises(ValueError, match=r"^attempt 2 is not after the budget base 2$"):
        budget_attempt(2, 2)
    assert should_pause(1, 1) and not should_pause(0, 1)
    assert not should_pause(5, None)
    assert not should_pause(1, 0)  # 0: the job opted out
    with pytest.raises(ValueError, match=r"^pause_after_dead must be 0 \(never\) or more$"):
        should_pause(1, -1)


def test_retention_takes_zero_and_refuses_booleans_and_negatives():
    assert Retention(audit_s=0).audit_s == 0
    for bad in (True, -1, 1.5):
        with pytest.raises(ValueError, match=r"^audit_s must be a whole number of seconds >= 0$"):
            Retention(audit_s=bad)  # type: ignore[arg-type]


def test_the_audit_diff_shows_a_removed_field_and_redacts_only_secrets():
    assert job_diff({"name": "a", "timeout_s": 5}, {"name": "a"}) == {
        "timeout_s": {"from": 5, "to": None}
    }
    job = {"name": "a", "task": {"type": "http", "url": "https://x", "headers": {"A": "b"}}}
    shown = redacted(job)
    assert shown["name"] == "a" and shown["task"]["url"] == "https://x"
    assert shown["task"]["type"] == "http"
    assert redacted({}) == {}
    assert REDACTED not in str(redacted({"name": "a", "schedule": {"every_s": 5}}))


def test_secrets_are_scrubbed_longest_first_credentials_whole():
    task = {
        "type": "http",
        "headers": {"Authorization": "Token abc def", "X-Api-Key": "zz-key-long"},
    }
    values = secret_values(task)
    assert "abc def" in values  # everything after the scheme, spaces and all
    assert list(values) == sorted(values, key=len, reverse=True)
    assert values[0] == "Token abc def" and values[-1] == "abc def"


def test_only_an_http_task_has_its_headers_masked():
    command = {"type": "command", "argv": ["/bin/true"], "headers": {"Authorization": "x"}}
    assert redact_task(command) == command


# === The full run (docs/mutation.md): each test asserts the rule, not the mutant

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

"""Edges and contracts of kit/core that the first mutation run showed no test would
notice (docs/mutation.md): inclusive bounds, zero allowed where zero is meaningful,
what a finished queue task keeps of its lease, the order secrets are scrubbed in, and
the words explain gives for a run."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kit.core.audit import REDACTED, job_diff, redacted
from kit.core.dispatch import scan_window
from kit.core.errors import FieldError
from kit.core.outcome import budget_attempt, should_pause
from kit.core.owed import EARLIEST, LATEST, Outcome, OwedFire, RunView, check_instant, explain_fires
from kit.core.queue_task import (
    QueueTask,
    TaskStatus,
    heartbeat_task,
    leasable,
    lease_task,
    nack_task,
)
from kit.core.recovery import unclaimed_cutoff
from kit.core.redaction import redact_task, secret_values
from kit.core.retention import Retention
from kit.core.task_policy import TaskPolicy, reserved_env_name

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


def test_reserved_environment_names_whatever_their_case():
    assert reserved_env_name("LD_PRELOAD") and reserved_env_name("ld_library_path")
    assert reserved_env_name("cronfleet_database_url")
    assert not reserved_env_name("PATH") and not reserved_env_name("OLD_VALUE")


def test_unclaimed_cutoff_is_the_grace_before_the_caught_up_instant():
    assert unclaimed_cutoff(10_000, 3_000) == 7_000


def test_budget_and_pause_edges():
    assert budget_attempt(1, 0) == 1
    with pytest.raises(ValueError, match=r"^attempt 2 is not after the budget base 2$"):
        budget_attempt(2, 2)
    assert should_pause(1, 1) and not should_pause(0, 1)
    assert not should_pause(5, None)
    with pytest.raises(ValueError, match=r"^pause_after_dead must be at least 1$"):
        should_pause(1, 0)


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

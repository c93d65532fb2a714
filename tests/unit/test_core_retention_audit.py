"""Expiry rules (kit.core.retention) and the audit diff (kit.core.audit)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kit.core.audit import REDACTED, edit_action, job_diff, redacted, shown_changes
from kit.core.retention import (
    Retention,
    audit_entry_expired,
    dead_letter_expired,
    idempotency_key_expired,
    queue_task_expired,
)

NOW = datetime(2030, 6, 1, tzinfo=UTC)
R = Retention(
    idempotency_key_s=3600,
    queue_task_s=7200,
    dead_letter_s=86_400,
    replayed_dead_letter_s=600,
    audit_s=86_400,
)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_idempotency_keys_expire_after_their_retention() -> None:
    assert idempotency_key_expired(ago(3600), NOW, R)
    assert not idempotency_key_expired(ago(3599), NOW, R)


@pytest.mark.parametrize("status", ["queued", "leased"])
def test_a_pending_queue_task_never_expires(status: str) -> None:
    assert not queue_task_expired(status, None, NOW, R)
    assert not queue_task_expired(status, ago(10**9), NOW, R)


@pytest.mark.parametrize("status", ["done", "dead"])
def test_a_finished_queue_task_expires_after_its_retention(status: str) -> None:
    assert queue_task_expired(status, ago(7200), NOW, R)
    assert not queue_task_expired(status, ago(7199), NOW, R)


def test_a_dead_letter_not_replayed_stays_until_its_own_retention() -> None:
    assert not dead_letter_expired(ago(86_399), None, "dead", NOW, R)
    assert dead_letter_expired(ago(86_400), None, "dead", NOW, R)


@pytest.mark.parametrize("live", ["pending", "running", "retry_scheduled"])
def test_a_replayed_dead_letter_is_kept_while_its_run_is_live(live: str) -> None:
    assert not dead_letter_expired(ago(10**8), ago(10**7), live, NOW, R)


@pytest.mark.parametrize("done", ["succeeded", "dead", "cancelled", None])
def test_a_replayed_dead_letter_of_a_finished_run_expires_after_the_replay_retention(
    done: str | None,
) -> None:
    assert dead_letter_expired(ago(10), ago(600), done, NOW, R)
    assert not dead_letter_expired(ago(10**8), ago(599), done, NOW, R)


def test_audit_entries_expire_and_retention_refuses_nonsense() -> None:
    assert audit_entry_expired(ago(86_400), NOW, R)
    assert not audit_entry_expired(ago(86_000), NOW, R)
    with pytest.raises(ValueError, match="queue_task_s"):
        Retention(queue_task_s=-1)


JOB = {
    "name": "report",
    "schedule": {"cron": "0 3 * * *", "timezone": "UTC"},
    "task": {
        "type": "http",
        "url": "https://example.org/r",
        "method": "POST",
        "headers": {"Authorization": "Bearer s3cret", "X-Team": "blue"},
    },
    "priority": "normal",
    "paused": False,
}


def test_diff_names_each_changed_field_from_and_to() -> None:
    after = {**JOB, "schedule": {"cron": "0 4 * * *", "timezone": "UTC"}, "priority": "high"}
    assert job_diff(JOB, after) == {
        "priority": {"from": "normal", "to": "high"},
        "schedule.cron": {"from": "0 3 * * *", "to": "0 4 * * *"},
    }
    assert job_diff(JOB, dict(JOB)) == {}


def test_secret_values_never_reach_the_diff_or_the_snapshot() -> None:
    task = dict(JOB["task"])  # type: ignore[arg-type]
    task["headers"] = {"Authorization": "Bearer n3w", "X-Team": "blue", "X-Key": "k"}
    diff = job_diff(JOB, {**JOB, "task": task})
    assert diff == {
        "task.headers.Authorization": {"from": REDACTED, "to": REDACTED},
        "task.headers.X-Key": {"from": None, "to": REDACTED},
    }
    text = repr(diff) + repr(redacted({**JOB, "task": task}))
    assert "s3cret" not in text and "n3w" not in text and "blue" not in text


def test_url_credentials_are_masked_in_the_diff_the_snapshot_and_old_entries() -> None:
    task = {**JOB["task"], "url": "https://u:old-pw-1@example.org/a"}  # type: ignore[dict-item]
    moved = {**task, "url": "https://u:new-pw-2@example.org/b"}
    diff = job_diff({**JOB, "task": task}, {**JOB, "task": moved})
    assert diff["task.url"] == {
        "from": "https://(secret)@example.org/a",
        "to": "https://(secret)@example.org/b",
    }
    text = repr(diff) + repr(redacted({**JOB, "task": moved}))
    assert "pw-" not in text and "u:" not in text
    old_entry = {"task.url": {"from": None, "to": "http://u:old-pw-1@h/"}, "name": "x"}
    assert shown_changes(old_entry) == {
        "task.url": {"from": None, "to": "http://(secret)@h/"},
        "name": "x",
    }


def test_a_creation_diff_lists_every_field_and_a_pause_is_named_so() -> None:
    created = job_diff(None, JOB)
    assert created["name"] == {"from": None, "to": "report"}
    assert created["task.headers.Authorization"] == {"from": None, "to": REDACTED}
    assert edit_action(job_diff(JOB, {**JOB, "paused": True})) == "pause"
    assert edit_action(job_diff({**JOB, "paused": True}, JOB)) == "resume"
    assert edit_action(job_diff(JOB, {**JOB, "paused": True, "priority": "low"})) == "update"

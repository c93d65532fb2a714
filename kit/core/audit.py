"""The job audit log's diff: which client-settable fields an edit changed, from what to
what, with secrets kept out.

A job is compared as the flat map of its fields (`schedule.cron`, `retry.max_attempts`,
`task.url`, `task.headers.Authorization`), so a diff names exactly what changed. Task
header and environment values may carry credentials: the diff says that one changed
(or appeared, or went) but never stores its value, before or after. A task URL's
credentials (`https://user:pass@host/`) are shown masked (kit.core.redaction), on
writing and again on reading (`shown_changes`: entries written before they were).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from kit.core.redaction import redact_url


class AuditAction(StrEnum):
    """What a job audit entry records (`job_audit.action`)."""

    create = "create"
    update = "update"
    pause = "pause"
    resume = "resume"
    delete = "delete"
    run_now = "run_now"
    backfill = "backfill"
    cancel_run = "cancel_run"
    auto_pause = "auto_pause"  # the kit paused it after its dead-run streak (a DB trigger)


REDACTED = "<redacted>"
# Flattened keys under these prefixes are secrets: only their presence is recorded.
SECRET_PREFIXES = ("task.headers.", "task.env.", "notify.headers.")
_ABSENT = object()


def flatten(job: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"schedule": {"cron": "x"}} -> {"schedule.cron": "x"}; lists stay whole, and an
    empty object has no fields (so `headers: {}` and no headers compare equal)."""
    out: dict[str, Any] = {}
    for key, value in job.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


URL_PATH = "task.url"  # its credentials are masked, the rest of it shown
URL_PATHS = (URL_PATH, "notify.url")  # the failure webhook's URL too


def is_secret(path: str) -> bool:
    return path.startswith(SECRET_PREFIXES)


def _shown(path: str, value: Any) -> Any:
    if value is _ABSENT:
        return None
    if is_secret(path):
        return REDACTED
    if path in URL_PATHS and isinstance(value, str):
        return redact_url(value)
    return value


def shown_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """A stored diff as it may be shown: the URL's credentials masked, even in an entry
    written before they were."""
    shown = dict(changes)
    for path in URL_PATHS:
        entry = shown.get(path)
        if isinstance(entry, Mapping):
            shown[path] = {k: _shown(path, v) for k, v in entry.items()}
        elif entry is not None:
            shown[path] = _shown(path, entry)
    return shown


def job_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any]:
    """{field: {"from": old, "to": new}} for every field that differs (None: absent);
    a secret field shows REDACTED for a value on either side."""
    old = flatten(before or {})
    new = flatten(after or {})
    diff: dict[str, Any] = {}
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path, _ABSENT), new.get(path, _ABSENT)
        if a is _ABSENT and b is _ABSENT:
            continue
        if a is not _ABSENT and b is not _ABSENT and a == b:
            continue
        diff[path] = {"from": _shown(path, a), "to": _shown(path, b)}
    return diff


def redacted(job: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a job with every secret value replaced (for the audit's snapshot)."""

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        return _shown(path, value)

    copy: dict[str, Any] = walk(job, "")
    return copy


def edit_action(diff: Mapping[str, Any]) -> str:
    """An edit that only paused or resumed is recorded as that."""
    if set(diff) == {"paused"}:
        return "pause" if diff["paused"]["to"] else "resume"
    return "update"

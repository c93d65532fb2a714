"""The console's job edit form, turned into the API's own PATCH: only the fields the
user changed are sent (so a task whose secret headers the page cannot show is never
overwritten by what the page shows), validated by the same model and checks as
PATCH /v1/jobs/{id}."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from kit.api.models import JobOut, JobPatch
from kit.core.errors import FieldError
from kit.tasks import registry

TEXT_FIELDS = ("name", "priority", "overlap")
INT_FIELDS = ("timeout_s", "jitter_s", "pause_after_dead")
JSON_FIELDS = ("retry", "misfire", "task")
SCHEDULE_FIELDS = ("schedule_cron", "schedule_timezone", "schedule_every_s", "schedule_at")
ALL_FIELDS = TEXT_FIELDS + INT_FIELDS + JSON_FIELDS + SCHEDULE_FIELDS
TASK_TYPES = registry.names()


def form_values(job: JobOut) -> dict[str, str]:
    """The form's fields as text, from the job as the API shows it."""
    schedule = job.schedule
    return {
        "name": job.name,
        "priority": job.priority,
        "overlap": job.overlap,
        "timeout_s": str(job.timeout_s),
        "jitter_s": str(job.jitter_s),
        "pause_after_dead": "" if job.pause_after_dead is None else str(job.pause_after_dead),
        "retry": json.dumps(job.retry, indent=1, sort_keys=True),
        "misfire": json.dumps(job.misfire, indent=1, sort_keys=True),
        "task": json.dumps(job.task, indent=1, sort_keys=True),
        "schedule_cron": str(schedule.get("cron", "")),
        "schedule_timezone": str(schedule.get("timezone", "")),
        "schedule_every_s": str(schedule.get("every_s", "")),
        "schedule_at": str(schedule.get("at", "")),
    }


def _norm(value: str) -> str:
    return value.replace("\r\n", "\n").strip()


def patch_from_form(form: dict[str, str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(the PATCH body of what changed, problems). Each field is compared with the
    value the page was rendered with (`orig_<field>`)."""
    changed = {f for f in ALL_FIELDS if _norm(form.get(f, "")) != _norm(form.get(f"orig_{f}", ""))}
    patch: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for f in TEXT_FIELDS:
        if f in changed:
            patch[f] = form.get(f, "").strip()
    for f in INT_FIELDS:
        if f in changed:
            raw = form.get(f, "").strip()
            if raw == "":
                problems.append((f, "cannot be cleared; give a whole number"))
                continue
            try:
                patch[f] = int(raw)
            except ValueError:
                problems.append((f, f"{raw!r} is not a whole number"))
    for f in JSON_FIELDS:
        if f in changed:
            try:
                patch[f] = json.loads(form.get(f, ""))
            except json.JSONDecodeError as exc:
                problems.append((f, f"is not valid JSON ({exc.msg}, line {exc.lineno})"))
    if changed & set(SCHEDULE_FIELDS):
        cron = form.get("schedule_cron", "").strip()
        every = form.get("schedule_every_s", "").strip()
        at = form.get("schedule_at", "").strip()
        schedule: dict[str, Any] = {}
        if cron:
            schedule["cron"] = cron
            schedule["timezone"] = form.get("schedule_timezone", "").strip() or "UTC"
        if every:
            try:
                schedule["every_s"] = int(every)
            except ValueError:
                problems.append(("schedule.every_s", f"{every!r} is not a whole number"))
        if at:
            schedule["at"] = at
        patch["schedule"] = schedule
    return patch, problems


def validated(patch: dict[str, Any]) -> tuple[JobPatch | None, list[tuple[str, str]]]:
    """The patch through the API's model: (model, []) or (None, problems)."""
    try:
        return JobPatch.model_validate(patch), []
    except ValidationError as exc:
        problems: list[tuple[str, str]] = []
        for error in exc.errors():
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, FieldError):
                problems.append((cause.field, cause.reason))
                continue
            loc = [str(p) for p in error.get("loc", ()) if p not in ("body",)]
            loc = [p for p in loc if p not in TASK_TYPES]  # the task union's tag
            reason = str(error.get("msg", "is invalid")).removeprefix("Value error, ")
            if error.get("type") == "extra_forbidden":
                reason = "unknown field"
            problems.append((".".join(loc) or "body", reason))
        return None, list(dict.fromkeys(problems))

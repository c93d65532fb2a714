"""The console's job edit form, turned into the API's own PATCH: only the fields the
user changed are sent (so a task whose secret headers the page cannot show is never
overwritten by what the page shows), validated by the same model and checks as
PATCH /v1/jobs/{id}.

A form's text reaches the model as a JSON body would: the JSON fields through the
API's strict parser (kit.api.body: no `NaN`, 1e400, 5,000-digit numbers, `\\u0000`,
lone surrogates or 50,000 nested `[`), numbers only as ASCII digits, and every value
checked for what PostgreSQL refuses (`tests/integration/test_console_fuzz.py`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from kit.api.body import MAX_NUMBER_DIGITS, InvalidBody, loads_strict, problems_in
from kit.api.errors import validation_problems
from kit.api.models import NULLABLE_FIELDS, JobOut, JobPatch
from kit.core.errors import FieldError
from kit.tasks import registry

TEXT_FIELDS = ("name", "priority", "overlap")
INT_FIELDS = ("timeout_s", "jitter_s", "pause_after_dead")
JSON_FIELDS = ("retry", "misfire", "task", "notify")
SCHEDULE_FIELDS = (
    "schedule_cron",
    "schedule_timezone",
    "schedule_every_s",
    "schedule_anchor",
    "schedule_at",
)
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
        "notify": "" if job.notify is None else json.dumps(job.notify, indent=1, sort_keys=True),
        "schedule_cron": str(schedule.get("cron", "")),
        "schedule_timezone": str(schedule.get("timezone", "")),
        "schedule_every_s": str(schedule.get("every_s", "")),
        "schedule_anchor": str(schedule.get("anchor", "")),
        "schedule_at": str(schedule.get("at", "")),
    }


_WHOLE = re.compile(r"-?[0-9]+", re.ASCII)


def whole_number(raw: str, field: str) -> int:
    """A form's or a query's whole number, as a JSON body would carry it: ASCII digits
    (no `²`, no Arabic digits, which int() takes), at most MAX_NUMBER_DIGITS of them."""
    text = raw.strip()
    if not _WHOLE.fullmatch(text):
        raise FieldError(field, "is not a whole number (ASCII digits, an optional '-')")
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise FieldError(
            field, f"has {len(text.lstrip('-'))} digits; at most {MAX_NUMBER_DIGITS} are accepted"
        )
    return int(text)


def json_field(raw: str, field: str) -> tuple[Any, list[tuple[str, str]]]:
    """(value, []) or (None, problems): the API's strict parser, its paths under `field`."""
    try:
        return loads_strict(raw), []
    except json.JSONDecodeError as exc:
        return None, [(field, f"is not valid JSON ({exc.msg}, line {exc.lineno})")]
    except InvalidBody as exc:
        return None, [(_under(field, path), reason) for path, reason in exc.problems]


def _under(field: str, path: str) -> str:
    if path == "body":
        return field
    return f"{field}{path}" if path.startswith("[") else f"{field}.{path}"


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
            if raw == "" and f in NULLABLE_FIELDS:
                patch[f] = None  # pause_after_dead: back to the operator's default
                continue
            if raw == "":
                problems.append((f, "cannot be cleared; give a whole number"))
                continue
            try:
                patch[f] = whole_number(raw, f)
            except FieldError as exc:
                problems.append((exc.field, exc.reason))
    for f in JSON_FIELDS:
        if f in changed:
            if f in NULLABLE_FIELDS and not form.get(f, "").strip():
                patch[f] = None  # notify: no webhook
                continue
            value, found = json_field(form.get(f, ""), f)
            if found:
                problems += found
            else:
                patch[f] = value
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
                schedule["every_s"] = whole_number(every, "schedule.every_s")
            except FieldError as exc:
                problems.append((exc.field, exc.reason))
            anchor = form.get("schedule_anchor", "").strip()
            if anchor:  # kept: the interval keeps its phase (blank: anchored now)
                schedule["anchor"] = anchor
        if at:
            schedule["at"] = at
        patch["schedule"] = schedule
    # what the strict parser refuses in a JSON body (NUL, lone surrogates) is refused in
    # a form's text fields too
    problems += [p for p in problems_in(patch) if p not in problems]
    return patch, problems


def validated(
    data: dict[str, Any], model: type[BaseModel] = JobPatch
) -> tuple[Any | None, list[tuple[str, str]]]:
    """The form's body through the API's own model: (model, []) or (None, problems),
    each named and worded as the API's 422 names it (kit.api.errors)."""
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, validation_problems(exc.errors())


def body_from_form(form: dict[str, str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(a POST /v1/jobs body, problems) from the new-job form: each field as a JSON body
    would carry it, a blank optional field left out (the API's default: for
    pause_after_dead the operator's, for notify no webhook)."""
    # every field compared with a blank original: what was typed is sent, the rest left out
    sent = {k: v for k, v in form.items() if not k.startswith("orig_")}
    body, problems = patch_from_form(sent)
    if form.get("paused") == "on":
        body["paused"] = True
    return body, problems

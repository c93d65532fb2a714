"""The API's input rules that the OpenAPI document declares, each enforced at the edge by
the same declaration (pydantic checks a `pattern`, an `enum`, a bound), so the document
says what the API enforces (tests/integration/test_api_conformance.py runs schemathesis
with every check against it).

Instants are RFC 3339 with seconds and an offset (`2030-01-01T09:00:00Z`,
`...+02:00`): the form JSON Schema's `date-time` means, narrower than the ISO 8601
forms Python reads (no `T09:00Z`, no week dates), so that a string the pattern refuses
is never accepted. Their years are declared; the exact ends of a range once an offset
is applied, and a 29 February of a year that is not a leap year, are not (the test's
allowed list says so).

Integers are JSON Schema integers: `5.0` is one, and is taken as 5.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Query
from pydantic import BeforeValidator, Field

from kit.core.errors import FieldError
from kit.core.policies import MAX_DEADLINE_S, MISFIRE_KINDS
from kit.core.retry import JITTER_KINDS, MAX_ATTEMPTS_LIMIT, MAX_DELAY_S
from kit.core.schedule import (
    MAX_CRON_CHARS,
    MAX_INTERVAL_S,
    MAX_TIMEZONE_CHARS,
    MIN_INTERVAL_S,
)

NO_NUL = r"^[^\u0000]*$"  # every string of a body (kit.api.body), declared on each
NO_CONTROL = r"^[^\u0000-\u001f]*$"  # a job name (kit.api.models.JobIn) and its prefix filter

_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-9]))"
)
_TIME = r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?"
_OFFSET = r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
# 1970 to 9998: any instant a schedule or a filter may name (kit.core.schedule)
_ANY_YEAR = r"(?:19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
INSTANT = rf"^{_ANY_YEAR}-{_DAY}{_TIME}{_OFFSET}$"
# 1970 to 2199: a range of history or a preview (kit.core.owed.check_instant)
HISTORY_INSTANT = rf"^(?:19[7-9][0-9]|2[01][0-9]{{2}})-{_DAY}{_TIME}{_OFFSET}$"
INSTANT_REASON = (
    "must be an RFC 3339 instant with seconds and an offset, between 1970-01-01 and "
    "9998-12-31, e.g. 2030-01-01T09:00:00Z or 2030-01-01T09:00:00+02:00"
)
HISTORY_INSTANT_REASON = (
    "must be an RFC 3339 instant with seconds and an offset, between 1970-01-01 and "
    "2199-12-31, e.g. 2030-01-01T09:00:00Z or 2030-01-01T09:00:00+02:00"
)
INSTANT_DOC = "RFC 3339 instant with seconds and an offset (Z or ±hh:mm)"

# Five fields of printable characters, separated by spaces or tabs; what each field
# may say is croniter's to decide (not declared: the allowed list says so).
CRON = r"^[ \t]*[!-~]+(?:[ \t]+[!-~]+){4}[ \t]*$"
CRON_REASON = (
    "must have 5 fields (minute hour day month weekday) of printable ASCII separated by "
    "spaces, e.g. '0 3 * * *'"
)
TIMEZONE = r"^[A-Za-z0-9_+./-]*$"
CURSOR = r"^[A-Za-z0-9_-]*$"
MAX_CURSOR_CHARS = 2048

TIMEZONE_REASON = "must be an IANA time zone name such as Europe/Paris"
CURSOR_REASON = "is not a cursor returned by this API"
NO_NUL_REASON = "must not contain NUL (\\u0000)"
# What a refusal of each declared pattern says (kit.api.errors), instead of the pattern.
PATTERN_REASONS: dict[str, str] = {}

_INSTANT_RE = re.compile(INSTANT)
_CRON_RE = re.compile(CRON)


def whole(value: object) -> object:
    """5.0 as 5 (a JSON Schema integer); anything else as it is, for the type to judge."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


Whole = Annotated[int, BeforeValidator(whole)]


def whole_in(low: int, high: int) -> Any:
    """A Whole between low and high: the bounds inside the type, where the document
    shows them as minimum and maximum also when the field is optional (on the field,
    pydantic wrote `ge` and `le`, which JSON Schema does not know)."""
    return Annotated[int, Field(ge=low, le=high), BeforeValidator(whole)]


# The `cursor` of a listing: opaque to clients. Not declared: whether a string of this
# form is one the API gave out (one that is not is a 422).
Cursor = Annotated[
    str | None,
    Query(
        pattern=CURSOR,
        max_length=MAX_CURSOR_CHARS,
        description="`next_cursor` of the previous page (opaque; empty: the first page)",
    ),
]
# A query parameter that is free text: any characters but NUL.
Text = Annotated[str | None, Query(pattern=NO_NUL, max_length=200)]


def check_instant_text(value: object, field: str) -> None:
    if isinstance(value, str) and not _INSTANT_RE.fullmatch(value):
        raise FieldError(field, INSTANT_REASON)


def schedule_input(value: Any) -> Any:
    """A schedule object as the API takes it: the declared forms checked (cron text,
    instants), integral numbers made integers; the rest is kit.core's to judge."""
    if not isinstance(value, Mapping):
        return value
    out = dict(value)
    cron = out.get("cron")
    if isinstance(cron, str) and len(cron) <= MAX_CRON_CHARS and not _CRON_RE.fullmatch(cron):
        raise FieldError("schedule.cron", CRON_REASON)
    zone = out.get("timezone")
    if zone is not None and not isinstance(zone, str):  # kit.core reads a falsy one as UTC
        raise FieldError("schedule.timezone", "must be a time zone name, or null for UTC")
    for name in ("at", "anchor"):
        check_instant_text(out.get(name), f"schedule.{name}")
    if "every_s" in out:
        out["every_s"] = whole(out["every_s"])
    return out


def wholes(value: Any, *names: str) -> Any:
    """These fields of an object, integral numbers made integers."""
    if not isinstance(value, Mapping):
        return value
    return {k: whole(v) if k in names else v for k, v in value.items()}


def _instant_schema(pattern: str, description: str) -> dict[str, Any]:
    return {"type": "string", "pattern": pattern, "description": description}


SCHEDULE_SCHEMA: dict[str, Any] = {
    "description": (
        'One of {"cron": "0 * * * *", "timezone": "Europe/Paris"}, '
        '{"every_s": 300, "anchor": "2030-01-01T00:00:00Z"} or {"at": "2030-01-01T09:00:00Z"}. '
        "Not declared: whether croniter takes the cron expression and whether it ever "
        "fires, and whether the server's IANA database has the time zone."
    ),
    "oneOf": [
        {
            "type": "object",
            "title": "CronSchedule",
            "properties": {
                "cron": {
                    "type": "string",
                    "minLength": 9,
                    "maxLength": MAX_CRON_CHARS,
                    "pattern": CRON,
                },
                "timezone": {
                    "anyOf": [
                        {"type": "string", "maxLength": MAX_TIMEZONE_CHARS, "pattern": TIMEZONE},
                        {"type": "null"},
                    ],
                    "description": "IANA time zone (empty or null: UTC)",
                },
            },
            "required": ["cron"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "title": "IntervalSchedule",
            "properties": {
                "every_s": {
                    "type": "integer",
                    "minimum": MIN_INTERVAL_S,
                    "maximum": MAX_INTERVAL_S,
                },
                "anchor": {
                    "anyOf": [_instant_schema(INSTANT, INSTANT_DOC), {"type": "null"}],
                    "description": "the first fire (null: now)",
                },
            },
            "required": ["every_s"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "title": "OneOffSchedule",
            "properties": {"at": _instant_schema(INSTANT, INSTANT_DOC)},
            "required": ["at"],
            "additionalProperties": False,
        },
    ],
}

RETRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Missing fields take their defaults (3 attempts, base 1 s, cap 300 s, full jitter). "
        "Not declared: cap_s must be at least base_s."
    ),
    "properties": {
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT},
        "base_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DELAY_S},
        "cap_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DELAY_S},
        "jitter": {"enum": list(JITTER_KINDS)},
    },
    "additionalProperties": False,
}

MISFIRE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "What to do with fires missed during an outage",
    "properties": {
        "kind": {"enum": list(MISFIRE_KINDS)},
        "deadline_s": {"type": "integer", "minimum": 0, "maximum": MAX_DEADLINE_S},
    },
    "additionalProperties": False,
}


PATTERN_REASONS.update(
    {
        INSTANT: INSTANT_REASON,
        HISTORY_INSTANT: HISTORY_INSTANT_REASON,
        CRON: CRON_REASON,
        TIMEZONE: TIMEZONE_REASON,
        CURSOR: CURSOR_REASON,
        NO_NUL: NO_NUL_REASON,
    }
)

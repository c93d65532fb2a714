"""Ids in paths, queries and bodies: a UUID in its canonical text form, nothing else.

`uuid.UUID()` also takes `urn:uuid:...`, `{...}`, hyphens anywhere or none, and
PostgreSQL refuses some of those with an error: each once reached the store and came
back as a 500 with the caller's value in a traceback, or was echoed back as the id.
Here an id is 8-4-4-4-12 hexadecimal digits (either case, answered in lower case);
anything else is a 422 naming the field, declared in the OpenAPI document as a pattern,
before any handler runs (tests/integration/test_api_bad_input.py::
test_ids_in_any_spelling_but_the_canonical_one_are_422).

A path's id also never ends in `:word`: `/v1/runs/{run_id}` must not take
`<id>:cancel` for its id, so that a wrong method on `/v1/runs/<id>:cancel` is a 405
naming that route's methods, not the other's (the `id` path convertor below).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator, Field
from starlette.convertors import StringConvertor, register_url_convertor

UUID_PATTERN = r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
UUID_CHARS = 36
UUID_REASON = (
    "must be a UUID: 8-4-4-4-12 hexadecimal digits, e.g. 0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c"
)
# Fields whose values are ids: a refusal of their pattern or length says UUID_REASON.
ID_FIELDS = frozenset({"job_id", "run_id", "task_id"})


class _IdConvertor(StringConvertor):
    """A path segment, less a trailing `:action` (the action routes' own suffix)."""

    regex = r"(?:(?!:[a-z]+$)[^/])+"


register_url_convertor("id", _IdConvertor())


def _lower(value: str) -> str:
    return value.lower()


def _lower_opt(value: str | None) -> str | None:
    return None if value is None else value.lower()


_ID = {"pattern": UUID_PATTERN, "min_length": UUID_CHARS, "max_length": UUID_CHARS}

# Path parameters (the route's path spells them `{job_id:id}`).
JobId = Annotated[str, Path(description="the job's id", **_ID), AfterValidator(_lower)]
RunId = Annotated[str, Path(description="the run's id", **_ID), AfterValidator(_lower)]
TaskId = Annotated[str, Path(description="the queue task's id", **_ID), AfterValidator(_lower)]
# A query parameter and a body field.
JobIdFilter = Annotated[
    str | None, Query(description="only this job's", **_ID), AfterValidator(_lower_opt)
]
BodyJobId = Annotated[str, Field(description="a job's id", **_ID), AfterValidator(_lower)]
BodyTaskId = Annotated[str, Field(description="the queue task's id", **_ID), AfterValidator(_lower)]

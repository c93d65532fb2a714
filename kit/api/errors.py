"""One error body for every 4xx: {"error": {"code", "message", "fields": [{field, reason}]}}.

Field paths are dotted and relative to the request body (`schedule.cron`,
`jobs[17].task.url`), whether the problem was found by pydantic, by a core parser or by
a check that needs the settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from kit.api.body import InvalidBody
from kit.api.declared import PATTERN_REASONS
from kit.api.ids import ID_FIELDS, UUID_REASON
from kit.api.models import SERVER_SET_FIELDS
from kit.core.errors import FieldError
from kit.store.errors import IdempotencyConflict, JobNotFound, NameTaken, RunNotFound
from kit.tasks import registry

MAX_FIELDS_REPORTED = 100

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "too_many_requests",
    503: "unavailable",
}
RETRY_AFTER_S = 1
TASK_TYPES = registry.names()  # a task's `type`: the tag pydantic puts in an error's loc
# pydantic's refusals of an id's declared form (kit.api.ids): one reason for all of them
_ID_REFUSALS = frozenset({"string_pattern_mismatch", "string_too_short", "string_too_long"})


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        fields: Sequence[tuple[str, str]] = (),
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.fields = list(fields)
        self.headers = headers


def error_response(error: ApiError) -> JSONResponse:
    body = {
        "error": {
            "code": error.code,
            "message": error.message,
            "fields": [{"field": f, "reason": r} for f, r in error.fields[:MAX_FIELDS_REPORTED]],
        }
    }
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def database_unavailable() -> ApiError:
    """PostgreSQL cannot be reached (crashed, restarting, failing over): a 503 the client
    retries, not a 500 it reads as a bug, nor a 401 it reads as a revoked token."""
    return ApiError(
        503,
        "the database is unavailable; retry shortly",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


# PostgreSQL's class 53 (insufficient resources): the server answers, and refuses
# (SQLSTATE -> code, what the client is told, seconds before it retries)
_REFUSALS = {
    "53100": (
        "database_full",
        "the database is out of disk space: it refuses writes until space is freed "
        "(nothing was written; reads still work); retry later",
        5,
    ),
    "53200": ("database_busy", "the database is out of memory; retry shortly", 1),
    "53300": ("database_busy", "the database has no connection to spare; retry shortly", 1),
}


def database_refusal(exc: BaseException) -> ApiError:
    """A database error as the client should see it: a 503 it retries, which says why
    when the server refused for lack of a resource (its disk full: SQLSTATE 53100),
    and that the database is unavailable otherwise (tests/unit/test_api_refusals.py)."""
    orig = getattr(exc, "orig", exc)
    refusal = _REFUSALS.get(getattr(orig, "sqlstate", None) or "")
    if refusal is None:
        return database_unavailable()
    code, message, retry_s = refusal
    return ApiError(503, message, code=code, headers={"Retry-After": str(retry_s)})


def field_error(exc: FieldError, prefix: str = "") -> ApiError:
    """Every field the error names (FieldErrors: several at once), under `prefix`."""
    problems = [(f"{prefix}.{f}" if prefix else f, r) for f, r in exc.problems]
    return ApiError(422, f"{problems[0][0]}: {problems[0][1]}", problems)


def _path(loc: Sequence[Any]) -> str:
    """("body", "jobs", 17, "task", "http", "url") -> "jobs[17].task.url"."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    previous: Any = None
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif previous == "task" and part in TASK_TYPES:
            pass  # the discriminated union's tag, not a field the client wrote
        else:
            out += f".{part}" if out else str(part)
        previous = part
    return out


def _problem(error: dict[str, Any]) -> tuple[str, str]:
    return _problems(error)[0]


def _problems(error: dict[str, Any]) -> list[tuple[str, str]]:
    """Each (field, reason) one of pydantic's errors stands for: a core parser's
    FieldErrors names several fields of the object it was given."""
    loc = error.get("loc", ())
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        # A core parser named the fields from the object it was given (`schedule.cron`),
        # or a model's validator from inside the model (`secret_headers[0]` of a task or
        # a webhook): prefix them with where that object sits in the body (`jobs[3]`,
        # `jobs[3].task`, `notify`).
        return [(_under(loc, f), r) for f, r in cause.problems]
    return [_one_problem(error)]


def _under(loc: Sequence[Any], field: str) -> str:
    """A validator's field name, placed where its object sits: a field validator's
    error already names its field (`schedule.cron` at `schedule`), a model validator's
    names a field inside the model at `loc`."""
    last = str(loc[-1]) if loc else ""
    names_own = field == last or field.startswith((f"{last}.", f"{last}["))
    where = _path(loc[:-1] if names_own else loc)
    return f"{where}.{field}" if where else field


def _one_problem(error: dict[str, Any]) -> tuple[str, str]:
    loc = error.get("loc", ())
    kind = error.get("type", "")
    path = _path(loc) or "body"
    if kind == "extra_forbidden":
        name = loc[-1] if loc else ""
        if name in SERVER_SET_FIELDS and len(loc) == 2:
            return path, "is set by the server and cannot be given"
        return path, "unknown field"
    if kind == "missing":
        return path, "is required"
    if kind == "json_invalid":
        return "body", "is not valid JSON"
    if kind == "union_tag_invalid":
        return path, f"must be one of {', '.join(TASK_TYPES)}"
    if kind in _ID_REFUSALS and loc and loc[-1] in ID_FIELDS:
        return path, UUID_REASON
    if kind == "string_pattern_mismatch":
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        if pattern in PATTERN_REASONS:
            return path, PATTERN_REASONS[pattern]
    message = str(error.get("msg", "is invalid"))
    return path, message.removeprefix("Value error, ")


def validation_problems(errors: Sequence[Any]) -> list[tuple[str, str]]:
    """pydantic's errors as the API reports them, (field, reason) each, once: the
    console's forms say exactly what a 422 of the API would."""
    return list(dict.fromkeys(p for e in errors for p in _problems(e)))


def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = validation_problems(exc.errors())  # unions repeat the same complaint
    first = problems[0] if problems else ("body", "is invalid")
    return error_response(ApiError(422, f"{first[0]}: {first[1]}", problems))


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """Every method some route of this path answers. The router's own 405 names only
    the first route whose path matched, and a path's methods are often on several
    routes (`GET /v1/jobs` and `POST /v1/jobs`): HTTP wants them all in `Allow`
    (tests/integration/test_api_bad_input.py::test_a_405_names_every_method_of_the_path)."""
    path = scope.get("path", "")
    methods: set[str] = set()
    for route in iter_route_contexts(app.routes):
        regex, route_methods = getattr(route, "path_regex", None), route.methods
        if regex is not None and route_methods and regex.match(path):
            methods |= route_methods
    return sorted(methods)


def install(app: FastAPI) -> None:
    async def on_api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation(request, exc)

    async def on_field_error(request: Request, exc: FieldError) -> JSONResponse:
        return error_response(field_error(exc))

    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        headers = exc.headers
        if exc.status_code == 405:
            allow = allowed_methods(request.app, request.scope)
            headers = {**(headers or {}), "Allow": ", ".join(allow)}
            message = f"method not allowed here; allowed: {', '.join(allow)}"
        return error_response(ApiError(exc.status_code, message, headers=headers))

    async def on_invalid_body(request: Request, exc: InvalidBody) -> JSONResponse:
        return error_response(ApiError(422, str(exc.detail), exc.problems))

    async def on_not_found(request: Request, exc: Exception) -> JSONResponse:
        kind = "run" if isinstance(exc, RunNotFound) else "job"
        return error_response(ApiError(404, f"no such {kind}"))

    async def on_name_taken(request: Request, exc: NameTaken) -> JSONResponse:
        fields = [("name", f"{name!r} is already used by another job") for name in exc.names]
        return error_response(ApiError(409, str(exc), fields, code="name_taken"))

    async def on_idempotency(request: Request, exc: IdempotencyConflict) -> JSONResponse:
        return error_response(
            ApiError(409, exc.reason, [("Idempotency-Key", exc.reason)], code="idempotency_key")
        )

    async def on_database_down(request: Request, exc: Exception) -> JSONResponse:
        return error_response(database_refusal(exc))

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(OperationalError, on_database_down)
    app.add_exception_handler(psycopg.OperationalError, on_database_down)  # the queue routes
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(FieldError, on_field_error)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(InvalidBody, on_invalid_body)
    app.add_exception_handler(JobNotFound, on_not_found)
    app.add_exception_handler(RunNotFound, on_not_found)
    app.add_exception_handler(NameTaken, on_name_taken)
    app.add_exception_handler(IdempotencyConflict, on_idempotency)

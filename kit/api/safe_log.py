"""What the API writes to its log about a failure: where and what kind, never the values.

A database error's text carries the caller's data: PostgreSQL's `CONTEXT: JSON data,
line 1: ...` quotes the JSON it could not take (an `Authorization` header in clear),
`invalid input syntax for type uuid: "..."` quotes the id a caller sent. The engines'
`hide_parameters` keeps bound values out of SQLAlchemy's own text, not out of the
server's. So:

- `UnhandledErrors` (the outermost middleware) answers an exception no handler took
  with a 500 in the common error shape and logs one line: the method, the route's
  template (never the raw path, which carries ids), each exception's class, the
  SQLSTATE of a database error, and the code locations of the traceback. No exception
  message and no traceback text reach the log, so nothing a caller sent does; the
  server (uvicorn) never sees the exception and has nothing to print
  (tests/integration/test_api_log_safety.py).
- `ScrubSecrets`, a logging filter on the API process's handlers, is the second line
  for records logged elsewhere (a library, a future `log.exception`): it removes
  PostgreSQL's CONTEXT/DETAIL/HINT/LINE lines and the quoted value of an "invalid
  input" error, bearer and basic credentials, URL userinfo and tokens, and replaces
  an attached traceback by its classes and locations (tests/unit/test_api_safe_log.py).
"""

from __future__ import annotations

import copy
import logging
import re
import traceback
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kit.api.errors import ApiError, error_response

log = logging.getLogger("kit.api")
_MAX_FRAMES = 12
_MAX_CHAIN = 4


def _sqlstate(exc: BaseException) -> str | None:
    """psycopg's error has it; SQLAlchemy's wraps psycopg's in `orig`."""
    code = getattr(exc, "sqlstate", None)
    if code is None:
        code = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return code if isinstance(code, str) else None


def describe(exc: BaseException) -> str:
    """`ValueError` or `sqlalchemy.exc.DataError [SQLSTATE 22P02]`, for the exception and
    what caused it, then the code locations of the traceback: no message text."""
    kinds: list[str] = []
    seen: BaseException | None = exc
    for _ in range(_MAX_CHAIN):
        if seen is None:
            break
        kind = f"{type(seen).__module__}.{type(seen).__qualname__}"
        if code := _sqlstate(seen):
            kind += f" [SQLSTATE {code}]"
        kinds.append(kind)
        seen = seen.__cause__ or seen.__context__
    frames = traceback.extract_tb(exc.__traceback__)[-_MAX_FRAMES:]
    where = "; ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in frames)
    return " <- ".join(kinds) + (f" at {where}" if where else "")


def _route(scope: Scope) -> str:
    route = scope.get("route")
    return getattr(route, "path_format", None) or getattr(route, "path", None) or "(no route)"


class UnhandledErrors:
    """ASGI middleware: an exception that reached it becomes a logged line and a 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            log.error("%s %s answered 500: %s", scope.get("method"), _route(scope), describe(exc))
            if not started:
                refusal = ApiError(
                    500,
                    "internal error (the operator's log names its kind and place)",
                    code="internal",
                )
                await error_response(refusal)(scope, receive, send)


# -- the log filter ---------------------------------------------------------------------

_SCRUBS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PostgreSQL's detail lines quote the data (CONTEXT: JSON data, line 1: ...)
    (re.compile(r"^\s*(CONTEXT|DETAIL|HINT|LINE \d+|QUERY|WHERE):.*$", re.M), r"\1: (scrubbed)"),
    # "invalid input syntax for type uuid: "<the caller's value>""
    (re.compile(r'((?:invalid input|syntax)[^:\n]*:\s*)"[^"\n]*"?', re.I), r"\1(scrubbed)"),
    (re.compile(r"\b(Bearer|Basic)\s+[^\s\"',;]+", re.I), r"\1 (secret)"),
    (re.compile(r"\b(cf_[0-9a-f]{16}_)[A-Za-z0-9_-]+"), r"\1(secret)"),
    (re.compile(r"([a-z][a-z0-9+.-]*://)[^/\s@\"']*@", re.I), r"\1(secret)@"),
)


def scrub(text: str) -> str:
    for pattern, replacement in _SCRUBS:
        text = pattern.sub(replacement, text)
    return text


class ScrubSecrets(logging.Filter):
    """Rewrites a record's message through `scrub`, and its traceback into `describe`."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose args do not fit its format: keep the format only
            message = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            message += f" ({describe(record.exc_info[1])})"
            record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            # its formatter reads the request line from the args: scrub them in place
            record.args = tuple(scrub(a) if isinstance(a, str) else a for a in record.args)
            return True
        record.msg, record.args = scrub(message), ()
        return True


def uvicorn_log_config(level: str) -> dict[str, Any]:
    """uvicorn's own logging configuration with ScrubSecrets on every handler, and the
    root logger (the kit's records) on uvicorn's stderr handler instead of nowhere."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"scrub": {"()": f"{__name__}.ScrubSecrets"}}
    for handler in config["handlers"].values():
        handler["filters"] = ["scrub"]
    config["root"] = {"handlers": ["default"], "level": level}
    return config

"""Request bodies are parsed as strict JSON before any model sees them.

Python's `json` accepts what PostgreSQL refuses (`NaN`, `Infinity`, `\\u0000`, lone
surrogates), turns `1e400` into infinity, and needs seconds for a 100,000-digit integer
while refusing one of 4,301 digits with an error in no shape of ours. Each of those used
to reach the store and come back as a 500 or a 400. Here every value is checked once, at
the edge, and each offending one is named by its path in the body (`payload.a[1]`,
`jobs[3].task.env.HOME`) with the reason, so the answer is our usual 422.

`StrictJsonRoute` plugs the parser into FastAPI: every router of the API uses it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

MAX_NUMBER_DIGITS = 100  # no field takes more; JSON peers lose exactness past 2**53 anyway
MAX_DEPTH = 64
MAX_PROBLEMS = 100


class _Bad:
    """A value the parser met and will refuse, kept in place so its path can be named."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _integer(text: str) -> Any:
    if len(text) <= MAX_NUMBER_DIGITS:  # the common case, without counting
        return int(text)
    digits = len(text.lstrip("-"))
    if digits > MAX_NUMBER_DIGITS:
        return _Bad(f"has {digits} digits; numbers of at most {MAX_NUMBER_DIGITS} are accepted")
    return int(text)


def _float(text: str) -> Any:
    if len(text) > MAX_NUMBER_DIGITS + 8:  # sign, point, exponent
        digits = sum(c.isdigit() for c in text)
        return _Bad(f"has {digits} digits; numbers of at most {MAX_NUMBER_DIGITS} are accepted")
    value = float(text)
    if value in (math.inf, -math.inf):
        return _Bad(f"must be a finite number ({text} is out of range)")
    return value


def _constant(name: str) -> _Bad:
    return _Bad(f"must be a finite number ({name} is not JSON)")


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain NUL (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (a lone surrogate escape is not)"
    return None


class InvalidBody(HTTPException):
    """A body that is not strict JSON: a 422 naming each problem (kit.api.errors renders it)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        first = problems[0]
        super().__init__(status_code=422, detail=f"{first[0]}: {first[1]}")
        self.problems = problems


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def problems_in(value: Any) -> list[tuple[str, str]]:
    """Every (path, reason) of a value parsed by `loads_lenient`; an empty list if clean.

    Iterative (no recursion limit to hit), and scalars are judged where they are met:
    most of a large body is scalars, and this walk is on every request's path."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack and len(found) < MAX_PROBLEMS:
        path, item, depth = stack.pop()
        if isinstance(item, dict):
            pairs: Any = item.items()
        elif isinstance(item, list):
            pairs = enumerate(item)
        else:
            if reason := _scalar_problem(item):
                found.append((path or "body", reason))
            continue
        if depth >= MAX_DEPTH:
            found.append((path or "body", f"nests deeper than {MAX_DEPTH} levels"))
            continue
        containers = []
        for key, child in pairs:
            if type(key) is str and (reason := _string_problem(key)):
                found.append((path or "body", f"has a key that {reason}"))
            elif isinstance(child, dict | list):
                containers.append((_join(path, key), child, depth + 1))
            elif reason := _scalar_problem(child):
                found.append((_join(path, key), reason))
        stack.extend(reversed(containers))
    return found


def _scalar_problem(item: Any) -> str | None:
    if type(item) is str:
        return _string_problem(item)
    if type(item) is _Bad:
        return item.reason
    return None


def loads_lenient(raw: bytes | str) -> Any:
    """json.loads that keeps bad numbers and constants as markers instead of failing."""
    return json.loads(
        raw,
        parse_constant=_constant,
        parse_int=_integer,
        parse_float=_float,
    )


def loads_strict(raw: bytes | str) -> Any:
    """Parse a request body; raise InvalidBody naming every offending value.

    A body that is not JSON at all raises json.JSONDecodeError, which FastAPI answers
    as its usual validation error (`body: is not valid JSON`).
    """
    try:
        value = loads_lenient(raw)
    except RecursionError:
        raise InvalidBody([("body", f"nests deeper than {MAX_DEPTH} levels")]) from None
    except UnicodeDecodeError:
        raise InvalidBody([("body", "is not UTF-8")]) from None
    problems = problems_in(value)
    if problems:
        raise InvalidBody(problems)
    return value


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """A route whose JSON body goes through `loads_strict`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler

"""Bearer tokens, checked before anything else reads the request: deny by default.

Every path under /v1 needs a live token; GET/HEAD need the `read` scope, every other
method `write`; `admin` implies both. The check runs as ASGI middleware, so no route can
forget it and an unauthenticated caller learns nothing from body validation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from kit.api.errors import ApiError, database_unavailable, error_response
from kit.store.tokens import TokenInfo, token_verify

PROTECTED_PREFIX = "/v1"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cronfleet"'}


def required_scope(method: str) -> str:
    return "read" if method in ("GET", "HEAD", "OPTIONS") else "write"


class BearerAuth:
    def __init__(self, app: ASGIApp, engine: Callable[[], Engine]) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (
            path == PROTECTED_PREFIX
            or path.startswith(PROTECTED_PREFIX + "/")
            or path.startswith(PROTECTED_PREFIX + ":")
        ):
            await self.app(scope, receive, send)
            return
        refusal, principal = await self._check(scope)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    async def _check(self, scope: Scope) -> tuple[ApiError | None, TokenInfo | None]:
        header = ""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        if not header:
            return ApiError(401, "missing bearer token", headers=_CHALLENGE), None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return ApiError(401, "malformed Authorization header", headers=_CHALLENGE), None
        try:
            info = await run_in_threadpool(token_verify, self.engine(), token.strip())
        except OperationalError:
            return database_unavailable(), None
        if info is None:
            return ApiError(401, "unknown or revoked token", headers=_CHALLENGE), None
        scope_needed = required_scope(scope["method"])
        if not info.allows(scope_needed):
            return ApiError(403, f"this token lacks the {scope_needed!r} scope"), None
        return None, info


def principal(request: Request) -> TokenInfo:
    """The caller, as authenticated by BearerAuth (a route dependency)."""
    info = request.scope.get("state", {}).get("principal")
    if info is None:  # a /v1 route reached without the middleware: refuse, never allow
        raise ApiError(401, "missing bearer token", headers=_CHALLENGE)
    return info


# The caller of a /v1 route, and the optional Idempotency-Key of a create: declared once
# for every router.
Caller = Annotated[TokenInfo, Depends(principal)]
IdempotencyKey = Annotated[
    str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255)
]

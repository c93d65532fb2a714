"""Bearer tokens, checked before anything else reads the request: deny by default.

Every path under /v1 needs a live token; GET/HEAD need the `read` scope, every other
method `write`; `admin` implies both. The check runs as ASGI middleware, so no route can
forget it and an unauthenticated caller learns nothing from body validation.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp, Receive, Scope, Send

from kit.api.errors import ApiError, database_refusal, error_response
from kit.store.db import on_loop
from kit.store.tokens import TokenInfo, token_verify

PROTECTED_PREFIX = "/v1"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cronfleet"'}


def required_scope(method: str) -> str:
    return "read" if method in ("GET", "HEAD", "OPTIONS") else "write"


class TokenCache:
    """Tokens this process verified recently, so most requests skip the database.

    An entry lives `ttl_s` from the moment its database read began, so a token revoked
    (or deleted) at any instant stops working in this process at most `ttl_s` after the
    revoke commits. Only live tokens are kept: an unknown, malformed or revoked token asks
    the database every time. Keyed by a hash of the whole token, so a wrong secret with a
    known id never matches. `clock` is monotonic seconds (a test passes its own).
    """

    def __init__(
        self, ttl_s: float, clock: Callable[[], float] = time.monotonic, max_entries: int = 10_000
    ) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[float, TokenInfo]] = {}

    @staticmethod
    def key(token: str) -> bytes:
        return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()

    def get(self, key: bytes) -> TokenInfo | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self.clock() >= entry[0]:
            self._entries.pop(key, None)
            return None
        return entry[1]

    def put(self, key: bytes, info: TokenInfo, read_began: float) -> None:
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()  # rare (10,000 live tokens in 5 s): start over
        self._entries[key] = (read_began + self.ttl_s, info)


class BearerAuth:
    def __init__(
        self, app: ASGIApp, engine: Callable[[], AsyncEngine], cache: TokenCache | None = None
    ) -> None:
        self.app = app
        self.engine = engine
        self.cache = cache or TokenCache(0)

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
        token = token.strip()
        key = TokenCache.key(token)
        info = self.cache.get(key)
        if info is None:
            read_began = self.cache.clock()
            try:
                info = await on_loop(self.engine(), token_verify, token)
            except OperationalError as exc:
                return database_refusal(exc), None
            if info is not None:
                self.cache.put(key, info, read_began)
        if info is None:
            return ApiError(401, "unknown or revoked token", headers=_CHALLENGE), None
        scope_needed = required_scope(scope["method"])
        if not info.allows(scope_needed):
            return ApiError(403, f"this token lacks the {scope_needed!r} scope"), None
        return None, info


async def principal(request: Request) -> TokenInfo:
    """The caller, as authenticated by BearerAuth (a route dependency). Async: it only
    reads the scope, and a sync dependency would cost every request a thread hop."""
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

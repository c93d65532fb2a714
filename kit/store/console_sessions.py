"""Console sessions: a login with an API token opens one; the browser holds only a
random secret in an HttpOnly cookie, the database only its sha256.

A session is as good as its token: a revoked token ends every session opened with it
(checked on each request), and a session ends at its `expires_at` (the maintenance
service deletes it later). Each session carries its own CSRF token for the forms.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from kit.store.db import NOW_SQL
from kit.store.tokens import TokenInfo, token_verify


@dataclass(frozen=True)
class ConsoleSession:
    token: TokenInfo
    csrf_token: str


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def session_open(
    engine: Engine, token: str, ttl_s: int, *, now: datetime | None = None
) -> tuple[str, ConsoleSession] | None:
    """Verify the API token; open a session for it, to expire `ttl_s` after `now` (the
    database's clock by default). Returns (cookie secret, session), or None when the
    token is not a live one."""
    info = token_verify(engine, token)
    if info is None:
        return None
    secret = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"""
                INSERT INTO console_sessions (session_hash, token_id, csrf_token, expires_at)
                VALUES (:h, :t, :c, {NOW_SQL} + make_interval(secs => :ttl))
                """
            ),
            {"h": _hash(secret), "t": info.token_id, "c": csrf, "ttl": ttl_s, "now": now},
        )
    return secret, ConsoleSession(info, csrf)


def session_resolve(
    engine: Engine, secret: str, *, now: datetime | None = None
) -> ConsoleSession | None:
    """The live session this cookie names, with its token; None when unknown, expired
    (`now` at or past its `expires_at`) or its token was revoked."""
    if not secret or len(secret) > 200:
        return None
    with engine.begin() as conn:
        row = conn.execute(
            text(
                f"""
                SELECT s.csrf_token, t.token_id, t.tenant, t.scopes, t.created_at, t.revoked_at
                FROM console_sessions s JOIN api_tokens t ON t.token_id = s.token_id
                WHERE s.session_hash = :h AND s.expires_at > {NOW_SQL}
                  AND t.revoked_at IS NULL
                """
            ),
            {"h": _hash(secret), "now": now},
        ).first()
    if row is None:
        return None
    info = TokenInfo(row.token_id, row.tenant, tuple(row.scopes), row.created_at, row.revoked_at)
    return ConsoleSession(info, row.csrf_token)


def session_close(engine: Engine, secret: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("DELETE FROM console_sessions WHERE session_hash = :h"), {"h": _hash(secret)}
        )

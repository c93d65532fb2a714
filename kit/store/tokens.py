"""API tokens: `cf_<token_id>_<secret>`, shown once; only sha256(secret) is stored.

The token id is public (it names the row, appears in logs and `tokens list`); the
secret is verified by hash with a constant-time compare.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select, update

from kit.core.errors import FieldError
from kit.store.db import at_or_now
from kit.store.schema import api_tokens
from kit.store.tenants import tenant_upsert_in

# `command`: may write jobs with command tasks (where the operator's task policy also
# allows them for the tenant). `admin` implies read and write, never command.
SCOPES = ("read", "write", "admin", "command")
DEFAULT_SCOPES = ("read", "write")
_TOKEN = re.compile(r"^cf_([0-9a-f]{16})_([A-Za-z0-9_-]{20,128})$")


@dataclass(frozen=True)
class IssuedToken:
    token_id: str
    tenant: str
    scopes: tuple[str, ...]
    token: str  # the plaintext, returned once


@dataclass(frozen=True)
class TokenInfo:
    token_id: str
    tenant: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None

    def allows(self, scope: str) -> bool:
        """admin implies read and write (not command)."""
        return scope in self.scopes or ("admin" in self.scopes and scope in ("read", "write"))


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def scopes_check(scopes: Iterable[str]) -> tuple[str, ...]:
    result = tuple(dict.fromkeys(scopes))
    if not result:
        raise FieldError("scope", f"give at least one of {', '.join(SCOPES)}")
    for scope in result:
        if scope not in SCOPES:
            raise FieldError("scope", f"{scope!r} is not one of {', '.join(SCOPES)}")
    return result


def token_create(
    engine: Engine, tenant: str, scopes: Iterable[str] = DEFAULT_SCOPES
) -> IssuedToken:
    """Create the tenant if new and a token for it; the plaintext is not recoverable later."""
    checked = scopes_check(scopes)
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    with engine.begin() as conn:
        tenant_upsert_in(conn, tenant)
        conn.execute(
            api_tokens.insert().values(
                token_id=token_id, tenant=tenant, scopes=list(checked), secret_hash=_hash(secret)
            )
        )
    return IssuedToken(token_id, tenant, checked, f"cf_{token_id}_{secret}")


def token_verify(engine: Engine, token: str) -> TokenInfo | None:
    """The live token this plaintext is, or None (malformed, unknown, wrong secret, revoked)."""
    match = _TOKEN.match(token or "")
    if not match:
        return None
    token_id, secret = match.groups()
    with engine.begin() as conn:
        row = conn.execute(select(api_tokens).where(api_tokens.c.token_id == token_id)).first()
    presented = _hash(secret)
    stored = row.secret_hash if row is not None else "0" * 64
    if not hmac.compare_digest(presented, stored) or row is None or row.revoked_at is not None:
        return None
    return _info(row)


def token_revoke(engine: Engine, token_id: str, now: datetime | None = None) -> bool:
    with engine.begin() as conn:
        result = conn.execute(
            update(api_tokens)
            .where(api_tokens.c.token_id == token_id, api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=at_or_now(now))
        )
    return result.rowcount == 1


def tokens_list(engine: Engine, tenant: str | None = None) -> list[TokenInfo]:
    query = select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.token_id)
    if tenant is not None:
        query = query.where(api_tokens.c.tenant == tenant)
    with engine.begin() as conn:
        return [_info(row) for row in conn.execute(query)]


def _info(row: Any) -> TokenInfo:
    return TokenInfo(row.token_id, row.tenant, tuple(row.scopes), row.created_at, row.revoked_at)

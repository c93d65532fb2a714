"""Tenants: every job, run and token belongs to exactly one."""

from __future__ import annotations

import re

from sqlalchemy import Connection, Engine
from sqlalchemy.dialects.postgresql import insert

from kit.core.errors import FieldError
from kit.store.schema import tenants

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def tenant_check(tenant: str) -> str:
    if not isinstance(tenant, str) or not _TENANT.match(tenant):
        raise FieldError("tenant", "must be 1-64 letters, digits, '.', '_' or '-'")
    return tenant


def tenant_upsert_in(conn: Connection, tenant: str) -> None:
    """Inside a caller's transaction (job or token creation)."""
    conn.execute(insert(tenants).values(tenant=tenant_check(tenant)).on_conflict_do_nothing())


def tenant_upsert(engine: Engine, tenant: str) -> None:
    with engine.begin() as conn:
        tenant_upsert_in(conn, tenant)

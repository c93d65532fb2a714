"""The engine: one pool per process, built from the settings at the edge."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    DateTime,
    Engine,
    bindparam,
    create_engine,
    func,
    select,
)


def engine_for(
    database_url: str, pool_size: int = 10, session: dict[str, int | str] | None = None
) -> Engine:
    """hide_parameters: an error (logged by the services, sometimes shown) would otherwise
    carry the statement's bound values: task specs with their headers, payloads, the
    text of a run's error. `session`: server settings for every connection of the pool
    (`-c name=value` at connect).

    JIT compilation is off for the kit's own connections: its statements are short and
    the planner's cost of one grows with the run history's partitions, so with
    PostgreSQL's default (`jit = on`) a batched finish crossed the JIT thresholds at ~13
    partitions and took 3.5-4.8 s to compile instead of ~1 ms to run
    (docs/run-history.md)."""
    settings: dict[str, int | str] = {"jit": "off", **(session or {})}
    connect_args = {"options": " ".join(f"-c {k}={v}" for k, v in settings.items())}
    return create_engine(
        database_url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        hide_parameters=True,
        connect_args=connect_args,
    )


# The same in a text() statement, bound as `:now` (None: the database's clock). Every
# statement whose decision reads the clock uses it, so a test can set the instant.
NOW_SQL = "coalesce(CAST(:now AS timestamptz), now())"


def at_or_now(now: datetime | None) -> ColumnElement[datetime]:
    """`coalesce(:now, now())`: the database's clock unless a caller (a test, the model)
    passes an explicit instant."""
    return func.coalesce(bindparam("now", now, type_=DateTime(timezone=True)), func.now())


def db_now(conn: Connection, now: datetime | None = None) -> datetime:
    """The instant a transaction decides with, as a Python value (the database's clock)."""
    if now is not None:
        return now
    return conn.execute(select(func.now())).scalar_one()


def is_uuid(value: str) -> bool:
    """Ids are UUIDs: anything else cannot name a row, so callers answer 404 without asking."""
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True

"""The engine: one pool per process, built from the settings at the edge."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

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
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

P = ParamSpec("P")
T = TypeVar("T")


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
    return create_engine(database_url, hide_parameters=True, **_pool_options(pool_size, session))


def _pool_options(pool_size: int, session: dict[str, int | str] | None) -> dict[str, Any]:
    settings: dict[str, int | str] = {"jit": "off", **(session or {})}
    connect_args = {"options": " ".join(f"-c {k}={v}" for k, v in settings.items())}
    return {
        "pool_size": pool_size,
        "max_overflow": pool_size,
        "pool_pre_ping": True,
        "connect_args": connect_args,
    }


def async_engine_for(
    database_url: str | URL, pool_size: int = 10, session: dict[str, int | str] | None = None
) -> AsyncEngine:
    """The same engine as `engine_for` (same options), on psycopg's async connection: for
    a service on an event loop (the API), whose store calls go through `on_loop`."""
    return create_async_engine(
        database_url, hide_parameters=True, **_pool_options(pool_size, session)
    )


async def on_loop(
    engine: AsyncEngine,
    fn: Callable[Concatenate[Engine, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run a store function, unchanged, on the calling event loop: `fn` gets the async
    engine's synchronous face, and each of its database waits suspends this coroutine
    (SQLAlchemy's greenlet bridge, as `AsyncConnection.run_sync`) instead of blocking a
    thread. The store keeps one copy of every function and its SQL, and a caller on an
    event loop pays no hop to a worker thread and back. `fn` must only wait on this
    engine: anything else it waits on would block the loop."""
    return await greenlet_spawn(fn, engine.sync_engine, *args, **kwargs)


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


_CANONICAL_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def is_uuid(value: object) -> bool:
    """Ids are UUIDs in their canonical text form: anything else cannot name a row, so
    callers answer 404 without asking. Not `uuid.UUID()`, which also takes `urn:uuid:`,
    braces and hyphens anywhere: PostgreSQL refuses some of those with an error
    (tests/unit/test_store_ids.py)."""
    return isinstance(value, str) and _CANONICAL_UUID.fullmatch(value) is not None

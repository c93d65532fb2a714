"""psycopg's async connections for a service on an event loop (the API's queue and jobs
routes), and the one way the store's step functions (`Steps`) run on them or on an Engine.

A store function that must run both from sync code (tests, tooling) and from an event
loop is written once, as a generator of steps: it yields each statement (`Query`: its
rows are wanted; `Execute`: they are not) and receives the rows back, deciding in between
with kit.core. `run_steps` drives it on a SQLAlchemy Engine, `run_steps_in` inside a
caller's SQLAlchemy transaction, `run_steps_async` on a pooled async connection, with no
thread or greenlet hop (the hop costs the API CPU on every request).

`atomic` (the default) runs the steps in one transaction. A function whose statements
each stand alone (one statement, or a read whose answer only picks the next statement)
passes `atomic=False`: each statement is then its own transaction, one round trip, with
no BEGIN and COMMIT of their own; a statement that writes several tables is made atomic
by being one statement (data-modifying CTEs).

The async driver does not use psycopg's pipeline mode: it saves round trips but costs
more CPU, in the API and in PostgreSQL, than they are worth on one machine (psycopg's
pipeline polls the socket for every command it sends; benchmarks/pg_async_modes.py).

`AsyncPool` is deliberately small: connections are made on demand up to `size` and kept;
a request that finds none free waits for one; a connection that failed (broken) is
dropped, one left in a transaction is rolled back. When the database is down, connecting
fails at once with psycopg's OperationalError (the API answers 503), as the sync engine
does. A connection idle longer than `ping_after_s` is pinged before use, so one the
server dropped (a restart) is replaced instead of failing a request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Generator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL, make_url

T = TypeVar("T")


@dataclass(frozen=True)
class Query:
    """A statement whose rows the step reads (named parameters, psycopg style)."""

    sql: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Execute:
    """A statement whose rows nobody reads."""

    sql: str
    params: Mapping[str, Any]


Step = Query | Execute
# A store function's body: yields statements, receives each Query's rows (None after an
# Execute), returns the function's result.
Steps = Generator[Step, Sequence[Any] | None, T]


def run_steps(engine: Engine, steps: Steps[T], atomic: bool = True) -> T:
    """Run the steps on `engine`: in one transaction (rolled back if a step raises), or,
    not `atomic`, each statement in a transaction of its own (autocommit)."""
    if atomic:
        with engine.begin() as conn:
            return run_steps_in(conn, steps)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return run_steps_in(conn, steps)


def run_steps_in(conn: Connection, steps: Steps[T]) -> T:
    """Run the steps on a caller's connection, inside its transaction (a store function
    on SQLAlchemy that shares one of these operations)."""
    answer: Sequence[Any] | None = None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as done:
            return done.value
        result = conn.exec_driver_sql(step.sql, dict(step.params))
        answer = result.all() if isinstance(step, Query) else None


async def run_steps_async(pool: AsyncPool, steps: Steps[T], atomic: bool = True) -> T:
    """Run the steps on a pooled connection: in one transaction, or, not `atomic`, each
    statement on its own (the connection is in autocommit)."""
    async with pool.connection() as conn:
        if not atomic:
            return await _drive(conn, steps)
        async with conn.transaction():
            return await _drive(conn, steps)


async def _drive(conn: psycopg.AsyncConnection[Any], steps: Steps[T]) -> T:
    answer: Sequence[Any] | None = None
    cur = conn.cursor()
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as done:
            return done.value
        await cur.execute(step.sql, step.params)
        answer = await cur.fetchall() if isinstance(step, Query) else None


def conninfo_of(url: str | URL) -> str:
    """A libpq connection string from a SQLAlchemy URL (`postgresql+psycopg://...`)."""
    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


class AsyncPool:
    """Up to `size` async connections to one database, for one event loop.

    Used from another event loop than the one it started on (a test client that runs
    each request on a new loop), it serves each request on a connection of its own,
    closed after: asyncio objects belong to one loop."""

    def __init__(
        self,
        conninfo: str,
        size: int = 10,
        options: str = "-c jit=off",
        ping_after_s: float = 5.0,
    ) -> None:
        self.conninfo = conninfo
        self.size = size
        self.options = options
        self.ping_after_s = ping_after_s
        self._idle: list[tuple[float, psycopg.AsyncConnection[Any]]] = []
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._freed: asyncio.Condition | None = None
        self._closed = False

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        # autocommit: a transaction is always explicit (`conn.transaction()`), a
        # statement outside one is its own, and a ping opens none
        return await psycopg.AsyncConnection.connect(
            self.conninfo, options=self.options, row_factory=namedtuple_row, autocommit=True
        )

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop, self._freed = loop, asyncio.Condition()
        if loop is not self._loop or self._closed:
            conn = await self._connect()
            try:
                yield conn
            finally:
                await conn.close()
            return
        conn = await self._get()
        try:
            yield conn
        finally:
            await self._put(conn)

    async def _get(self) -> psycopg.AsyncConnection[Any]:
        assert self._freed is not None
        async with self._freed:
            while not self._idle and self._count >= self.size:
                await self._freed.wait()
            if self._idle:
                idle_since, conn = self._idle.pop()
                if conn.closed or conn.broken:
                    self._count -= 1
                elif time.monotonic() - idle_since < self.ping_after_s:
                    return conn
                else:
                    try:
                        await conn.execute("SELECT 1")
                        return conn
                    except psycopg.Error:
                        self._count -= 1
                        await conn.close()
            self._count += 1
        try:
            return await self._connect()
        except BaseException:
            async with self._freed:
                self._count -= 1
                self._freed.notify()
            raise

    async def _put(self, conn: psycopg.AsyncConnection[Any]) -> None:
        assert self._freed is not None
        keep = not (conn.closed or conn.broken or self._closed)
        if keep and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                await conn.rollback()
            except psycopg.Error:
                keep = False
        if not keep:
            await conn.close()
        async with self._freed:
            if keep:
                self._idle.append((time.monotonic(), conn))
            else:
                self._count -= 1
            self._freed.notify()

    async def close(self) -> None:
        """Close the idle connections; connections in use are closed when returned."""
        self._closed = True
        idle, self._idle = self._idle, []
        self._count -= len(idle)
        for _, conn in idle:
            await conn.close()

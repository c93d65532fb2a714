"""kit.store.pg_async.AsyncPool, the hot routes' connections: bounded, a connection the
server dropped is replaced rather than failing a request, a failed transaction is not
handed on, and a caller on another event loop still gets a working connection."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from kit.store.pg_async import (
    AsyncPool,
    Execute,
    Query,
    Steps,
    conninfo_of,
    run_steps,
    run_steps_async,
)

pytestmark = pytest.mark.integration


def _pool(engine: Engine, size: int = 2, ping_after_s: float = 5.0) -> AsyncPool:
    return AsyncPool(conninfo_of(engine.url), size=size, ping_after_s=ping_after_s)


async def _backend_pid(pool: AsyncPool) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
        assert row is not None
        return int(row.pid)


def test_at_most_size_connections_and_waiters_are_served(engine: Engine) -> None:
    async def main() -> tuple[int, set[int]]:
        pool = _pool(engine, size=2)
        busiest = 0
        in_use = 0
        pids: set[int] = set()

        async def one() -> None:
            nonlocal busiest, in_use
            async with pool.connection() as conn:
                in_use += 1
                busiest = max(busiest, in_use)
                row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
                assert row is not None
                pids.add(row.pid)
                await asyncio.sleep(0.01)
                in_use -= 1

        await asyncio.gather(*(one() for _ in range(10)))
        await pool.close()
        return busiest, pids

    busiest, pids = asyncio.run(main())
    assert busiest == 2
    assert len(pids) == 2  # kept and reused, not one per request


def test_a_connection_the_server_dropped_is_replaced(engine: Engine) -> None:
    async def main() -> tuple[int, int]:
        pool = _pool(engine, size=1, ping_after_s=0)  # every reuse is pinged first
        first = await _backend_pid(pool)
        with engine.begin() as conn:  # the server ends it while it sits idle in the pool
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        await asyncio.sleep(0.1)
        second = await _backend_pid(pool)
        await pool.close()
        return first, second

    first, second = asyncio.run(main())
    assert first != second


def test_a_failed_transaction_is_rolled_back_not_handed_on(engine: Engine) -> None:
    def failing() -> Steps[None]:
        yield Execute("SELECT 1", {})
        yield Query("SELECT 1/0 AS boom", {})

    async def main() -> str:
        pool = _pool(engine, size=1)
        with pytest.raises(psycopg.errors.DivisionByZero):
            await run_steps_async(pool, failing())
        async with pool.connection() as conn:
            status = conn.info.transaction_status.name
        await pool.close()
        return status

    assert asyncio.run(main()) == "IDLE"


def test_another_event_loop_gets_a_connection_of_its_own(engine: Engine) -> None:
    pool = _pool(engine, size=1)

    async def pid() -> int:
        return await _backend_pid(pool)

    first = asyncio.run(pid())
    second = asyncio.run(pid())  # a new loop: the pool's kept connection is not used
    asyncio.run(pool.close())
    assert first != second


def _writes(table: str) -> Steps[None]:
    yield Execute(f"INSERT INTO {table} VALUES (1)", {})
    yield Query("SELECT 1/0 AS boom", {})


@pytest.mark.parametrize("atomic", [True, False])
def test_atomic_steps_are_one_transaction_the_others_one_each(engine: Engine, atomic: bool) -> None:
    """Both drivers: a failure after a write undoes it in one transaction (`atomic`), and
    leaves it where each statement is its own (what the store passes only for steps whose
    statements stand alone)."""
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE probe_sync (n int)"))
        conn.execute(text("CREATE TABLE probe_async (n int)"))
    with pytest.raises(DBAPIError):
        run_steps(engine, _writes("probe_sync"), atomic=atomic)

    async def main() -> None:
        pool = _pool(engine, size=1)
        with pytest.raises(psycopg.errors.DivisionByZero):
            await run_steps_async(pool, _writes("probe_async"), atomic=atomic)
        await pool.close()

    asyncio.run(main())
    with engine.connect() as conn:
        for table in ("probe_sync", "probe_async"):
            rows = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
            assert rows == (0 if atomic else 1), table

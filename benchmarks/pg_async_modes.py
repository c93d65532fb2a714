"""The async store driver pipelined (round 2 of issue 16) or not (round 3): CPU per call
in this process and in PostgreSQL, calls/s and latency, for the queue's one-task calls.

`--concurrency` coroutines on one event loop (uvloop), each enqueueing one task, leasing
one and acking it, again and again, through kit.store.queues' own steps and SQL; a
scratch database on the stack's server. Each mode runs `--calls` calls after a warm-up
of the same size; `--rounds` alternates the modes (the machine drifts). Run it with
nothing else loading the machine.

    python benchmarks/pg_async_modes.py --calls 7200 --concurrency 8 --rounds 3

- pipelined: every call in one transaction in psycopg's pipeline mode (BEGIN with the
  first statement, COMMIT with the last; an enqueue two round trips, a lease or an ack
  two), as round 2's `run_steps_async`;
- plain: kit.store.pg_async.run_steps_async as the store calls it now (an enqueue one
  statement in autocommit, one round trip; a lease or an ack BEGIN, read, write, COMMIT:
  four).

Also prints how often psycopg polled the socket per call (its zero-timeout poll before
a write, `psycopg.waiting._ready`): the pipeline's cost that round 2's profile showed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg.waiting
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from kit.settings import load_settings
from kit.store import queues
from kit.store.pg_async import AsyncPool, Steps, _drive, conninfo_of, run_steps_async
from kit.store.scratch import migrated_database
from kit.store.tenants import tenant_upsert

TENANT = "bench"
_polls = [0]
_ready = psycopg.waiting._ready


def _counting_ready(fileno: int, wait: Any) -> Any:
    _polls[0] += 1
    return _ready(fileno, wait)


psycopg.waiting._ready = _counting_ready  # type: ignore[assignment]


async def pipelined(pool: AsyncPool, steps: Steps[Any], atomic: bool = True) -> Any:
    """Round 2's driver: one transaction in pipeline mode, whatever the steps."""
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        return await _drive(conn, steps)


async def one_call_cycle(pool: AsyncPool, run: Callable[..., Any], worker: str) -> list[float]:
    """Enqueue, lease, ack: the seconds each took."""
    t0 = time.perf_counter()
    await run(pool, queues._enqueue(queues.TaskEnqueue(TENANT, "q", {"x": 1})), atomic=False)
    t1 = time.perf_counter()
    leased = await run(pool, queues._lease(queues.TaskLease(TENANT, "q", worker, max_tasks=1)))
    t2 = time.perf_counter()
    for task in leased:
        item = queues.AckItem(task.task_id, task.lease_token)
        await run(pool, queues._ack_many(TENANT, [item], None))
    t3 = time.perf_counter()
    return [t1 - t0, t2 - t1, t3 - t2]


def backend_cpu_s(pids: set[int]) -> float:
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def measure(url: str, mode: str, calls: int, concurrency: int) -> str:
    run = pipelined if mode == "pipelined" else run_steps_async
    pool = AsyncPool(conninfo_of(url), size=concurrency)
    per_worker = max(1, calls // (3 * concurrency))
    times: list[list[float]] = []

    async def worker(k: int) -> None:
        for _ in range(per_worker):
            times.append(await one_call_cycle(pool, run, f"w{k}"))

    await asyncio.gather(*(worker(k) for k in range(concurrency)))  # warm-up
    held = [pool.connection() for _ in range(concurrency)]
    conns = [await cm.__aenter__() for cm in held]
    pids = set()
    for conn in conns:
        row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
        pids.add(row.pid)
    for cm in held:
        await cm.__aexit__(None, None, None)
    times.clear()
    _polls[0] = 0
    pg0, cpu0, wall0 = backend_cpu_s(pids), time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    pg1, cpu1, wall1 = backend_cpu_s(pids), time.process_time(), time.perf_counter()
    await pool.close()
    n = 3 * len(times)
    lines = [
        f"{mode:9}: {n} calls, {n / (wall1 - wall0):,.0f} calls/s, CPU per call: this process "
        f"{1000 * (cpu1 - cpu0) / n:.3f} ms, PostgreSQL {1000 * (pg1 - pg0) / n:.3f} ms; "
        f"socket polls per call {_polls[0] / n:.1f}"
    ]
    for i, name in enumerate(("enqueue", "lease", "ack")):
        column = sorted(t[i] for t in times)
        p50, p99 = column[len(column) // 2], column[int(0.99 * (len(column) - 1))]
        lines.append(f"    {name:7} p50 {1000 * p50:.2f} ms, p99 {1000 * p99:.2f} ms")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=7200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    admin = make_url(load_settings().database_url)
    with migrated_database(admin, "cf_bench_pg_async_modes") as db:
        url = db.render_as_string(hide_password=False)
        engine = create_engine(url)
        tenant_upsert(engine, TENANT)
        engine.dispose()
        for _ in range(args.rounds):
            for mode in ("pipelined", "plain"):
                print(uvloop.run(measure(url, mode, args.calls, args.concurrency)), flush=True)


if __name__ == "__main__":
    main()

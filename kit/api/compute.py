"""Work a request makes the API compute (a schedule's fires for a preview, explain's
walk over a job's history), on threads, at most CPU_SLOTS of them at once per process.

Such work holds the interpreter lock while it runs: eight previews at once once moved
another tenant's median answer from 9.5 ms to ~300 ms. The work of one request is
bounded where it is computed (a preview's count and the years it searches, explain's
range and fire limit: kit.api.schedule_preview, kit.core.owed); this bounds how many
run together, so the others wait without taking the CPU from everyone else."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread
from fastapi import Request

CPU_SLOTS = 1
P = ParamSpec("P")
T = TypeVar("T")


def limiter() -> anyio.CapacityLimiter:
    """One per application (create_app keeps it in `app.state.cpu_limiter`)."""
    return anyio.CapacityLimiter(CPU_SLOTS)


async def cpu_bound(request: Request, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return await anyio.to_thread.run_sync(
        lambda: fn(*args, **kwargs), limiter=request.app.state.cpu_limiter
    )

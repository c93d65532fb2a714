"""The task types: the one list that the API (request models, OpenAPI, its error
messages), the console, the jobs list's filter and the worker read.

A task type is a module `kit/tasks/<name>.py` that declares `TASK = TaskType(...)` (its
spec, its runner, whether it runs inline: kit.tasks.spec), and its entry in BUILTIN,
whose order is the order the API names them in ("must be one of http, command, ...").
What a tenant may run and reach stays the operator's (kit.tasks.policy): a type adds a
way to run, never a permission.

The API builds its models from the registry when it is imported, so a type registered
later would be run by workers but refused by the API: `register` refuses once anything
has read the list (`task_types`, `names`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kit.tasks import command, http, noop, sleep
from kit.tasks.context import RunContext, TaskResult
from kit.tasks.spec import AsyncRunner, InlineRunner, Runner, TaskType

BUILTIN: tuple[TaskType, ...] = (http.TASK, command.TASK, noop.TASK, sleep.TASK)

_types: dict[str, TaskType] = {}
_read = False
# Views for the per-run lookups (a dict each, as the worker's hot path wants).
RUNNERS: dict[str, Runner] = {}
INLINE: dict[str, InlineRunner] = {}
ASYNC: dict[str, AsyncRunner] = {}


def register(task: TaskType) -> None:
    """Add a task type (a built-in at import, a test's throwaway type before the API is
    imported); ValueError for a name taken, RuntimeError once the list has been read."""
    if task.name in _types:
        raise ValueError(f"task type {task.name!r} is already registered")
    if _read:
        raise RuntimeError(
            f"task type {task.name!r} registered after the task types were read (the API's "
            "models are built from them at import): register it before importing kit.api"
        )
    _types[task.name] = task
    RUNNERS[task.name] = task.run
    if task.inline is not None:
        INLINE[task.name] = task.inline
    if task.run_async is not None:
        ASYNC[task.name] = task.run_async


for _task in BUILTIN:
    register(_task)


def task_types() -> tuple[TaskType, ...]:
    """Every task type, in the API's order; after this, `register` refuses."""
    global _read
    _read = True
    return tuple(_types.values())


def names() -> tuple[str, ...]:
    return tuple(t.name for t in task_types())


def execute(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    """Run one task spec (the job's `task` JSON) for one run attempt."""
    if not isinstance(spec, Mapping):
        return TaskResult(False, "task: must be a JSON object")
    runner = RUNNERS.get(spec.get("type"))  # type: ignore[arg-type]
    if runner is None:
        return TaskResult(False, f"task.type: must be one of {', '.join(RUNNERS)}")
    if ctx.cancel.is_set():
        return TaskResult(False, "cancelled")
    return runner(spec, ctx)


async def execute_async(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    """`execute` on an event loop, for a type with an async runner (ASYNC)."""
    if not isinstance(spec, Mapping):
        return TaskResult(False, "task: must be a JSON object")
    runner = ASYNC.get(spec.get("type"))  # type: ignore[arg-type]
    if runner is None:
        return TaskResult(False, f"task.type: {spec.get('type')!r} does not run on a loop")
    if ctx.cancel.is_set():
        return TaskResult(False, "cancelled")
    return await runner(spec, ctx)


async def release_loop() -> None:
    """Close what task types keep on the running loop: the http task's kept-alive
    connections (the worker's task loop calls this before it stops)."""
    await http.targets_of(asyncio.get_running_loop()).close()

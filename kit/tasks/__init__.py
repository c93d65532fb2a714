"""What a run executes: `execute(spec, ctx)` dispatches on the spec's `type`.

A task never raises for a failure of its own (bad spec, refused address, non-zero
exit, timeout, cancel): it returns TaskResult(ok=False, error=...), which the worker
records and retries per the job's policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kit.tasks.basic import NOOP_OK, run_noop, run_sleep
from kit.tasks.command import run_command
from kit.tasks.context import RunContext, TaskResult
from kit.tasks.egress import AllowList, EgressRefused
from kit.tasks.http import run_http

Runner = Callable[[Mapping[str, Any], RunContext], TaskResult]
# Task types with no effect and no wait: they need no run context, no policy and no
# thread, so a worker runs them where it starts runs, many at a time.
INLINE: dict[str, Callable[[Mapping[str, Any]], TaskResult]] = {"noop": lambda spec: NOOP_OK}
RUNNERS: dict[str, Runner] = {
    "http": run_http,
    "command": run_command,
    "noop": run_noop,
    "sleep": run_sleep,
}


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


__all__ = [
    "INLINE",
    "RUNNERS",
    "AllowList",
    "EgressRefused",
    "RunContext",
    "TaskResult",
    "execute",
]

"""sleep: waits, then succeeds; a stand-in for a slow task in benchmarks and drills."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from kit.tasks.context import RunContext, TaskResult
from kit.tasks.spec import TaskSpec, TaskType


class SleepTask(TaskSpec):
    type: Literal["sleep"]
    seconds: float = Field(ge=0, le=86_400)


def run_sleep(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    seconds = spec.get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        return TaskResult(False, "task.seconds: must be a number >= 0")
    if ctx.cancel.wait(min(float(seconds), ctx.timeout_s)):
        return TaskResult(False, "cancelled")
    if seconds > ctx.timeout_s:
        return TaskResult(False, f"timed out after {ctx.timeout_s:g} s")
    return TaskResult(True, None, f"slept {seconds:g} s")


TASK = TaskType("sleep", SleepTask, run_sleep)

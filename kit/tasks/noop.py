"""noop: a task with no effect and no wait, for benchmarks and drills. It runs inline:
a worker starts a second's noop runs in one batch where it holds them, no thread each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from kit.tasks.context import RunContext, TaskResult
from kit.tasks.spec import TaskSpec, TaskType

NOOP_OK = TaskResult(True)


class NoopTask(TaskSpec):
    type: Literal["noop"]


def run_noop(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    return NOOP_OK


TASK = TaskType("noop", NoopTask, run_noop, inline=lambda spec: NOOP_OK)

"""What a run executes: `execute(spec, ctx)` dispatches on the spec's `type` to the
runner its task type declares (kit.tasks.registry lists the types).

A task never raises for a failure of its own (bad spec, refused address, non-zero
exit, timeout, cancel): it returns TaskResult(ok=False, error=...), which the worker
records and retries per the job's policy.
"""

from __future__ import annotations

from kit.tasks.context import RunContext, TaskResult
from kit.tasks.egress import AllowList, EgressRefused
from kit.tasks.registry import INLINE, RUNNERS, execute
from kit.tasks.spec import Runner, TaskSpec, TaskType

__all__ = [
    "INLINE",
    "RUNNERS",
    "AllowList",
    "EgressRefused",
    "RunContext",
    "Runner",
    "TaskResult",
    "TaskSpec",
    "TaskType",
    "execute",
]

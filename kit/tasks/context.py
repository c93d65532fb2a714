"""What a task is given and what it gives back.

The run id is the idempotency key: every task passes it on, so a duplicate delivery
or a retry of a run whose effect already happened can be recognised by the target.
`cancel` is set by the worker when the run is cancelled or its lease is lost; a task
stops soon after (a process group is killed, a request abandoned, a sleep cut short).
A task on an event loop cannot wait on a threading.Event, so the worker's flag is a
`Cancel`, which also calls back whoever asked (the loop then cancels the task at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kit.core.task_policy import CommandPermit


class Cancel(threading.Event):
    """A run's cancel flag that calls back on set, from the setting thread."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        with self._callbacks_lock:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the flag is set (now, if it is); returns how to take the
        callback back."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._callbacks_lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


@dataclass(frozen=True)
class RunContext:
    run_id: str
    attempt: int
    timeout_s: float
    cancel: threading.Event = field(default_factory=Cancel)
    # hosts/CIDRs the http task may reach though private: the operator's, for this tenant
    allow_hosts: str = ""
    tenant: str = ""
    # the commands this tenant may run (kit.core.task_policy); None: no command at all
    commands: CommandPermit | None = None
    # values to scrub from what the task reports (kit.core.redaction)
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskResult:
    ok: bool
    error: str | None = None
    detail: str | None = None


class Deadline:
    """The run's timeout as a monotonic deadline (tasks read the clock; core does not)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._at = time.monotonic() + timeout_s

    def remaining_s(self) -> float:
        return max(0.0, self._at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self._at


def stopped(ctx: RunContext, deadline: Deadline) -> TaskResult | None:
    """The failure to report if the run was cancelled or ran out of time, else None."""
    if ctx.cancel.is_set():
        return TaskResult(False, "cancelled")
    if deadline.passed():
        return TaskResult(False, f"timed out after {deadline.timeout_s:g} s")
    return None

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from kit.core.output import Output
from kit.core.task_policy import CommandPermit


class CancelFlag(Protocol):
    """What a task reads of its run's cancel flag (a threading.Event is one)."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


_CANCEL_LOCK = threading.Lock()  # one for every flag: setting and watching are rare and short


class Cancel:
    """A run's cancel flag that calls back on set (from the setting thread). Made for every
    run a worker claims, so it is light: no lock or event of its own until a task waits."""

    __slots__ = ("_callbacks", "_event", "_flag")

    def __init__(self) -> None:
        self._flag = False
        self._callbacks: list[Callable[[], None]] | None = None
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with _CANCEL_LOCK:
            if self._flag:
                return
            self._flag = True
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks or ():
            callback()

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        with _CANCEL_LOCK:
            if self._flag:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the flag is set (now, if it is); returns how to take the
        callback back."""
        with _CANCEL_LOCK:
            if not self._flag:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with _CANCEL_LOCK:
            if self._callbacks is not None and callback in self._callbacks:
                self._callbacks.remove(callback)


class Slot(Protocol):
    """One of the worker's places for a run on its task loop (at most `concurrency` held
    at once). A task takes it before its first network work (resolving, connecting,
    sending) and may give it back while it waits for something that costs no work (its
    turn for a target's connection); the worker frees it when the run ends."""

    async def take(self) -> None: ...

    def give_back(self) -> None: ...


@dataclass(frozen=True)
class RunContext:
    run_id: str
    attempt: int
    timeout_s: float
    cancel: CancelFlag = field(default_factory=Cancel)
    # hosts/CIDRs the http task may reach though private: the operator's, for this tenant
    allow_hosts: str = ""
    tenant: str = ""
    # the commands this tenant may run (kit.core.task_policy); None: no command at all
    commands: CommandPermit | None = None
    # values to scrub from what the task reports (kit.core.redaction)
    secrets: tuple[str, ...] = ()
    # An async task calls this right before its effect (the http request goes out): the
    # worker marks the run's start there, or refuses it (False: do nothing, return).
    # None: begin at once (callers that are not a worker's task loop).
    begin: Callable[[], Awaitable[bool]] | None = None
    # The run's place on the worker's task loop (None: no bound, outside a worker).
    slot: Slot | None = None


@dataclass(frozen=True)
class TaskResult:
    ok: bool
    error: str | None = None
    detail: str | None = None
    # what the attempt printed or was answered, bounded and scrubbed (kit.core.output)
    output: Output | None = None


class Deadline:
    """The run's timeout as a monotonic deadline (tasks read the clock; core does not)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._at = time.monotonic() + timeout_s

    def passed(self) -> bool:
        return time.monotonic() >= self._at


def stopped(ctx: RunContext, deadline: Deadline) -> TaskResult | None:
    """The failure to report if the run was cancelled or ran out of time, else None."""
    if ctx.cancel.is_set():
        return TaskResult(False, "cancelled")
    if deadline.passed():
        return TaskResult(False, f"timed out after {deadline.timeout_s:g} s")
    return None

"""The worker's task loop: one thread with an event loop on which every run of a task
type that declares an async runner (http) executes.

A thread per run, as before, made 5,000 webhooks due at one second into 5,000 threads
fighting for one interpreter lock: on this machine the fleet reached ~400 requests a
second. On a loop a waiting request costs a few objects, so the limit is the CPU of the
requests themselves. How many do network work at a time is the worker's to decide: with
fair shares a run is admitted first (`admit`: its coroutine is made once the fair queue
gives it a place, kit.worker.shares.FairSlots); the task then holds a `RunContext.slot`
for its lookup and connection, gives it back while it waits its turn for a target's
connection, and asks `RunContext.begin` right before its effect, so a run waiting for a
slow target's connection holds nobody else's place.

The loop never blocks on the database: what must be written when a run ends (a failure,
a run given back) is handed by the callbacks to the worker's writer threads, which no
thread-based task occupies (kit.worker.worker.LOOP_WRITERS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
E = TypeVar("E")
Outcome = tuple[bool, str | None]
# New tasks made per pass of the loop. A task made now takes its first step in the next
# pass, ahead of whatever an I/O event readies after it, so a whole due batch made at
# once puts every one of its first steps before any running task's next step (its
# connection made, its answer come). A few dozen per pass keep that next step within one
# short pass (tests/unit/test_task_loop.py) and still start thousands a second.
MAKE_PER_PASS = 64


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (it is a dependency of the API), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class TaskLoop(Generic[E]):
    """Runs entries on a loop thread: `await run(entry)`, then `done(entry, ok, error)`;
    `closing()` runs on the loop before it stops (closing kept-alive connections)."""

    def __init__(
        self,
        run: Callable[[E], Awaitable[Outcome]],
        done: Callable[[E, bool, str | None], None],
        closing: Callable[[], Awaitable[None]] | None = None,
        admit: Callable[[E, Callable[[], None]], None] | None = None,
    ) -> None:
        """`admit(entry, start)`, on the loop, calls `start()` when the entry may have its
        task (at once, or later); none: every entry gets its task at once."""
        self._run, self._done, self._closing = run, done, closing
        self._admit = admit
        self._to_make: deque[E] = deque()  # admitted, their tasks not yet made
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the task loop is not started"
        return self._loop

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="task-loop", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _serve(self) -> None:
        loop = self._loop = new_event_loop()
        asyncio.set_event_loop(loop)
        self._ready.set()
        try:
            loop.run_forever()
            loop.run_until_complete(self._wind_down())
        finally:
            loop.close()

    def submit(self, entries: Iterable[E]) -> None:
        """From any thread: run these, each as a task of its own, in this order."""
        batch = list(entries)
        if batch and self._loop is not None:
            self._loop.call_soon_threadsafe(self._take, batch)

    def call(self, fn: Callable[[], None]) -> None:
        """From any thread: run `fn` on the loop, after what was submitted before."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # closed: the worker is stopping
                self._loop.call_soon_threadsafe(fn)

    def _take(self, entries: list[E]) -> None:
        for entry in entries:
            if self._stopping:
                return
            if self._admit is None:
                self._create(entry)
            else:
                self._admit(entry, lambda e=entry: self._create(e))  # type: ignore[misc]

    def _create(self, entry: E) -> None:
        """Its task is made in this pass or a later one (`MAKE_PER_PASS`), in order."""
        if not self._to_make:
            self.loop.call_soon(self._make)
        self._to_make.append(entry)

    def _make(self) -> None:
        loop, batch = self.loop, self._to_make
        for _ in range(min(MAKE_PER_PASS, len(batch))):
            entry = batch.popleft()
            if self._stopping:
                continue  # the loop winds down: the worker gives the run back
            task = loop.create_task(self._one(entry))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if batch:
            loop.call_soon(self._make)  # after this pass's I/O: the running tasks' steps

    async def _one(self, entry: E) -> None:
        try:
            ok, error = await self._run(entry)
        except asyncio.CancelledError:
            if self._stopping:
                raise  # the worker is stopping: it gives the run back itself
            ok, error = False, "cancelled"
        except Exception as exc:  # a task bug is a failed attempt, not a dead worker
            log.exception("task on the loop raised")
            ok, error = False, f"{type(exc).__name__}: {exc}"
        self._done(entry, ok, error)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel what still runs (the worker has given those runs back), close the
        loop's connections, end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)

    async def _wind_down(self) -> None:
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._closing is not None:
            try:
                await self._closing()
            except Exception:
                log.exception("closing the task loop's connections failed")

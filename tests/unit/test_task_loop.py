"""The worker's task loop (kit.worker.task_loop): a flood of new runs does not stand
between a running task and its next step, and an entry is run once, in the order given."""

from __future__ import annotations

import threading

from kit.worker.task_loop import MAKE_PER_PASS, TaskLoop


def test_a_running_task_steps_on_before_a_flood_of_new_ones_has_all_started() -> None:
    """A task that awaits something that completes at once (a connection made) resumes
    within a pass or two of new tasks, not after the first step of every one submitted."""
    events: list[str] = []
    finished = threading.Event()
    flood = 20 * MAKE_PER_PASS

    async def run(entry: str) -> tuple[bool, str | None]:
        if entry == "waiter":
            import asyncio

            ready = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(ready.set_result, None)
            events.append("waiter awaits")
            await ready
            events.append("waiter resumed")
        else:
            events.append("new")
        return True, None

    def done(entry: str, ok: bool, error: str | None) -> None:
        if sum(e != "waiter awaits" for e in events) == flood + 1:
            finished.set()

    loop: TaskLoop[str] = TaskLoop(run, done)
    loop.start()
    try:
        loop.submit(["waiter", *(f"r{i}" for i in range(flood))])
        assert finished.wait(10), "not every entry ran"
    finally:
        loop.stop()
    assert events.count("new") == flood and events.count("waiter resumed") == 1
    new_before = events[: events.index("waiter resumed")].count("new")
    assert new_before <= 2 * MAKE_PER_PASS, new_before


def test_entries_are_admitted_in_order_and_each_run_once() -> None:
    ran: list[int] = []
    finished = threading.Event()
    total = 3 * MAKE_PER_PASS + 5
    admitted: list[int] = []

    async def run(entry: int) -> tuple[bool, str | None]:
        ran.append(entry)
        return True, None

    def done(entry: int, ok: bool, error: str | None) -> None:
        if len(ran) == total:
            finished.set()

    def admit(entry: int, start: object) -> None:
        admitted.append(entry)
        start()  # type: ignore[operator]

    loop: TaskLoop[int] = TaskLoop(run, done, admit=admit)
    loop.start()
    try:
        loop.submit(range(total))
        assert finished.wait(10)
    finally:
        loop.stop()
    assert admitted == list(range(total)) and ran == list(range(total))

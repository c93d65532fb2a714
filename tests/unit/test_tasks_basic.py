"""noop, sleep and the dispatch by type."""

from __future__ import annotations

import threading

from kit.tasks import RunContext, TaskResult, execute


def test_noop_succeeds() -> None:
    assert execute({"type": "noop"}, RunContext("r", 1, 1.0)) == TaskResult(True)


def test_sleep_succeeds() -> None:
    result = execute({"type": "sleep", "seconds": 0.05}, RunContext("r", 1, 5.0))
    assert result.ok and result.detail == "slept 0.05 s"


def test_sleep_is_cancellable() -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    result = execute({"type": "sleep", "seconds": 600}, RunContext("r", 1, 900.0, cancel))
    timer.join()
    assert result == TaskResult(False, "cancelled")


def test_sleep_longer_than_the_timeout_times_out() -> None:
    result = execute({"type": "sleep", "seconds": 60}, RunContext("r", 1, 0.2))
    assert result == TaskResult(False, "timed out after 0.2 s")


def test_already_cancelled_run_does_not_start() -> None:
    cancel = threading.Event()
    cancel.set()
    assert execute({"type": "noop"}, RunContext("r", 1, 1.0, cancel)).error == "cancelled"


def test_unknown_or_malformed_specs_are_error_results() -> None:
    ctx = RunContext("r", 1, 1.0)
    assert execute({"type": "ftp"}, ctx).error == (
        "task.type: must be one of http, command, noop, sleep"
    )
    assert not execute({}, ctx).ok
    assert execute(["noop"], ctx).error == "task: must be a JSON object"  # type: ignore[arg-type]
    assert execute({"type": "sleep", "seconds": "5"}, ctx).error == (
        "task.seconds: must be a number >= 0"
    )
    assert not execute({"type": "http", "url": "ftp://x/", "method": "GET"}, ctx).ok
    assert not execute({"type": "http", "url": "http://8.8.8.8/", "method": "TRACE"}, ctx).ok

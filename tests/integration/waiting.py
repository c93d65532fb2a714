"""Waiting in the integration tests: on a condition with a deadline, never for a fixed
time. A test that needs time to pass for a clock-based decision passes the store an
explicit `now` instead (tests/integration/test_clock_edges.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine, text

T = TypeVar("T")
WAIT_S = 30.0


def wait_until(
    what: str,
    check: Callable[[], T],
    timeout_s: float = WAIT_S,
    detail: Callable[[], str] = lambda: "",
    poll_s: float = 0.05,
) -> T:
    """The first truthy value of `check()`, polled every `poll_s`; past `timeout_s`, an
    AssertionError naming `what` was waited for (and `detail()`, what there was instead)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            extra = detail()
            raise AssertionError(
                f"timed out after {timeout_s:.0f} s waiting for {what}"
                + (f"\n{extra}" if extra else "")
            )
        time.sleep(poll_s)  # the poll interval: what is waited for is the condition


def db_clock_past(engine: Engine, instant: object) -> bool:
    """Whether the database's clock (the one the decisions read) is past `instant`."""
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT now() > :t"), {"t": instant}).scalar_one())

"""How much a worker takes on: no more than it can start within half its lease.

A worker claims runs as they arrive (up to its prefetch, ahead of their second) and holds
them until a slot is free. When it claims more than it can start, the runs it holds wait
long past their second while another worker might be idle, and their leases must be kept
alive meanwhile; at worst a lease lapses, the reaper hands the run out again and it runs
twice. So a worker takes on only runs it can start within half its lease, at the rate it
has shown it starts runs that need a slot (http, command; not inline ones, which start at
once), and leaves the rest in the queue for others.

Until it has measured itself, a worker assumes a run holds its slot for a second: a cold
worker with 1,024 slots and a 30 s lease holds at most ~15,000 such runs, which leaves a
top-of-hour burst of webhooks alone and stops a cold worker from taking 10,000 commands it
would start over minutes. The rate is measured only over seconds in which runs waited for
a slot (an idle worker's start rate says how much work came, not how much it can do).

Time is passed in, in milliseconds; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

ASSUMED_SLOT_S = 1.0  # how long a run holds its slot, until the worker has measured it
RATE_WINDOW_MS = 1_000  # starts are counted over windows of this length
RATE_WEIGHT = 0.3  # weight of the newest window in the moving average


def start_budget(
    concurrency: int, lease_ttl_ms: int, starts_per_s: float | None, horizon: float = 0.5
) -> int:
    """How many runs needing a slot a worker may hold unstarted: what it starts within
    `horizon` of its lease (its measured rate, or its slots turned over once a second
    while unmeasured), and never fewer than it has slots."""
    rate = concurrency / ASSUMED_SLOT_S if starts_per_s is None else starts_per_s
    return max(concurrency, int(rate * lease_ttl_ms * horizon / 1000))


def claim_room(waiting: int, budget: int) -> int:
    """How many more runs to claim now: the budget less what waits already. The queue does
    not say a run's task type, so a worker at its budget claims nothing, inline runs too:
    they are left for a worker with room."""
    return max(0, budget - waiting)


@dataclass
class StartRate:
    """Runs started per second, a moving average over windows in which runs waited for a
    slot the whole time (the worker was at capacity): `per_s` is None until one was seen."""

    per_s: float | None = None
    _window_start_ms: int | None = None
    _starts_at_window_start: int = 0
    _saturated: bool = True

    def observe(self, now_ms: int, starts: int, waiting: bool) -> None:
        """`starts`: runs started so far (a running count); `waiting`: whether runs wait
        for a slot now."""
        if self._window_start_ms is None:
            self._window_start_ms, self._starts_at_window_start = now_ms, starts
            self._saturated = waiting
            return
        self._saturated = self._saturated and waiting
        elapsed = now_ms - self._window_start_ms
        if elapsed < RATE_WINDOW_MS:
            return
        if self._saturated:
            rate = (starts - self._starts_at_window_start) * 1000 / elapsed
            self.per_s = (
                rate if self.per_s is None else RATE_WEIGHT * rate + (1 - RATE_WEIGHT) * self.per_s
            )
        self._window_start_ms, self._starts_at_window_start = now_ms, starts
        self._saturated = waiting

"""Runs a scheduler node committed and the broker did not confirm, kept to send again.

A broker that is down for 40 s at 500 runs a second leaves 20,000 committed runs with no
message. The reaper finds such runs only once the workers' group has provably read past
where their messages would be (kit.core.recovery), one tier after another: in a soak it
released them in waves 14-18 s apart after the broker came back. The node that committed
them knows them already: it keeps them and sends them again as soon as the broker
answers, at a capped, doubling pace while it does not. Past `limit` runs the newest are
left to the reaper, which stays the recovery for a node that dies with runs unsent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

RETRY_FIRST_MS = 250  # the first try again after a failed publish
RETRY_CAP_MS = 4_000  # at most this long between tries while the broker stays away
UNSENT_LIMIT = 200_000  # runs kept in memory; past it, the reaper's


class Unsent(Generic[T]):
    """The node's runs to send again, and when. Time is passed in (epoch ms)."""

    def __init__(
        self,
        limit: int = UNSENT_LIMIT,
        first_ms: int = RETRY_FIRST_MS,
        cap_ms: int = RETRY_CAP_MS,
    ) -> None:
        if limit < 0:
            raise ValueError("limit must not be negative")
        if not 0 < first_ms <= cap_ms:
            raise ValueError("need 0 < first_ms <= cap_ms")
        self.limit = limit
        self.first_ms = first_ms
        self.cap_ms = cap_ms
        self._runs: list[T] = []
        self._failures = 0  # publishes failed in a row
        self._retry_at_ms: int | None = None

    def __len__(self) -> int:
        return len(self._runs)

    def failed(self, runs: Sequence[T], now_ms: int) -> list[T]:
        """A publish did not confirm `runs`: keep them and wait longer before the next
        try. Returns the runs past the limit, which are left to the reaper."""
        self._failures += 1
        room = max(0, self.limit - len(self._runs))
        self._runs.extend(runs[:room])
        delay = min(self.cap_ms, self.first_ms << min(self._failures - 1, 30))
        self._retry_at_ms = now_ms + delay
        return list(runs[room:])

    def sent(self) -> None:
        """A publish went through: the broker answers, so the kept runs go at once."""
        self._failures = 0
        if self._runs:
            self._retry_at_ms = None

    def due(self, now_ms: int) -> list[T]:
        """The kept runs, when it is time to try them again (all of them: the caller
        orders them); none before."""
        if not self._runs or self.wait_ms(now_ms) > 0:
            return []
        runs, self._runs = self._runs, []
        return runs

    def wait_ms(self, now_ms: int) -> int:
        """How long until the kept runs are due (0: now); -1 when none are kept."""
        if not self._runs:
            return -1
        if self._retry_at_ms is None:
            return 0
        return max(0, self._retry_at_ms - now_ms)

    def take_all(self) -> list[T]:
        """Every kept run, due or not: a node stopping tries them one last time."""
        runs, self._runs = self._runs, []
        return runs

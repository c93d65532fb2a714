"""When a node scans, and in which order due runs are held and started.

A scheduler node scans `SCAN_AHEAD_MS` ahead (`scan_window`, `next_scan_at_ms`) and
publishes the runs as soon as the scan commits; a worker claims them ahead and holds
them in a `TimerWheel` until their second. After an outage, a catch-up backlog is
worked by priority first, then by age (`catch_up_order`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import Generic, TypeVar

from kit.core.defaults import SCAN_AHEAD_MS, SCAN_PERIOD_MS
from kit.core.errors import FieldError

T = TypeVar("T")


class PriorityTier(StrEnum):
    """A job's priority tier, most urgent first (the order is the rank): one Kafka topic
    each, preferred in this order by the workers and the catch-up."""

    critical = "critical"
    high = "high"
    normal = "normal"
    low = "low"


PRIORITY_TIERS: tuple[str, ...] = tuple(t.value for t in PriorityTier)
_RANK = {name: i for i, name in enumerate(PRIORITY_TIERS)}
DEFAULT_TIER: str = PriorityTier.normal.value


def tier_rank(name: str) -> int:
    """0 for the most urgent tier; FieldError for an unknown name."""
    try:
        return _RANK[name]
    except (KeyError, TypeError):
        raise FieldError("priority", f"must be one of {', '.join(PRIORITY_TIERS)}") from None


def scan_window(now_ms: int, scan_ahead_ms: int = SCAN_AHEAD_MS) -> tuple[int, int]:
    """The scan reads triggers with fire_at <= hi; those with fire_at < lo (= now) are
    already late and go through the misfire policy."""
    if scan_ahead_ms < 0:
        raise FieldError("scan_ahead_ms", "must not be negative")
    return now_ms, now_ms + scan_ahead_ms


def next_scan_at_ms(now_ms: int, scan_period_ms: int = SCAN_PERIOD_MS) -> int:
    """When a node scans next: the next whole multiple of the period after now (the next
    whole second by default), so scans fall on fire seconds' boundaries and a run due at
    second T is first reached by the scan at T - scan-ahead, not up to a period later."""
    if scan_period_ms <= 0:
        raise FieldError("scan_period_ms", "must be positive")
    return (now_ms // scan_period_ms + 1) * scan_period_ms


def rescan_at_once(batch_full: bool, triggers_taken: int) -> bool:
    """Whether a node scans again at once rather than at the next second: only when the
    scan hit its batch limit (more may be due) and took something (deleted triggers, so
    the next scan reads further). A full scan that took nothing would read the same rows
    again and take nothing again: a busy loop until the next second changes the answer.
    """
    return batch_full and triggers_taken > 0


class TimerWheel(Generic[T]):
    """Items held until due, popped in (due_ms, tier rank, insertion) order.

    A binary heap rather than a hashed wheel: pop order is exact and deterministic,
    and O(log n) per item is fast enough for the peak (50,000 items/s). Pure: no
    threads, no clock; the caller says what time it is.
    """

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, T]] = []
        self._seq = 0

    def add(self, due_ms: int, item: T, priority: str | int = DEFAULT_TIER) -> None:
        """Hold `item` until `due_ms`; `priority` is a tier name or its rank."""
        rank = priority if isinstance(priority, int) else tier_rank(priority)
        self._seq += 1
        heapq.heappush(self._heap, (due_ms, rank, self._seq, item))

    def pop_due(self, now_ms: int) -> list[T]:
        """Every item with due_ms <= now_ms, in order."""
        heap = self._heap
        out: list[T] = []
        pop = heapq.heappop
        while heap and heap[0][0] <= now_ms:
            out.append(pop(heap)[3])
        return out

    def next_due_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)


def tier_to_serve(heads: Sequence[int | None], now_ms: int | None) -> int | None:
    """Which tier a worker reads next (its index in rank order), given the due time in
    ms of each tier's next message: None when the tier has none, 0 when it has some not
    yet fetched (they may be due now). The tier whose next run is due soonest, every run
    already due counting as due now, the higher tier within one second; None when no
    tier has anything. With `now_ms` None, strict rank order.

    Why by due time and not strictly by rank: the scheduler publishes runs up to its
    scan-ahead before their second, so a steady higher tier is never drained, and a
    worker whose claim budget is full of its runs due in a few seconds never read a
    lower tier's runs due now (a 45-minute soak at 500 runs/s: the low tier 42,000 runs
    behind while every higher tier kept up). A backlog of runs already due is still
    served highest tier first."""
    best: tuple[int, int] | None = None
    pick: int | None = None
    for rank, due in enumerate(heads):
        if due is None:
            continue
        key = (0 if now_ms is None else max(due, now_ms) // 1000, rank)
        if best is None or key < best:
            best, pick = key, rank
    return pick


def catch_up_order(
    items: Iterable[T], priority_of: Callable[[T], str], due_of: Callable[[T], int]
) -> list[T]:
    """A backlog in working order: highest priority first, then oldest; stable."""
    return sorted(items, key=lambda x: (tier_rank(priority_of(x)), due_of(x)))

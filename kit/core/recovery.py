"""When a run message that nobody claimed must have been lost.

A scheduler marks a run dispatched only after Kafka confirmed its message, and a worker
commits its offsets only after its claim committed. So if the workers' consumer group has
committed past every message that was on a tier's topic at some instant, every run of
that tier marked dispatched before that instant was either claimed or its message is gone
(a deleted topic, expired retention, an unreplicated partition lost): the reaper publishes
it again. While the group lags, nothing is re-published, so a backlog is never doubled.

The reaper takes a `QueueSample` each pass (the database's time first, then every
partition's high watermark); `caught_up_at` finds the newest sample the group has passed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class QueueSample:
    """High watermarks of one topic's partitions, read after `taken_at_ms` (database
    time): every message confirmed before that instant lies below them."""

    taken_at_ms: int
    high: Mapping[int, int]  # partition -> high watermark (next offset to be written)


def caught_up_at(samples: Sequence[QueueSample], committed: Mapping[int, int]) -> int | None:
    """The taken_at_ms of the newest sample whose every partition the group has committed
    up to its watermark, or None. A partition with no commit counts as 0 (nothing read);
    one missing from a sample's watermarks was empty then."""
    best: int | None = None
    for sample in samples:
        if best is not None and sample.taken_at_ms <= best:
            continue
        if all(committed.get(p, 0) >= high for p, high in sample.high.items()):
            best = sample.taken_at_ms
    return best

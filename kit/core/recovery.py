"""When a run that nobody claimed must have lost its message.

A scheduler publishes a run's message right after the run commits (it waits for the
broker's acknowledgement), and a worker commits its offsets only after its claim
committed. So if the workers' consumer group has committed past every message that was
on a tier's topic at some instant, every run of that tier whose message was published
before that instant was claimed, or its message is gone: never sent (its node died
between commit and publish), or lost (a deleted topic, expired retention, an
unreplicated partition). The reaper publishes it again. While the group lags, nothing is
re-published, so a backlog is never doubled.

The reaper takes a `QueueSample` each pass (the database's time first, then every
partition's high watermark); `caught_up_at` finds the newest sample the group has passed,
and `unclaimed_cutoff` how old an unclaimed run must be to count as lost.
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


def unclaimed_cutoff(caught_up_ms: int, publish_grace_ms: int) -> int:
    """Runs published (or due to be: committed, or re-armed) before this instant and still
    unclaimed have lost their message. The grace covers the time between a run's commit
    and its publish; a node slower than that only causes a duplicate message, which
    claims nothing."""
    return caught_up_ms - publish_grace_ms


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

"""How long a job's runs take, and the run lease that follows from it.

A fixed run lease is wrong both ways: too short and a slow run's lease has to be
renewed all the time (and one missed renewal too many hands it to a second worker), too
long and a dead worker's quick run waits for it. So each job's runs are measured (the
first attempts that succeeded, their start to their finish, over the job's most recent
`RECENT` of them) and its runs are leased for half as long again as their p99: a run that
takes its p99 ends well before the fence (a quarter of the lease at most), without a
renewal, and a dead worker's run is recovered one p99 and one beat (a third of the
lease) after it began. Always within the operator's bounds, and the fleet's default
lease until `MIN_SAMPLES` runs were measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RECENT = 100  # the attempts a job's durations are taken over
MIN_SAMPLES = 5  # fewer measured: the fleet's default lease
REMEASURE_MS = 300_000  # a job measured with MIN_SAMPLES is measured again at most this often


@dataclass(frozen=True)
class LeaseBounds:
    """The operator's bounds on a sized run lease (ms)."""

    min_ms: int
    max_ms: int

    def __post_init__(self) -> None:
        if not 0 < self.min_ms <= self.max_ms:
            raise ValueError("lease bounds: need 0 < min_ms <= max_ms")

    def clamp(self, ms: int) -> int:
        return min(self.max_ms, max(self.min_ms, ms))


@dataclass(frozen=True)
class Durations:
    p50_ms: int
    p99_ms: int
    samples: int


def quantile(values_ms: Sequence[int], q: float) -> int:
    """The nearest-rank quantile `q` (0 < q <= 1) of `values_ms` (not empty)."""
    if not values_ms:
        raise ValueError("quantile of nothing")
    ordered = sorted(values_ms)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def durations_of(values_ms: Sequence[int]) -> Durations | None:
    """p50 and p99 of the durations measured, or None when there are none."""
    if not values_ms:
        return None
    return Durations(quantile(values_ms, 0.5), quantile(values_ms, 0.99), len(values_ms))


def sized_lease_ms(durations: Durations | None, bounds: LeaseBounds) -> int | None:
    """The run lease for a job whose runs took `durations`: 1.5 x p99 within `bounds`;
    None (the fleet's default) while fewer than MIN_SAMPLES were measured."""
    if durations is None or durations.samples < MIN_SAMPLES:
        return None
    return bounds.clamp(math.ceil(durations.p99_ms * 3 / 2))


def remeasure_due(
    measured_at_ms: int | None, samples: int, now_ms: int, every_ms: int = REMEASURE_MS
) -> bool:
    """Whether a job whose runs succeeded should be measured again now. A measure reads up
    to RECENT of the job's runs: done at every refresh, a job run every 10 s cost ten rows
    read per run, and a 500 runs/s soak's measures became its database's largest load
    (1.9 s for a batch of 2,000 jobs, each worker every 10 s). A p99 over RECENT runs
    moves little in minutes; until MIN_SAMPLES are measured the job has the default
    lease, so it is measured at every refresh until then."""
    if measured_at_ms is None or samples < MIN_SAMPLES:
        return True
    return now_ms - measured_at_ms >= every_ms

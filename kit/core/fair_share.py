"""Which waiting run a worker starts when a slot frees: fair shares between tenants.

Runs that are due and wait for a slot queue here, one queue per tenant. A freed slot
goes, in this order of rules:
- to the most urgent priority tier with a startable run (tiers strictly ordered, as the
  topics are consumed);
- within it, to a paid tenant before a free one (kit.core.tenancy.TenantClass);
- within a class, by weighted fair share: start-time fair queuing (Goyal et al., SFQ).

Why SFQ rather than deficit round robin: each start costs one unit (a run's duration is
not known when it starts), so both give the same long-run shares, but SFQ interleaves
tenants start by start where DRR hands each a quantum in a row; weights are any positive
number (DRR wants whole quanta); and a tenant that comes back after a pause gets no
credit for the time it was idle (its start tag is lifted to the lane's virtual time),
so a trickle cannot bank a burst. The bound it keeps: over any stretch in which tenants i
and j are both waiting and startable, |starts_i / w_i - starts_j / w_j| <= 1/w_i + 1/w_j
(tests/property/test_fair_share.py).

Work-conserving: a tenant at its limit is skipped (its runs wait, `blocked` counts them)
and a tenant with nothing waiting takes no turn, so a freed slot always goes to some run
that may start, if there is one.

`TenantGate` is each tenant's part of the limits on this worker: the fleet-wide
`max_running` and `max_starts_per_s` divided among the live workers (`worker_part`).

Pure: no clock (times are passed in, in milliseconds), no threads, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

LIMIT_RUNNING = "max_running"  # the reasons a run waits at a limit (metrics, explain)
LIMIT_RATE = "max_starts_per_s"


@dataclass
class _Tenant(Generic[T]):
    runs: deque[T] = field(default_factory=deque)
    weight: float = 1.0
    start: float = 0.0  # SFQ start tag of its next run: the finish tag of its last


@dataclass
class _Lane(Generic[T]):
    """One (tier, class): its virtual time and the tenants with runs waiting."""

    vtime: float = 0.0
    tenants: dict[str, _Tenant[T]] = field(default_factory=dict)  # insertion: arrival order
    idle: dict[str, float] = field(default_factory=dict)  # finish tags of emptied tenants


class FairQueue(Generic[T]):
    """Due runs waiting for a slot, started by tier, then class, then weighted share."""

    def __init__(self) -> None:
        self._lanes: dict[tuple[int, int], _Lane[T]] = {}
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def push(self, item: T, tenant: str, tier: int, weight: float, paid: bool) -> None:
        """`tier`: the tier's rank (0 most urgent); `weight` > 0: the tenant's weight now
        (a changed weight applies from its next run)."""
        if not weight > 0:
            raise ValueError("weight must be greater than 0")
        key = (tier, 0 if paid else 1)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        entry = lane.tenants.get(tenant)
        if entry is None:
            finish = lane.idle.pop(tenant, 0.0)
            entry = lane.tenants[tenant] = _Tenant(start=max(lane.vtime, finish))
        entry.weight = weight
        entry.runs.append(item)
        self._len += 1

    def pop(self, startable: Callable[[str], bool] = lambda _t: True) -> T | None:
        """The run the next free slot starts, or None if no run waiting may start
        (`startable(tenant)` False: the tenant is at a limit; asked once per tenant)."""
        for key in sorted(self._lanes):
            lane = self._lanes[key]
            best: tuple[float, str] | None = None
            for name, entry in lane.tenants.items():
                tag = max(entry.start, lane.vtime)  # a tenant held at a limit banks nothing
                if (best is None or tag < best[0]) and startable(name):
                    best = (tag, name)
            if best is None:
                continue
            tag, name = best
            entry = lane.tenants[name]
            item = entry.runs.popleft()
            self._len -= 1
            lane.vtime = tag
            entry.start = tag + 1.0 / entry.weight
            if not entry.runs:
                del lane.tenants[name]
                lane.idle[name] = entry.start
                if len(lane.idle) > _IDLE_KEPT:  # older ones are behind vtime by now
                    self._forget(lane)
            if not lane.tenants and not lane.idle:
                del self._lanes[key]
            return item
        return None

    def drain(self) -> Iterator[T]:
        """Every run waiting (a stopping worker gives them back), emptying the queue."""
        lanes, self._lanes, self._len = self._lanes, {}, 0
        for lane in lanes.values():
            for entry in lane.tenants.values():
                yield from entry.runs

    def waiting(self) -> dict[tuple[int, str], int]:
        """Runs waiting by (tier, tenant)."""
        out: dict[tuple[int, str], int] = {}
        for (tier, _cls), lane in self._lanes.items():
            for name, entry in lane.tenants.items():
                out[tier, name] = out.get((tier, name), 0) + len(entry.runs)
        return out

    def tenants(self) -> set[str]:
        return {name for lane in self._lanes.values() for name in lane.tenants}

    @staticmethod
    def _forget(lane: _Lane[T]) -> None:
        lane.idle = {n: f for n, f in lane.idle.items() if f > lane.vtime}


def fair_order(
    items: Sequence[T],
    tenant_of: Callable[[T], str],
    tier_of: Callable[[T], int],
    weight_of: Callable[[str], float],
    paid_of: Callable[[str], bool],
) -> list[T]:
    """A batch of runs due together, in the order a fresh `FairQueue` would start them
    if all waited at once: tier, then paid before free, then each tenant's k-th run at
    k / weight (ties to the tenant that came first). The worker's task loop takes places in the
    order its tasks reach their first step, so a batch handed over in arrival order lets
    10,000 runs of a burst ask before the 100 of a trickle behind them; in this order the
    trickle asks among the first. O(n log n), where popping a queue costs a pass over its
    tenants per run."""
    # per (lane, tenant): runs so far, and where the tenant first came (ties of equal
    # tags go to the tenant that came first, as the queue's do)
    # tags summed as the queue sums them (its tag plus 1 / weight per start), so that
    # rounding breaks no tie differently
    seen: dict[tuple[int, int, str], tuple[float, int]] = {}
    keyed: list[tuple[int, int, float, int, int]] = []
    for index, item in enumerate(items):
        tenant = tenant_of(item)
        lane = (tier_of(item), 0 if paid_of(tenant) else 1, tenant)
        tag, first = seen.get(lane, (0.0, index))
        seen[lane] = (tag + 1.0 / weight_of(tenant), first)
        keyed.append((lane[0], lane[1], tag, first, index))
    if len({lane[2] for lane in seen}) < 2:
        return list(items)
    return [items[key[4]] for key in sorted(keyed)]


_IDLE_KEPT = 1024  # emptied tenants' finish tags kept per lane before the stale are dropped


def worker_part(limit: int | None, live_workers: int) -> int | None:
    """This worker's part of a fleet-wide count limit: divided among the live workers,
    rounded up, at least 1 (a fleet of more workers than the limit may run a little over
    it, never starve a tenant); 0 stays 0 (a real limit: nothing)."""
    if limit is None:
        return None
    if limit == 0:
        return 0
    return max(1, math.ceil(limit / max(1, live_workers)))


def worker_rate(rate_per_s: float | None, live_workers: int) -> float | None:
    """This worker's part of a fleet-wide start rate."""
    return None if rate_per_s is None else rate_per_s / max(1, live_workers)


@dataclass
class _Bucket:
    tokens: float
    at_ms: int


class TenantGate:
    """Each tenant's runs running on this worker and its start rate here: whether one
    more may start now, and if not, which limit holds it."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    def refusal(
        self, tenant: str, max_running: int | None, starts_per_s: float | None, now_ms: int
    ) -> str | None:
        """Why the tenant's next run may not start now (LIMIT_RUNNING, LIMIT_RATE), or None.
        The rate is a token bucket holding one second's starts (at least one)."""
        if max_running is not None and self.running.get(tenant, 0) >= max_running:
            return LIMIT_RUNNING
        if starts_per_s is not None and self._tokens(tenant, starts_per_s, now_ms) < 1.0:
            return LIMIT_RATE
        return None

    def started(self, tenant: str, starts_per_s: float | None, now_ms: int) -> None:
        self.running[tenant] = self.running.get(tenant, 0) + 1
        if starts_per_s is not None:
            self._tokens(tenant, starts_per_s, now_ms)
            self._buckets[tenant].tokens -= 1.0

    def finished(self, tenant: str) -> None:
        left = self.running.get(tenant, 0) - 1
        if left > 0:
            self.running[tenant] = left
        else:
            self.running.pop(tenant, None)

    def _tokens(self, tenant: str, rate: float, now_ms: int) -> float:
        size = max(1.0, rate)
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(size, now_ms)
        elapsed = max(0, now_ms - bucket.at_ms)
        bucket.tokens = min(size, bucket.tokens + elapsed * rate / 1000)
        bucket.at_ms = max(bucket.at_ms, now_ms)
        return bucket.tokens


# How many times a run may be sent round its topic (sent back, or read past) before a
# worker keeps it whatever its tenant holds. Without a bound a tenant alone in a backlog
# sent back runs behind which waited only its own, and the send-backs kept the topic
# behind: runs went round a dozen times and started 20 minutes late (the worker-cut
# drill, docs/chaos.md). Two laps still let a worker read past a backlog to another
# tenant's runs (tests/integration/test_worker_fair_share.py).
MAX_LAPS = 2


def goes_round(laps: int) -> bool:
    """Whether a run over its tenant's share, sent round `laps` times already, may be sent
    round again (else it is held like a run within the share)."""
    return laps < MAX_LAPS


def holds(backlog: int, share: int, laps: int) -> bool:
    """Whether a worker holds a tenant's run (claims it, or keeps it claimed) rather than
    send it round its topic: the tenant's backlog there (its runs past their second
    waiting for a slot) is under its share, or the run has gone round MAX_LAPS times."""
    return backlog < share or not goes_round(laps)


def held_share(budget: int, weight: float, others: list[float]) -> int:
    """How many runs needing a slot one tenant may have waiting past their second (its
    backlog) on a worker whose start budget (kit.core.backlog.start_budget) is `budget`:
    its weight's part of the budget among the tenants with a backlog there (`others`:
    their weights) and one more of weight 1, standing for the tenants whose runs are
    still behind in the stream. So one tenant alone takes half, never all: the rest is
    room to read past it. Runs claimed ahead of their second do not count: at a steady
    rate they are the pipeline, and counting them sent half of a lone tenant's runs
    round its topic whenever the scan-ahead held more than half the budget."""
    total = weight + sum(others) + 1.0
    return max(1, int(budget * weight / total))

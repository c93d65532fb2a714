"""The worker's side of fair shares (kit.core.fair_share): the tenants' queues for the
pool's threads and the task loop's places, their limits on this worker, and what
/metrics shows of them.

A slot that frees starts the run the fair queue picks, not the longest waiting one: the
pool is handed one turn per run due, and a turn, when a thread takes it, starts whatever
the queue picks then (`Shares.pop`); the task loop's places are `FairSlots`, whose
waiters are woken in the queue's order. A turn or a place that finds no run it may start
(every tenant waiting is at a limit) is owed and paid when a run ends or, for a start
rate, a little later (`RETRY_S`).

The policy is read when a decision is made (`tenants()`), so an edited file applies to
the next start. Tenant labels on /metrics are bounded: the tenants the policy names,
then the first `MAX_TENANT_LABELS` others seen; any later one is counted as `_other`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kit.core.dispatch import tier_rank
from kit.core.fair_share import FairQueue, TenantGate, worker_part, worker_rate
from kit.core.tenancy import TenantClass, TenantsPolicy

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_TENANT_LABELS = 32  # tenants not named in the policy given a label of their own
OTHER = "_other"
RETRY_S = 0.05  # how soon a run held only by a start rate is looked at again
# the start lag's buckets, fleet-wide and per tenant (seconds)
START_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)


class TenantMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.started = Counter(
            "cronfleet_worker_tenant_started",
            "Runs started on this worker, by tenant",
            ["tenant"],
            registry=r,
        )
        self.waiting = Gauge(
            "cronfleet_worker_tenant_waiting",
            "Due runs waiting for a slot, by tenant and reason: `share` (others' turn), "
            "`max_running` or `max_starts_per_s` (the tenant's limit on this worker)",
            ["tenant", "reason"],
            registry=r,
        )
        self.limited = Counter(
            "cronfleet_worker_tenant_limited",
            "Times a free slot passed over a tenant's waiting runs for its limit",
            ["tenant", "reason"],
            registry=r,
        )
        self.preempted = Counter(
            "cronfleet_tenant_preempted",
            "Runs of this tenant stopped on this worker to give their slot to a paid "
            "tenant's run, given back at the same attempt (kit.core.preemption)",
            ["tenant"],
            registry=r,
        )
        self.start_lag = Histogram(
            "cronfleet_worker_tenant_start_lag_seconds",
            "Scheduled time to start, first attempts (database clock), by tenant",
            ["tenant"],
            buckets=START_LAG_BUCKETS,
            registry=r,
        )
        self.sent_back = Counter(
            "cronfleet_worker_tenant_sent_back",
            "Runs put back at the tail of their topic: the tenant held more than its share "
            "of what this worker can start (read past, not claimed)",
            ["tenant"],
            registry=r,
        )


class Shares:
    """The tenants' share of this worker: thread-safe (one lock, held briefly)."""

    def __init__(
        self,
        tenants: Callable[[], TenantsPolicy],
        live_workers: Callable[[], int],
        metrics: TenantMetrics,
    ) -> None:
        self._tenants = tenants
        self._live_workers = live_workers
        self.metrics = metrics
        self.lock = threading.Lock()
        self.gate = TenantGate()
        self._labels: dict[str, str] = {}
        self._seen: set[str] = set()  # gauges set last time (cleared when they empty)

    def policy(self) -> TenantsPolicy:
        return self._tenants()

    def label(self, tenant: str, policy: TenantsPolicy | None = None) -> str:
        label = self._labels.get(tenant)
        if label is None:
            named = tenant in (policy or self.policy()).tenants
            label = tenant if named or len(self._labels) < MAX_TENANT_LABELS else OTHER
            if len(self._labels) < 10 * MAX_TENANT_LABELS:
                self._labels[tenant] = label
        return label

    def push(
        self, queue: FairQueue[T], item: T, tenant: str, tier: str, policy: TenantsPolicy
    ) -> None:
        limits = policy.for_tenant(tenant)
        paid = limits.tenant_class is TenantClass.paid
        with self.lock:
            queue.push(item, tenant, tier_rank(tier), limits.weight, paid)

    def _refusal(self, tenant: str, policy: TenantsPolicy, now_ms: int) -> str | None:
        limits = policy.for_tenant(tenant)
        if limits.max_running is None and limits.max_starts_per_s is None:
            return None
        live = self._live_workers()
        return self.gate.refusal(
            tenant,
            worker_part(limits.max_running, live),
            worker_rate(limits.max_starts_per_s, live),
            now_ms,
        )

    def pop(
        self, queue: FairQueue[T], tenant_of: Callable[[T], str], charge: bool = True
    ) -> T | None:
        """The next run to start, counted as started (its tenant's running and start
        rate), or None if no run waiting may start now."""
        policy = self.policy()
        now_ms = int(time.monotonic() * 1000)
        refused: dict[str, str | None] = {}

        def startable(tenant: str) -> bool:
            if tenant not in refused:
                refused[tenant] = self._refusal(tenant, policy, now_ms)
                if refused[tenant] is not None:
                    self.metrics.limited.labels(self.label(tenant, policy), refused[tenant]).inc()
            return refused[tenant] is None

        with self.lock:
            item = queue.pop(startable)
            if item is not None:
                self._started(tenant_of(item), policy, now_ms, charge)
        return item

    def try_start(self, tenant: str, charge: bool = True) -> bool:
        """Count a run started at once (nothing waits before it) if its limits allow."""
        policy = self.policy()
        now_ms = int(time.monotonic() * 1000)
        with self.lock:
            why = self._refusal(tenant, policy, now_ms)
            if why is None:
                self._started(tenant, policy, now_ms, charge)
        if why is not None:
            self.metrics.limited.labels(self.label(tenant, policy), why).inc()
        return why is None

    def _started(self, tenant: str, policy: TenantsPolicy, now_ms: int, charge: bool) -> None:
        rate = policy.for_tenant(tenant).max_starts_per_s
        live = self._live_workers()
        self.gate.started(tenant, worker_rate(rate, live) if charge else None, now_ms)

    def finished(self, tenant: str) -> None:
        with self.lock:
            self.gate.finished(tenant)

    def waiting_startable(self, queue: FairQueue[T]) -> list[tuple[str, str, int]]:
        """(tenant, tier rank, runs) waiting in `queue` whose tenant may start a run now
        (one at a limit could not take a freed slot)."""
        policy = self.policy()
        now_ms = int(time.monotonic() * 1000)
        with self.lock:
            return [
                (tenant, tier, n)
                for (tier, tenant), n in queue.waiting().items()
                if self._refusal(tenant, policy, now_ms) is None
            ]

    def show_waiting(self, queues: list[FairQueue[T]]) -> None:
        """Set the waiting gauges from the queues now (called about once a second)."""
        policy = self.policy()
        now_ms = int(time.monotonic() * 1000)
        counts: dict[tuple[str, str], float] = {}
        with self.lock:
            for queue in queues:
                for (_tier, tenant), n in queue.waiting().items():
                    reason = self._refusal(tenant, policy, now_ms) or "share"
                    key = (self.label(tenant, policy), reason)
                    counts[key] = counts.get(key, 0) + n
        for key in self._seen - set(counts):
            self.metrics.waiting.labels(*key).set(0)
        for key, n in counts.items():
            self.metrics.waiting.labels(*key).set(n)
        self._seen = set(counts)


class _Admission:
    """A run waiting for its first place before it has a coroutine: handed the place, it
    is started (`start`); it stands in the queue where an awaiting task's future would."""

    __slots__ = ("_done", "_start")

    def __init__(self, start: Callable[[], None]) -> None:
        self._start, self._done = start, False

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def set_result(self, _value: None) -> None:
        self._done = True
        self._start()


class FairSlots(Generic[T]):
    """The task loop's `concurrency` places, handed to waiting runs in the fair queue's
    order (an asyncio.Semaphore hands them first come, first served). Loop thread only.

    A run enters by `admit`: its coroutine is made only once a place is its, so the loop
    holds about its places' worth of tasks, not a whole due batch whose first steps
    would all come before any other tenant's next step. `acquire` is for a task that
    gave its place back (while it waits for a target's connection) and wants one again."""

    def __init__(
        self,
        places: int,
        shares: Shares,
        tenant_of: Callable[[T], str],
        tier_of: Callable[[T], str],
    ) -> None:
        self.free = places
        self._held: dict[int, T] = {}  # the items holding a place, by identity
        self._shares = shares
        self._tenant_of, self._tier_of = tenant_of, tier_of
        self._queue: FairQueue[tuple[T, asyncio.Future[None] | _Admission]] = FairQueue()
        self._retry: asyncio.TimerHandle | None = None

    @property
    def queue(self) -> FairQueue[tuple[T, asyncio.Future[None] | _Admission]]:
        return self._queue

    def holders(self) -> list[T]:
        """The items holding a place now (what preemption may take one back from)."""
        return list(self._held.values())

    def admit(self, item: T, start: Callable[[], None]) -> None:
        """`start()` once `item` holds a place (now, or when the queue hands it one); the
        place is then the item's, as after `acquire`, and `release` gives it back."""
        tenant = self._tenant_of(item)
        if self.free > 0 and not len(self._queue) and self._shares.try_start(tenant):
            self._take(item)
            start()
            return
        waiter = _Admission(start)
        self._shares.push(
            self._queue, (item, waiter), tenant, self._tier_of(item), self._shares.policy()
        )
        self._wake()

    async def acquire(self, item: T, charge: bool = True) -> None:
        tenant = self._tenant_of(item)
        if self.free > 0 and not len(self._queue) and self._shares.try_start(tenant, charge):
            self._take(item)
            return
        waiter: asyncio.Future[None] | _Admission = asyncio.get_running_loop().create_future()
        self._shares.push(
            self._queue, (item, waiter), tenant, self._tier_of(item), self._shares.policy()
        )
        self._wake()
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # handed a place, then cancelled
                self.release(item)
            else:
                waiter.cancel()  # the queue drops it when it comes to it
            raise

    def _take(self, item: T) -> None:
        self.free -= 1
        self._held[id(item)] = item

    def release(self, item: T) -> None:
        self.free += 1
        self._held.pop(id(item), None)
        self._shares.finished(self._tenant_of(item))
        self._wake()

    def _wake(self) -> None:
        while self.free > 0 and len(self._queue):
            got = self._shares.pop(self._queue, lambda p: self._tenant_of(p[0]))
            if got is None:  # every tenant waiting is at a limit: a rate refills
                if self._retry is None:
                    self._retry = asyncio.get_running_loop().call_later(RETRY_S, self._retried)
                return
            item, waiter = got
            if waiter.done():  # its run gave up waiting
                self._shares.finished(self._tenant_of(item))
                continue
            self._take(item)
            waiter.set_result(None)

    def _retried(self) -> None:
        self._retry = None
        self._wake()

"""A worker: consume a batch, claim it in one statement, commit offsets, hold each run
until its second by the database's clock and start it then, heartbeat every lease in one
statement, finish under the token, and stop any task whose lease it can no longer confirm.

The scheduler publishes a run as soon as it is committed, up to its scan-ahead before its
second; the worker claims it at once and keeps it in a timer wheel (kit.core.dispatch),
so at a top-of-hour burst everything but the task and its finish happens before the
second. `prefetch` bounds the runs claimed and not yet started; `concurrency` the tasks
running at once.

At-least-once: offsets are committed only after the claim committed, so a crash before
that redelivers the batch; a crash after it leaves claimed runs whose leases expire and
the reaper re-queues them. The run id is the task's idempotency key, so a second
execution of the same run can be recognised by the task's target.

A run executed twice while nothing crashed is the worker's fault, and three rules keep
it from happening:
- it fences itself: every lease has a monotonic `confirmed_until` (the start of the last
  claim or heartbeat that extended it, plus the lease length); a task whose lease was not
  confirmed until then, minus the time a kill takes, is stopped and given back, before the
  database lets the reaper hand the run to anyone else; and a task is never started on a
  lease that is not confirmed far enough ahead;
- a run starts at its time by the database's clock (kit.worker.clock), not on arrival: a
  scheduler node whose clock runs fast publishes early, and the worker holds the run;
- a stop gives back only runs whose task has not finished: a success already made is
  written, even with no drain time left.

Throughput at a burst: successes are written by one finisher thread, many runs per
transaction (each still conditional on its own lease token), and a run's slot is
freed only once its outcome is written. Tasks with no effect and no wait (`noop`)
execute on the consume thread instead of a pool hop. Failures and cancellations keep
their one-transaction-per-run path (retry triggers, dead letters).

A message that is not a run (or whose run id PostgreSQL cannot take) goes to the
dead-letter topic with its reason before its offset is committed; the worker moves on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy import Engine
from sqlalchemy.exc import DataError, IntegrityError, ProgrammingError

from kit.core.backlog import StartRate, claim_room, start_budget
from kit.core.defaults import KILL_GRACE_MS
from kit.core.dispatch import TimerWheel, catch_up_order, tier_rank
from kit.core.durations import LeaseBounds, remeasure_due
from kit.core.fair_share import FairQueue, fair_order, held_share, holds
from kit.core.leases import beat_rule, beat_wanted, fence_margin_ms
from kit.core.output import Output
from kit.core.partitions import PARTITION_COUNT
from kit.core.preemption import Running, to_preempt, waiting_of
from kit.core.switches import Switch, holding
from kit.core.tenancy import OPEN, TenantClass, TenantsPolicy
from kit.core.timeutil import to_epoch_ms
from kit.crash import crash_point
from kit.store.claims import (
    Claim,
    ClaimedRun,
    FinishResult,
    RunPointer,
    db_clock,
    run_finish_cancelled,
    run_finish_failed,
    runs_claim,
    runs_finish_ok,
    runs_heartbeat,
    runs_mark_published,
    runs_preempt,
    runs_release,
    runs_return,
)
from kit.store.durations import job_durations_refresh
from kit.store.switches import switches_off
from kit.store.worker_link import WorkerLink
from kit.tasks.context import Cancel, CancelFlag, Slot
from kit.tasks.registry import release_loop
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.transport.consumer import Rejected
from kit.transport.message import topic_for
from kit.transport.republish import publish_pointers
from kit.worker.clock import DbClock
from kit.worker.journal import ExecutionJournal
from kit.worker.shares import START_LAG_BUCKETS, FairSlots, Shares, TenantMetrics
from kit.worker.task_loop import TaskLoop
from kit.worker.tenant_report import TenantReport

if TYPE_CHECKING:
    from kit.tasks.policy import PolicySource

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# What an attempt gives back: whether it succeeded, its error, its output (kit.core.output).
Outcome = tuple[bool, str | None, Output | None]
# (task spec, run id, attempt, timeout_s, cancel, tenant) -> outcome
Execute = Callable[[dict[str, Any], str, int, int, CancelFlag, str], Outcome]
# the same, on the task loop, with the run's begin and slot (kit.tasks.context.RunContext)
AsyncExecute = Callable[
    [dict[str, Any], str, int, int, CancelFlag, str, Callable[[], Awaitable[bool]], Slot],
    Awaitable[Outcome],
]

_RETRY_DB_S = 1.0
_CLOCK_SAMPLE_S = 1.0
_LAG_EVERY_S = 5.0
_TIMEOUT_GRACE_S = 5.0  # the task kills itself at its timeout; this is the backstop
_WOKE_AFTER_S = 1.0  # a fence pass this late: the process did not run (Worker._woke)
FINISH_BATCH = 1000  # successes written per transaction, at most
DURATIONS_EVERY_S = 10.0  # how often a worker measures again the jobs it ran
DURATIONS_BATCH = 2000  # jobs measured per refresh, at most
MEASURED_KEPT = 100_000  # jobs whose last measure a worker remembers (~30 MB at most)
LOOP_WRITERS = 2  # threads writing the task loop's failures and give-backs
CLAIM_BATCH = 2000  # runs claimed per statement, at most
DEFAULT_PREFETCH = 10_000
# While the hold thread starts a second's runs, finishes and beats wait (at most this
# long): the starts are what the start lag measures, and all want the same two cores.
_FINISH_YIELD_S = 1.0
# a batch all read past: the next poll waits this long, doubling up to the most while
# batches are all read past (they are the same runs going round)
_READ_PAST_PAUSE_S = 0.2
_READ_PAST_PAUSE_MAX_S = 1.0
_SENT_BACK_KEPT = 200_000  # run ids sent back remembered (oldest forgotten first)
_OWED_RETRY_S = 0.05  # a pool turn held only by a start rate looks again this soon
_PREEMPT_EVERY_S = 0.05  # between runs coming due, how often a paid run waiting looks
# A claim that fails for what it contains (not for a lost connection) is split to find
# the message that poisons it.
_POISON_ERRORS = (DataError, IntegrityError, ProgrammingError)


def task_executor(
    policy: PolicySource | None = None, worker_secrets: tuple[str, ...] = ()
) -> Execute:
    """Run tasks of kit.tasks with the run id as their idempotency key, each as the
    operator's task policy allows its tenant now (no policy: no commands, public HTTP).
    The task types that run inline are the registry's (kit.tasks.registry.INLINE), read
    when the executor is made."""
    from kit.tasks import RunContext
    from kit.tasks.policy import PolicySource, run_task, run_task_async
    from kit.tasks.registry import ASYNC, INLINE

    source = policy or PolicySource(None)

    def run(
        spec: dict[str, Any],
        run_id: str,
        attempt: int,
        timeout_s: int,
        cancel: CancelFlag,
        tenant: str,
    ) -> Outcome:
        ctx = RunContext(run_id, attempt, timeout_s, cancel, tenant=tenant)
        result = run_task(spec, ctx, source.current(), worker_secrets)
        return bool(result.ok), result.error, result.output

    def run_inline(spec: dict[str, Any]) -> Outcome:
        result = INLINE[spec["type"]](spec)
        return bool(result.ok), result.error, result.output

    async def run_async(
        spec: dict[str, Any],
        run_id: str,
        attempt: int,
        timeout_s: int,
        cancel: CancelFlag,
        tenant: str,
        begin: Callable[[], Awaitable[bool]],
        slot: Slot,
    ) -> Outcome:
        ctx = RunContext(run_id, attempt, timeout_s, cancel, tenant=tenant, begin=begin, slot=slot)
        result = await run_task_async(spec, ctx, source.current(), worker_secrets)
        return bool(result.ok), result.error, result.output

    run.inline_tasks = frozenset(INLINE)  # type: ignore[attr-defined]
    run.run_inline = run_inline  # type: ignore[attr-defined]
    run.async_tasks = frozenset(ASYNC)  # type: ignore[attr-defined]
    run.run_async = run_async  # type: ignore[attr-defined]
    return run


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.start_lag = Histogram(
            "cronfleet_worker_start_lag_seconds",
            "Scheduled time to start, first attempts (database clock)",
            buckets=START_LAG_BUCKETS,
            registry=r,
        )
        self.runs = Counter(
            "cronfleet_worker_runs", "Finished runs by outcome", ["outcome"], registry=r
        )
        self.duplicates = Counter(
            "cronfleet_worker_duplicate_deliveries",
            "Messages that claimed nothing (duplicate or stale), skipped",
            registry=r,
        )
        self.stale_finishes = Counter(
            "cronfleet_worker_stale_finishes",
            "Finishes rejected: the lease token was no longer this worker's",
            registry=r,
        )
        self.leases_lost = Counter(
            "cronfleet_worker_leases_lost", "Heartbeats that found the lease gone", registry=r
        )
        self.fenced = Counter(
            "cronfleet_worker_fenced",
            "Runs stopped (or never started) because their lease could not be confirmed",
            registry=r,
        )
        self.dead_lettered = Counter(
            "cronfleet_worker_dead_lettered_messages",
            "Messages that were not a usable run, put on the dead-letter topic",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "cronfleet_worker_consumer_lag",
            "Messages not yet consumed, per tier",
            ["tier"],
            registry=r,
        )
        self.in_flight = Gauge(
            "cronfleet_worker_in_flight",
            "Runs executing now (started, not finished; claimed runs waiting are `held`)",
            registry=r,
        )
        self.woke = Counter(
            "cronfleet_worker_woke",
            "Times the worker found it had not run for over a second (stopped or starved)",
            registry=r,
        )
        self.switch_held = Counter(
            "cronfleet_worker_switch_held",
            "Claimed runs given back unstarted at their start because an operator's kill "
            "switch holds them (turned off after they were claimed)",
            registry=r,
        )
        self.held = Gauge(
            "cronfleet_worker_held",
            "Claimed runs not started yet (waiting for their second or a free slot)",
            registry=r,
        )
        self.tenants = TenantMetrics(r)

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels or None) or 0.0


def _tenant_of(entry: _InFlight) -> str:
    return entry.run.tenant


def _ahead_s(run: ClaimedRun) -> float:
    """How long before its second the run was claimed (0 for one already due)."""
    return 0.0 if run.due_at is None else max(0.0, (run.due_at - run.claimed_at).total_seconds())


@dataclass(frozen=True)
class _Lease:
    """One lease length's consequences for the worker (kit.core.leases): how long, the
    fence margin, and the horizon within which a beat renews it."""

    ttl_ms: int
    margin_s: float
    horizon_ms: int

    @property
    def ttl_s(self) -> float:
        return self.ttl_ms / 1000


@dataclass
class _InFlight:
    run: ClaimedRun
    confirmed_until: float  # monotonic: the lease is known to hold until then
    lease: _Lease | None = None  # its lease's length (its job's sized lease); None: default
    cancel: Cancel = field(default_factory=Cancel)  # also stops a task on the task loop
    # monotonic; the backstop for the task's own timeout. Set before `started`: the fence
    # thread reads the two without a lock, and a started run must never be seen with no
    # deadline yet (it would be cancelled as overrun at its first instruction)
    deadline: float = math.inf
    started: bool = False
    started_ms: int | None = None  # when the task began, on the database's clock (estimate)
    done: bool = False  # the task returned: its outcome is written, whatever happens next
    fenced: bool = False  # lease not confirmed in time: stopped and given back
    releasing: bool = False  # shutdown gave up on it: release, do not finish
    preempted: bool = False  # stopped for a paid run: given back at the same attempt
    counted_out: bool = False  # left the worker's waiting count (it began, or never will)
    slotted: bool = True  # needs a slot (pool or loop) to start: not an inline task
    due_waiting: bool = False  # its second has come and it waits to begin
    holds_slot: bool = False  # a task on the loop holds one of the concurrency slots
    charged: bool = False  # counted once against its tenant's start rate
    output: Output | None = None  # what the attempt printed or was answered


class _EntrySlot:
    """A run's hold on one of the task loop's slots (kit.tasks.context.Slot): taken
    before its task's first network work, given back while it waits for its turn at a
    target's connections, freed when the run ends (`Worker._ended`). Loop thread only."""

    __slots__ = ("entry", "worker")

    def __init__(self, worker: Worker, entry: _InFlight) -> None:
        self.worker, self.entry = worker, entry

    async def take(self) -> None:
        entry = self.entry
        if not entry.holds_slot:
            slots = self.worker._loop_slots()
            if isinstance(slots, FairSlots):
                await slots.acquire(entry, charge=not entry.charged)
                entry.charged = True
            else:
                await slots.acquire()
            entry.holds_slot = True

    def give_back(self) -> None:
        if self.entry.holds_slot:
            self.entry.holds_slot = False
            self.worker._release_slot(self.entry)


class Worker:
    def __init__(
        self,
        engine: Engine,
        consumer: TieredConsumer,
        publisher: RunPublisher,
        worker_id: str,
        concurrency: int,
        lease_ttl_ms: int,
        *,
        heartbeat_ms: int | None = None,
        lease_bounds: LeaseBounds | None = None,
        partitions: int = PARTITION_COUNT,
        execute: Execute | None = None,
        rng: random.Random | None = None,
        metrics: WorkerMetrics | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        journal: ExecutionJournal | None = None,
        pause_after_dead_default: int | None = None,  # CRONFLEET_PAUSE_AFTER_DEAD
        tenants: Callable[[], TenantsPolicy] = lambda: OPEN,
        fair_share: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self.engine = engine
        self.consumer = consumer
        self.publisher = publisher
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.journal = journal
        self.pause_after_dead_default = pause_after_dead_default
        self.lease_ttl_ms = lease_ttl_ms
        self.lease_ttl_s = lease_ttl_ms / 1000
        self.heartbeat_s = (heartbeat_ms or max(200, lease_ttl_ms // 3)) / 1000
        self.fence_margin_s = fence_margin_ms(lease_ttl_ms, KILL_GRACE_MS) / 1000
        rule = beat_rule(
            lease_ttl_ms, int(self.heartbeat_s * 1000), int(self.fence_margin_s * 1000)
        )
        self.beat_horizon_ms = rule.horizon_ms
        # a job's runs are leased from their measured durations within these bounds
        # (kit.core.durations; without bounds, every run gets `lease_ttl_ms`)
        self.lease_bounds = lease_bounds or LeaseBounds(lease_ttl_ms, lease_ttl_ms)
        self._leases: dict[int, _Lease] = {}
        self._default_lease = _Lease(lease_ttl_ms, self.fence_margin_s, rule.horizon_ms)
        self._leases[lease_ttl_ms] = self._default_lease
        shortest = self._lease_for(min(lease_ttl_ms, self.lease_bounds.min_ms))
        self.beat_tick_s = min(rule.tick_ms, self._tick_ms(shortest.ttl_ms)) / 1000
        # a lease claimed after a walk is due a beat no sooner than this after its claim
        self._fresh_s = max(
            0.0,
            min((lt.ttl_ms - lt.horizon_ms) / 1000 for lt in (self._default_lease, shortest)),
        )
        self._finished_jobs: set[str] = set()  # jobs whose runs succeeded since the refresh
        self._durations_at = 0.0  # monotonic: the last refresh of their durations
        # job -> (monotonic ms of its last measure here, samples it had), oldest first
        self._measured: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self.partitions = partitions
        self.execute = execute or task_executor()
        # task types the executor runs without effect or wait: started in batches on the
        # hold thread, no pool hop, no run context
        self.inline_tasks: frozenset[str] = getattr(self.execute, "inline_tasks", frozenset())
        self._run_inline: Callable[[dict[str, Any]], Outcome] | None = getattr(
            self.execute, "run_inline", None
        )
        # task types whose attempt is a coroutine (http): run on one loop thread, up to
        # `concurrency` at once, not on the pool (kit.worker.task_loop)
        self.async_tasks: frozenset[str] = getattr(self.execute, "async_tasks", frozenset())
        self._run_async: AsyncExecute | None = getattr(self.execute, "run_async", None)
        self._task_loop: TaskLoop[_InFlight] | None = None
        if self.async_tasks and self._run_async is not None:
            self._task_loop = TaskLoop(
                self._execute_async,
                self._ended,
                release_loop,
                admit=self._admit_on_loop,
            )
        self._begin_slots: asyncio.Semaphore | FairSlots[_InFlight] | None = None  # on the loop
        # (tenant, start lag) of first attempts, observed off the starting path
        self._lags: deque[tuple[str, float]] = deque()
        self.rng = rng or random.Random()
        self.metrics = metrics or WorkerMetrics()
        self.clock = DbClock()
        self._rng_lock = threading.Lock()
        self._lock = threading.Lock()
        self._in_flight: dict[str, _InFlight] = {}
        self._slot = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="run")
        # What the task loop's runs write when they end other than by success (a failure,
        # a run given back): on threads of their own, never queued behind thread-based
        # tasks, which may hold every thread of `_pool` for their whole timeout
        # (tests/integration/test_worker_http.py::test_a_failed_http_run_is_written_while_
        # commands_fill_the_pool).
        self._loop_writes = ThreadPoolExecutor(LOOP_WRITERS, thread_name_prefix="loop-write")
        self._wheel: TimerWheel[_InFlight] = TimerWheel()  # due: database-clock ms
        self._waiting = 0  # claimed, not started (in the wheel or queued for a pool slot)
        # of those, the ones that need a slot to start; of those, the ones whose second has
        # come; runs needing a slot begun so far
        self._slotted_waiting = 0
        self._due_waiting = 0
        self._starts = 0
        self._start_rate = StartRate()  # runs needing a slot started per s, when saturated
        self._held_changed = threading.Condition(self._lock)
        self._starting = threading.Event()  # the hold thread is starting a second's runs
        self._beating = threading.Event()
        self._next_walk = 0.0  # monotonic: the heartbeat's next walk of the runs in flight
        self._succeeded: deque[_InFlight] = deque()  # append/popleft are atomic
        self._success_ready = threading.Event()
        self._finisher_stop = threading.Event()
        # Cancellations reach the running task at once (and the fleet view sees us).
        # per-tenant figures written with the presence row (kit.worker.tenant_report)
        self.tenant_report = TenantReport(self.metrics.tenants)
        self.link = WorkerLink(
            engine,
            worker_id,
            concurrency,
            self.in_flight,
            self.stop_cancelled,
            tenants=self.tenant_report.report,
        )
        # Fair shares between tenants (kit.worker.shares): off, slots go first come, first
        # served and a tenant may hold the whole start budget (the comparison's baseline)
        self.fair_share = fair_share
        self.shares = Shares(tenants, lambda: self.link.live_workers, self.metrics.tenants)
        self._pool_queue: FairQueue[_InFlight] = FairQueue()
        self._no_queue: FairQueue[Any] = FairQueue()  # stays empty (`_begin_queue`)
        self._owed_turns = 0  # pool turns that found no run they may start
        self._on_pool: dict[str, _InFlight] = {}  # runs a pool turn took: each holds a thread
        self._preempted_at = 0.0  # monotonic: the hold thread last looked for preemption
        # runs needing a slot past their second and waiting for one, by tenant: a tenant's
        # backlog here, which its fair share bounds (runs claimed ahead of their second
        # are the pipeline, not a backlog: a lone tenant's were sent back by the half)
        self._due_by: dict[str, int] = {}
        # run id -> (tenant, laps): sent round its topic (read past, or sent back) so often
        self._sent_back: dict[str, tuple[str, int]] = {}
        self._shown_at = 0.0  # monotonic: the tenants' waiting gauges were set then
        self._lag_now: dict[str, int] | None = None  # the consumer's lag, read once a batch
        self._past_pause = _READ_PAST_PAUSE_S / 2  # doubles while batches are all read past
        self.describe_wanted = threading.Event()  # log the consumer's state once
        # The kill switches off now, read with each clock sample (about once a second):
        # a run claimed before its switch went off is given back at its start (`_began`).
        self._switches: tuple[Switch, ...] = ()

    # -- the consume loop -------------------------------------------------------------

    def run(self, stop: threading.Event, drain_s: float = 30.0) -> None:
        """Until `stop`: consume, claim, execute. Then stop consuming, let in-flight runs
        finish for up to `drain_s`, cancel and give back the rest (never a run whose task
        already finished: its outcome is written first)."""
        self._sample_clock(stop)
        self._read_switches()
        threads = [
            threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True),
            threading.Thread(target=self._fence_loop, name="fence", daemon=True),
            threading.Thread(target=self._hold_loop, name="hold", daemon=True),
            threading.Thread(target=self._clock_loop, name="clock", daemon=True),
        ]
        self.link.start()
        if self._task_loop is not None:
            self._task_loop.start()
        finisher = threading.Thread(target=self._finish_loop, name="finisher", daemon=True)
        for t in [*threads, finisher]:
            t.start()
        last_lag = 0.0
        try:
            while not stop.is_set():
                if self.describe_wanted.is_set():  # SIGUSR2 (kit.worker.cli), even when full
                    self.describe_wanted.clear()
                    log.warning("consumer state: %s", self.consumer.describe())
                free = self._wait_for_slot(stop)
                if free == 0:
                    continue
                messages = self.consumer.poll_batch(
                    max_messages=free,
                    timeout_s=0.5,
                    now_ms=int(self.clock.db_ms(time.monotonic())),  # runs due now first
                )
                if time.monotonic() - last_lag > _LAG_EVERY_S:
                    last_lag = time.monotonic()
                    for tier, lag in self.consumer.lag_by_tier().items():
                        self.metrics.consumer_lag.labels(tier).set(lag)
                if not self._dead_letter(self.consumer.take_rejected(), stop):
                    break  # stopping before they were safe: they are redelivered
                if not messages:
                    self.consumer.commit()  # the rejected ones, if any
                    continue
                self._lag_now = None
                messages = self._read_past(messages, stop)
                if messages is None:
                    break  # stopping before they were safe: the batch is redelivered
                if not messages:  # all read past: what follows is mostly runs sent back
                    self.consumer.commit()
                    self._past_pause = min(_READ_PAST_PAUSE_MAX_S, 2 * self._past_pause)
                    stop.wait(self._past_pause)
                    continue
                self._past_pause = _READ_PAST_PAUSE_S / 2
                claimed = self._claim(messages, stop)
                if claimed is None:
                    break  # stopping before the claim committed: the batch is redelivered
                crash_point("claim.committed", claimed)
                self.consumer.commit()
                crash_point("claim.offsets_committed", claimed)
                self.metrics.duplicates.inc(len(messages) - len(claimed))
                self._hold(self._over_share(claimed))
        finally:
            self._drain(drain_s)
            if self._task_loop is not None:
                self._task_loop.stop()
            self._loop_writes.shutdown(wait=True)
            self._finisher_stop.set()
            finisher.join(timeout=self.lease_ttl_s)
            self._beating.set()
            with self._held_changed:
                self._held_changed.notify_all()
            for t in threads:
                t.join(timeout=5)
            self.link.stop()
            if self.journal is not None:
                self.journal.close()

    def _wait_for_slot(self, stop: threading.Event) -> int:
        """How many more runs to consume: the prefetch left, and never so many that the
        ones already due would wait on the pool beyond a few turns of it."""
        with self._slot:
            free = self._room()
            if free <= 0:
                self._slot.wait(0.2)
                free = self._room()
            return min(free, CLAIM_BATCH) if not stop.is_set() else 0

    def _room(self) -> int:
        """The prefetch left, within what the worker can start in half its lease
        (kit.core.backlog): at that budget it claims nothing, and others take the rest."""
        running = len(self._in_flight) - self._waiting
        # at capacity while runs whose second has come wait to begin, whatever holds them
        # back: the slots, or a slow target's connections
        self._start_rate.observe(int(time.monotonic() * 1000), self._starts, self._due_waiting > 0)
        budget = start_budget(self.concurrency, self.lease_ttl_ms, self._start_rate.per_s)
        return min(
            self.prefetch - self._waiting,
            self.prefetch + self.concurrency - running,
            claim_room(self._slotted_waiting, budget),
        )

    def _share_of(self, tenant: str) -> int:
        """Under the lock: how many runs needing a slot `tenant` may have waiting past their
        second here (kit.core.fair_share.held_share of the start budget)."""
        policy = self.shares.policy()
        budget = start_budget(self.concurrency, self.lease_ttl_ms, self._start_rate.per_s)
        others = [policy.weight(t) for t in self._due_by if t != tenant]
        return held_share(budget, policy.weight(tenant), others)

    def _behind(self, tier: str) -> bool:
        """Whether messages wait behind this batch in the tier's topic (read once a batch):
        with nothing behind, no run is sent back or read past: nobody is held back."""
        if self._lag_now is None:
            try:
                self._lag_now = self.consumer.lag_by_tier()
            except Exception:
                self._lag_now = {}
        return self._lag_now.get(tier, 0) > 0

    def _read_past(
        self, messages: list[RunMessage], stop: threading.Event
    ) -> list[RunMessage] | None:
        """Messages of runs this worker sent back (their tenant's backlog was over its
        share) whose tenant's still is: published again at the tail of their topic, unclaimed, so
        that the messages behind them are read. Flushed before the offsets are committed:
        a crash redelivers the batch, and a run's second message claims nothing. Returns
        the messages to claim; None if stopping before they were published."""
        if not self.fair_share or not self._sent_back:
            return messages
        keep: list[RunMessage] = []
        past: list[RunMessage] = []
        with self._lock:
            shares: dict[str, tuple[int, int]] = {}  # tenant: (backlog, share)
            for m in messages:
                seen = self._sent_back.get(m.run_id)
                if seen is None:
                    keep.append(m)
                    continue
                tenant, laps = seen
                if tenant not in shares:
                    shares[tenant] = (self._due_by.get(tenant, 0), self._share_of(tenant))
                (keep if holds(*shares[tenant], laps) else past).append(m)
        if past:  # outside the lock: it asks the consumer
            keep += [m for m in past if not self._behind(m.tier)]
            past = [m for m in past if self._behind(m.tier)]
        if not past:
            return keep
        while True:
            try:
                self.publisher.publish(past)
                break
            except Exception:
                log.exception("publishing %d runs read past failed; retrying", len(past))
                if stop.wait(_RETRY_DB_S):
                    return None
        crash_point("claim.read_past_published", past)
        for m in past:
            tenant, laps = self._sent_back[m.run_id]
            self._sent_back[m.run_id] = (tenant, laps + 1)
            self.metrics.tenants.sent_back.labels(self.shares.label(tenant)).inc()
        return keep

    def _over_share(self, entries: list[_InFlight]) -> list[_InFlight]:
        """The claimed runs to hold; a tenant's runs needing a slot while its backlog (runs
        past their second waiting for one) is at its share are given back at once (pending
        at the same attempt, published again at the tail: `_give_back`'s path) and
        remembered, so that next time they are read past without a claim. If the database
        does not answer, they are held as any claimed run."""
        if not self.fair_share or not entries:
            return entries
        laps: dict[str, int] = {}
        for entry in entries:  # claimed: no longer read past
            seen = self._sent_back.pop(entry.run.run_id, None)
            if seen is not None:
                laps[entry.run.run_id] = seen[1]
        keep: list[_InFlight] = []
        excess: list[_InFlight] = []
        now_ms = self.clock.db_ms(time.monotonic()) if self.clock.known else math.inf
        with self._lock:
            adding: dict[str, int] = {}  # of this batch, the runs due already
            shares: dict[str, int] = {}
            for entry in entries:
                spec = entry.run.task_spec
                if spec is None or spec.get("type") in self.inline_tasks:
                    keep.append(entry)
                    continue
                tenant = entry.run.tenant
                if tenant not in shares:
                    shares[tenant] = self._share_of(tenant)
                backlog = self._due_by.get(tenant, 0) + adding.get(tenant, 0)
                if holds(backlog, shares[tenant], laps.get(entry.run.run_id, 0)):
                    due = to_epoch_ms(entry.run.due_at or entry.run.scheduled_at) <= now_ms
                    adding[tenant] = adding.get(tenant, 0) + due
                    keep.append(entry)
                else:
                    excess.append(entry)
        if excess:  # outside the lock: it asks the consumer
            keep += [e for e in excess if not self._behind(e.run.priority)]
            excess = [e for e in excess if self._behind(e.run.priority)]
        if not excess:
            return keep
        try:
            self._hand_back(excess)
        except Exception as exc:
            log.info("could not send back %d runs over their share (%s): held", len(excess), exc)
            return entries
        sent = self._sent_back
        for entry in excess:
            sent[entry.run.run_id] = (entry.run.tenant, laps.get(entry.run.run_id, 0) + 1)
            self.metrics.tenants.sent_back.labels(self.shares.label(entry.run.tenant)).inc()
        while len(sent) > _SENT_BACK_KEPT:
            del sent[next(iter(sent))]
        return keep

    def _sample_clock(self, stop: threading.Event | None = None) -> None:
        """One sample of the database's clock (the first one is waited for)."""
        while True:
            sent = time.monotonic()
            try:
                db = db_clock(self.engine)
            except Exception:
                if self.clock.known or stop is None:
                    raise
                log.exception("reading the database clock failed; retrying")
                if stop.wait(_RETRY_DB_S):
                    return
                continue
            self.clock.observe(sent, to_epoch_ms(db), time.monotonic())
            return

    # -- messages ---------------------------------------------------------------------

    def _claim(self, messages: list[RunMessage], stop: threading.Event) -> list[_InFlight] | None:
        """Claim the batch; a claim failing for what it contains is split until the
        message that poisons it is found and dead-lettered."""
        while True:
            sent = time.monotonic()
            try:
                claimed = self._claim_isolating(messages)
            except Exception:
                log.exception("claim failed; retrying")
                if stop.wait(_RETRY_DB_S):
                    return None
                continue
            if claimed is None:  # a poison message could not be dead-lettered
                if stop.wait(_RETRY_DB_S):
                    return None
                continue
            # the lease runs its ttl past the later of the claim and the run's second
            # (kit.core.leases.claim_run); counted from before the claim was sent
            entries = []
            for run in claimed:
                lease = self._lease_for(run.lease_ttl_ms)
                until = sent + lease.ttl_s + _ahead_s(run)
                entries.append(_InFlight(run, confirmed_until=until, lease=lease))
            for entry in entries:
                entry.cancel.hold_until(self._stop_deadline(entry))
            return entries

    def _claim_isolating(self, messages: list[RunMessage]) -> list[ClaimedRun] | None:
        claims = [Claim(m.run_id, m.attempt) for m in messages]
        try:
            return runs_claim(
                self.engine, claims, self.worker_id, self.lease_ttl_ms, bounds=self.lease_bounds
            )
        except _POISON_ERRORS as exc:
            if len(messages) == 1:
                m = messages[0]
                reason = f"claim refused by the database: {type(exc.orig).__name__}: {exc.orig}"
                rejected = Rejected(
                    topic_for(m.tier), -1, -1, m.job_id.encode(), m.to_bytes(), reason
                )
                return [] if self._dead_letter([rejected], None) else None
            half = len(messages) // 2
            first = self._claim_isolating(messages[:half])
            second = self._claim_isolating(messages[half:])
            return None if first is None or second is None else first + second

    def _dead_letter(self, rejected: list[Rejected], stop: threading.Event | None) -> bool:
        """Put unusable messages on the dead-letter topic; False if that could not be done
        (then nothing is committed and they come back)."""
        if not rejected:
            return True
        while True:
            try:
                self.publisher.publish_rejected(rejected)
            except Exception:
                log.exception("dead-lettering %d messages failed; retrying", len(rejected))
                if stop is None or stop.wait(_RETRY_DB_S):
                    return False
                continue
            self.metrics.dead_lettered.inc(len(rejected))
            for r in rejected:
                log.warning("dead-lettered a message from %s: %s", r.topic, r.reason)
            return True

    # -- starting at the second ---------------------------------------------------------

    def _hold(self, entries: list[_InFlight]) -> None:
        """Claimed runs wait in the wheel for their due time (the scheduled second, or the
        retry time) by the database's clock, highest tier first within a millisecond."""
        with self._held_changed:
            for entry in entries:
                run = entry.run
                self._in_flight[run.run_id] = entry
                due = run.due_at or run.scheduled_at
                self._wheel.add(to_epoch_ms(due), entry, run.priority)
                spec = run.task_spec
                entry.slotted = spec is None or spec.get("type") not in self.inline_tasks
                self._slotted_waiting += entry.slotted
            self._waiting += len(entries)
            self._gauges()
            self._held_changed.notify_all()

    def _hold_loop(self) -> None:
        """Start held runs when the database's clock reaches their second."""
        while not self._beating.is_set():
            if self.fair_share:
                self._tend_shares()
            with self._held_changed:
                now_ms = self.clock.db_ms(time.monotonic())
                due = self._wheel.pop_due(int(now_ms))
                if not due:
                    nxt = self._wheel.next_due_ms()
                    wait = 1.0 if nxt is None else (nxt - now_ms) / 1000
                    if self._owed_turns:  # a start rate refills: look again soon
                        wait = min(wait, _OWED_RETRY_S)
                    self._held_changed.wait(max(0.0005, min(wait, 1.0)))
                    continue
            first, last = due[0].run, due[-1].run  # popped in due order
            if (
                to_epoch_ms(first.due_at or first.scheduled_at) // 1000
                != to_epoch_ms(last.due_at or last.scheduled_at) // 1000
            ):
                # a backlog (runs of several seconds overdue): highest tier first, then age
                due = catch_up_order(
                    due,
                    lambda e: e.run.priority,
                    lambda e: to_epoch_ms(e.run.due_at or e.run.scheduled_at),
                )
            self._starting.set()
            try:
                self._start(due)
            finally:
                self._starting.clear()
            if self.fair_share:  # a paid run just due on a full pool: at once
                self._preempt()

    def _tend_shares(self) -> None:
        """On the hold thread: pay owed pool turns; once a second, the tenants' gauges."""
        if self._owed_turns:
            self._pay_owed()
        now = time.monotonic()
        if now - self._preempted_at >= _PREEMPT_EVERY_S:
            self._preempted_at = now
            self._preempt()
        if now - self._shown_at >= 1.0:
            self._shown_at = now
            queues: list[FairQueue[Any]] = [self._pool_queue]
            slots = self._begin_slots
            if isinstance(slots, FairSlots):
                queues.append(slots.queue)
            self.shares.show_waiting(queues)

    def _start(self, due: list[_InFlight]) -> None:
        """Start runs whose second has come: pool tasks go to the pool (in this order),
        inline ones run here, in one batch."""
        inline: list[_InFlight] = []
        on_loop: list[_InFlight] = []
        with self._lock:  # due and waiting to begin: the start rate is measured then
            for entry in due:
                if entry.slotted and not entry.counted_out:
                    entry.due_waiting = True
                    self._due_waiting += 1
                    tenant = entry.run.tenant
                    self._due_by[tenant] = self._due_by.get(tenant, 0) + 1
        for entry in due:
            spec = entry.run.task_spec
            kind = spec.get("type") if spec is not None else None
            if kind in self.inline_tasks:
                inline.append(entry)
            elif kind in self.async_tasks and self._task_loop is not None:
                on_loop.append(entry)
            elif self.fair_share:
                self._pool_waits(entry)
            else:
                self._pool.submit(self._execute, entry)
        if on_loop:
            if self.fair_share and len(on_loop) > 1:
                on_loop = self._loop_order(on_loop)
            self._task_loop.submit(on_loop)  # type: ignore[union-attr]
            if self.fair_share:  # a paid run just due on full places: once it is queued
                self._task_loop.call(self._preempt_on_loop)  # type: ignore[union-attr]
        if inline:
            self._execute_inline(inline)

    def _loop_order(self, entries: list[_InFlight]) -> list[_InFlight]:
        """The task loop's tasks ask for their places in the order they are handed over:
        in the fair queue's order (kit.core.fair_share.fair_order), not arrival's."""
        policy = self.shares.policy()

        def paid(tenant: str) -> bool:
            return policy.for_tenant(tenant).tenant_class is TenantClass.paid

        return fair_order(
            entries, _tenant_of, lambda e: tier_rank(e.run.priority), policy.weight, paid
        )

    def _pool_waits(self, entry: _InFlight) -> None:
        """A pool run whose second has come waits in the fair queue; the pool gets a turn,
        which starts whichever run the queue picks when a thread takes it."""
        self.shares.push(
            self._pool_queue, entry, entry.run.tenant, entry.run.priority, self.shares.policy()
        )
        self._pool.submit(self._pool_turn)

    def _pool_turn(self) -> None:
        entry = self.shares.pop(self._pool_queue, _tenant_of)
        if entry is None:  # every tenant waiting is at a limit: paid when a run ends
            with self.shares.lock:
                self._owed_turns += 1
            return
        with self._lock:
            self._on_pool[entry.run.run_id] = entry
        try:
            self._execute(entry)
        finally:
            with self._lock:
                self._on_pool.pop(entry.run.run_id, None)
            self.shares.finished(entry.run.tenant)
            self._pay_owed()

    def _preempt(self) -> None:
        """On the hold thread: when every pool thread runs a run and paid tenants' runs
        wait for one, stop the free runs kit.core.preemption.to_preempt picks, as a cancel
        stops them; `_execute` then gives each back at the same attempt
        (`_requeue_preempted`) and its thread takes the paid run. The task loop's places
        are looked at on the loop (`_preempt_on_loop`)."""
        if self._task_loop is not None and len(self._begin_queue()):
            self._task_loop.call(self._preempt_on_loop)
        if not len(self._pool_queue) or len(self._on_pool) < self.concurrency:
            return  # (the lengths read without a lock: the decision below takes it)
        with self._lock:
            entries = list(self._on_pool.values())
        self._stop_for_paid(entries, self._pool_queue)

    def _begin_queue(self) -> FairQueue[Any]:
        """The fair queue of runs waiting for one of the task loop's places (empty with
        fair shares off, or before the loop made its places)."""
        slots = self._begin_slots
        return slots.queue if isinstance(slots, FairSlots) else self._no_queue

    def _preempt_on_loop(self) -> None:
        """On the task loop: as `_preempt`, for its places. A free http run stopped here
        has its request abandoned mid-flight (the target may have it); `_ended` gives the
        run back at the same attempt, and the place it frees goes to the paid run."""
        slots = self._begin_slots
        if not isinstance(slots, FairSlots) or slots.free > 0 or not len(slots.queue):
            return
        self._stop_for_paid(slots.holders(), slots.queue)

    def _stop_for_paid(self, entries: list[_InFlight], queue: FairQueue[Any]) -> None:
        """Stop the runs among `entries` (those holding the worker's `concurrency` slots
        of one kind) that kit.core.preemption picks for the paid runs waiting in `queue`."""
        if len(entries) < self.concurrency:
            return
        policy = self.shares.policy()

        def paid(tenant: str) -> bool:
            return policy.for_tenant(tenant).tenant_class is TenantClass.paid

        startable = self.shares.waiting_startable(queue)
        waiting = waiting_of(((paid(t), tier, n) for t, tier, n in startable), self.concurrency)
        if not any(w.paid for w in waiting):
            return
        running = [
            Running(
                e.run.run_id,
                paid(e.run.tenant),
                tier_rank(e.run.priority),
                e.started_ms if e.started_ms is not None else 2**62,
                e.preempted,
                e.run.preemptions,
                policy.for_tenant(e.run.tenant).max_preemptions,
            )
            for e in entries
        ]
        by_id = {e.run.run_id: e for e in entries}
        for run_id in to_preempt(self.concurrency, running, waiting):
            entry = by_id[run_id]
            if entry.done or entry.releasing or entry.fenced:
                continue
            entry.preempted = True
            entry.cancel.set()
            self.metrics.tenants.preempted.labels(self.shares.label(entry.run.tenant)).inc()
            log.info(
                "run %s of tenant %s preempted: its slot goes to a paid tenant's run",
                run_id,
                entry.run.tenant,
            )

    def _requeue_preempted_and_free(self, entry: _InFlight) -> None:
        """A preempted run's task on the loop stopped: given back (on a writer thread)."""
        try:
            self._requeue_preempted(entry)
        finally:
            self._free([entry])

    def _requeue_preempted(self, entry: _InFlight) -> None:
        """A preempted run's task has stopped: pending again at the same attempt and
        published again (kit.store.claims.runs_preempt). If the database does not answer,
        its lease runs out and the reaper re-queues it (that costs an attempt)."""
        run = entry.run
        started = {run.run_id: entry.started_ms} if entry.started_ms is not None else None
        why = f"preempted: stopped on worker {self.worker_id} for a paid tenant's run"
        try:
            back = runs_preempt(self.engine, [(run.run_id, run.lease_token)], why, started)
        except Exception as exc:
            log.info("could not give back preempted run %s (%s)", run.run_id, exc)
            return
        entry.done = True
        self.metrics.runs.labels("preempted").inc()
        if back:
            try:
                publish_pointers(self.publisher, back)
            except Exception:  # pending and marked: the reaper publishes it again
                log.exception("publishing preempted run %s failed", run.run_id)

    def _pay_owed(self) -> None:
        """Give back the turns that found nothing they could start (a run ended, or a
        start rate refilled): each looks at the queue again."""
        with self.shares.lock:
            n = min(self._owed_turns, len(self._pool_queue))
            self._owed_turns -= n
        try:
            for _ in range(n):
                self._pool.submit(self._pool_turn)
        except RuntimeError:  # the pool is shut down: the stopping worker gives them back
            pass

    def _execute_inline(self, entries: list[_InFlight]) -> None:
        """Tasks with no effect and no wait, started and run on the hold thread, with the
        bookkeeping done once for the batch: at a top-of-hour burst this loop is what
        stands between the second and the last start."""
        with self._lock:
            self._waiting -= len(entries)
            self._gauges()
            for entry in entries:
                entry.counted_out = True
        run_inline = self._run_inline
        assert run_inline is not None
        clock_ms, monotonic, lease_of = self.clock.db_ms, time.monotonic, self._lease_of
        journal, lags, succeeded = self.journal, self._lags, self._succeeded
        failed: list[tuple[_InFlight, str]] = []
        switches = self._switches
        for entry in entries:
            if entry.releasing or entry.fenced:
                continue
            if switches and self._switch_holds(entry, on_loop=True):  # given back off here
                continue
            now = monotonic()
            if now > entry.confirmed_until - lease_of(entry).margin_s:
                self._fence(entry, "lease not confirmed far enough ahead to start")
                self._give_back(entry)
                continue
            run = entry.run
            entry.started = True
            entry.started_ms = started_ms = int(clock_ms(now))
            if journal is not None:
                journal.started(run.run_id, run.attempt, started_ms)
            if run.attempt == 1:
                lags.append((run.tenant, started_ms / 1000 - run.scheduled_at.timestamp()))
            ok, error, entry.output = run_inline(run.task_spec)  # type: ignore[arg-type]
            entry.done = True
            if ok:
                succeeded.append(entry)
            else:
                failed.append((entry, error or "failed"))
        self._success_ready.set()
        by_tenant: dict[str, int] = {}
        for entry in entries:
            if entry.started:
                by_tenant[entry.run.tenant] = by_tenant.get(entry.run.tenant, 0) + 1
        for tenant, n in by_tenant.items():
            self.metrics.tenants.started.labels(self.shares.label(tenant)).inc(n)
        for entry, error in failed:
            self._pool.submit(self._finish_failed, entry, error)

    def _began(self, entry: _InFlight, on_loop: bool = False) -> bool:
        """The task's first instruction: the run leaves the waiting count, its lease must
        still be confirmed far enough ahead, and the instant is its start. On the task
        loop a run that may not start is given back from the pool (the loop never waits
        on the database)."""
        self._count_out(entry)
        if entry.releasing or entry.fenced:
            return False
        if self._switches and self._switch_holds(entry, on_loop):
            return False
        if self._past_fence(entry):
            self._fence(entry, "lease not confirmed far enough ahead to start")
            if on_loop:
                self._loop_writes.submit(self._give_back, entry)
            else:
                self._give_back(entry)
            return False
        run = entry.run
        now = time.monotonic()
        entry.deadline = now + (run.timeout_s or 3600) + _TIMEOUT_GRACE_S
        entry.started_ms = int(self.clock.db_ms(now))
        entry.started = True
        with self._lock:
            self._starts += 1
        self.metrics.tenants.started.labels(self.shares.label(run.tenant)).inc()
        if self.journal is not None:
            self.journal.started(run.run_id, run.attempt, entry.started_ms)
        crash_point("start.begun")
        if run.attempt == 1:
            lag = entry.started_ms / 1000 - run.scheduled_at.timestamp()
            if on_loop:  # thousands a second: observed by the finisher, off the loop
                self._lags.append((run.tenant, lag))
            else:  # a spawned task costs far more than this; observed at once
                self.metrics.start_lag.observe(max(0.0, lag))
                self.tenant_report.lag(self.shares.label(run.tenant), lag)
        return True

    def _switch_holds(self, entry: _InFlight, on_loop: bool) -> bool:
        """A kill switch went off after this run was claimed: it does not start; it goes
        back to pending at the same attempt (no attempt was made), where the switch holds
        it until it is lifted (kit.store.switches)."""
        run = entry.run
        kind = run.task_spec.get("type") if run.task_spec is not None else None
        switch = holding(self._switches, run.tenant, run.priority, kind)
        if switch is None:
            return False
        entry.releasing = True  # nothing else acts on it: it is being given back
        self.metrics.switch_held.inc()
        log.info("run %s not started: the switch is off for %s", run.run_id, switch)
        if on_loop:
            self._loop_writes.submit(self._give_back, entry)
        else:
            self._give_back(entry)
        return True

    def _read_switches(self) -> None:
        """The switches off now; if the database does not answer, the last ones read
        (the claim refuses a held run in any case: this only stops runs claimed ahead)."""
        try:
            self._switches = switches_off(self.engine)
        except Exception as exc:
            log.debug("reading the kill switches failed: %s", exc)

    # -- one run ------------------------------------------------------------------------

    def _execute(self, entry: _InFlight) -> None:
        if not self._began(entry):
            return
        run = entry.run
        handed_off = False  # a success goes to the finisher, which frees the slot
        try:
            if run.task_spec is None:
                entry.done = True
                result = self._finish(
                    lambda: run_finish_cancelled(
                        self.engine, run.run_id, run.lease_token, "job deleted"
                    )
                )
            else:
                try:
                    ok, error, entry.output = self.execute(
                        dict(run.task_spec),
                        run.run_id,
                        run.attempt,
                        run.timeout_s or 3600,
                        entry.cancel,
                        run.tenant,
                    )
                except Exception as exc:  # a task bug is a failed attempt, not a dead worker
                    log.exception("task of run %s raised", run.run_id)
                    ok, error, entry.output = False, f"{type(exc).__name__}: {exc}", None
                crash_point("start.effect_done", ok)
                if not ok and not entry.fenced and self._past_fence(entry):
                    # stopped at its deadline by the keeper (this worker was not running):
                    # the lease is no longer confirmed, so it is not a failed attempt
                    self._fence(entry, "lease not confirmed; its task was stopped")
                if entry.fenced:
                    self._give_back(entry)
                    return
                if entry.preempted and not ok:  # a success made before the stop stands
                    self._requeue_preempted(entry)
                    return
                if entry.releasing:
                    return  # the shutdown gives it back
                entry.done = True
                if ok:
                    self._succeeded.append(entry)
                    self._success_ready.set()
                    handed_off = True
                    return
                result = self._finish(lambda: self._fail(entry, error or "failed"))
            self._outcome(entry, result)
        finally:
            if not handed_off:
                self._free([entry])

    def _count_out(self, entry: _InFlight) -> None:
        """The run leaves the waiting count (once: it begins, or it ends without)."""
        with self._lock:
            if not entry.counted_out:
                entry.counted_out = True
                self._waiting -= 1
                self._slotted_waiting -= entry.slotted
                self._due_waiting -= entry.due_waiting
                if entry.due_waiting:
                    self._due_less(entry.run.tenant)
                self._gauges()

    def _due_less(self, tenant: str) -> None:
        """Under the lock: one of the tenant's runs past its second no longer waits."""
        left = self._due_by.get(tenant, 0) - 1
        if left > 0:
            self._due_by[tenant] = left
        else:
            self._due_by.pop(tenant, None)

    def _loop_slots(self) -> asyncio.Semaphore | FairSlots[_InFlight]:
        """The `concurrency` places of the task loop's runs (made on the loop): handed
        by fair share, or first come, first served with fair shares off."""
        if self._begin_slots is None:
            if self.fair_share:
                self._begin_slots = FairSlots(
                    self.concurrency, self.shares, _tenant_of, lambda e: e.run.priority
                )
            else:
                self._begin_slots = asyncio.Semaphore(self.concurrency)
        return self._begin_slots

    def _admit_on_loop(self, entry: _InFlight, start: Callable[[], None]) -> None:
        """Fair shares: a run's task is made once the fair queue gives it one of the
        loop's places, which it then holds (its first `slot.take` finds it held). With
        them off, at once (the places are a semaphore the task takes itself)."""
        slots = self._loop_slots()
        if not isinstance(slots, FairSlots):
            start()
            return

        def placed() -> None:
            entry.holds_slot = entry.charged = True
            start()

        slots.admit(entry, placed)

    def slot_waiters(self) -> int:
        """Runs on the task loop waiting for one of its places now."""
        slots = self._begin_slots
        if isinstance(slots, FairSlots):
            return len(slots.queue)
        return len(getattr(slots, "_waiters", None) or ()) if slots is not None else 0

    def _release_slot(self, entry: _InFlight) -> None:
        slots = self._loop_slots()
        if isinstance(slots, FairSlots):
            slots.release(entry)
        else:
            slots.release()

    async def _begin_on_loop(self, entry: _InFlight) -> bool:
        """A task on the loop is about to have its effect: it holds a slot (it took one
        for its network work, or takes one now), then begins as any run does (`_began`).
        A refused run keeps its slot until it ends (`_ended` frees it)."""
        await _EntrySlot(self, entry).take()
        return self._began(entry, on_loop=True)

    async def _execute_async(self, entry: _InFlight) -> tuple[bool, str | None]:
        run = entry.run
        assert self._run_async is not None and run.task_spec is not None
        ok, error, entry.output = await self._run_async(
            dict(run.task_spec),
            run.run_id,
            run.attempt,
            run.timeout_s or 3600,
            entry.cancel,
            run.tenant,
            lambda: self._begin_on_loop(entry),
            _EntrySlot(self, entry),
        )
        return ok, error

    def _ended(self, entry: _InFlight, ok: bool, error: str | None) -> None:
        """A run's task on the loop returned: as `_execute` after its task, without
        waiting on the database here (successes go to the finisher, the rest to the pool).
        A run that never began (its start refused, its lease lost or the run cancelled
        while it waited for a connection) wrote nothing: only its place is freed."""
        if entry.holds_slot and self._begin_slots is not None:
            entry.holds_slot = False
            self._release_slot(entry)
        if entry.preempted and not ok and not (entry.fenced or entry.releasing):
            self._count_out(entry)  # (if it was stopped before it began)
            self._loop_writes.submit(self._requeue_preempted_and_free, entry)
            return
        if not entry.started:
            self._count_out(entry)
            if not entry.fenced:  # a fenced one is being given back, which frees it
                self._free([entry])
            return
        if entry.fenced:
            self._loop_writes.submit(self._give_back, entry)
            return
        if entry.releasing:
            self._free([entry])  # the shutdown gives it back
            return
        entry.done = True
        if ok:
            self._succeeded.append(entry)
            self._success_ready.set()
        else:
            self._loop_writes.submit(self._finish_failed, entry, error or "failed")

    def _finish_failed(self, entry: _InFlight, error: str) -> None:
        """A failed inline task: its failure written like any other (on a pool thread)."""
        try:
            self._outcome(entry, self._finish(lambda: self._fail(entry, error)))
        finally:
            self._free([entry])

    def _outcome(self, entry: _InFlight, result: FinishResult | None) -> None:
        if result is None:
            return
        run = entry.run
        if not result.accepted:
            self.metrics.stale_finishes.inc()
            self.metrics.runs.labels("stale").inc()
            log.info("stale finish of run %s rejected (lease lost)", run.run_id)
            return
        self.metrics.runs.labels(result.status or "unknown").inc()
        if result.job_paused:
            log.warning("job %s auto-paused after repeated dead letters", run.job_id)
        if result.queued_next is not None:
            self._publish_queued([result.queued_next])

    def _gauges(self) -> None:
        """Under the lock: runs held for their second (or a slot), and runs executing."""
        self.metrics.held.set(self._waiting)
        self.metrics.in_flight.set(len(self._in_flight) - self._waiting)

    def _free(self, entries: list[_InFlight]) -> None:
        with self._slot:
            for entry in entries:
                self._in_flight.pop(entry.run.run_id, None)
            self._gauges()
            self._slot.notify_all()

    def _finish_loop(self) -> None:
        """Write successes in batches until stopped and nothing is left to write."""
        succeeded = self._succeeded
        while True:
            if not self._starting.is_set():  # not on the interpreter lock the starts need
                self._observe_lags()
            if not succeeded:
                if self._finisher_stop.is_set():
                    return
                self._success_ready.wait(0.1)
                self._success_ready.clear()
                continue
            self._yield_to_starts()
            pop = succeeded.popleft
            batch = [pop() for _ in range(min(len(succeeded), FINISH_BATCH))]
            try:
                self._finish_ok(batch)
            except Exception:  # never lose the slots: the reaper takes the runs over
                log.exception("finishing %d runs failed", len(batch))
            finally:
                self._free(batch)
            self._refresh_durations()

    def _refresh_durations(self, force: bool = False) -> None:
        """Every DURATIONS_EVERY_S, measure the jobs whose runs succeeded here since and
        are due a measure (kit.core.durations.remeasure_due; at most DURATIONS_BATCH of
        them) and write their durations and sized lease (kit.store.durations), on the
        finisher's thread; a failure is retried next time."""
        now = time.monotonic()
        if not self._finished_jobs or (not force and now - self._durations_at < DURATIONS_EVERY_S):
            return
        self._durations_at = now
        now_ms = int(now * 1000)
        measured = self._measured
        jobs: set[str] = set()
        while self._finished_jobs and len(jobs) < DURATIONS_BATCH:
            job = self._finished_jobs.pop()
            at_ms, samples = measured.get(job, (None, 0))
            if remeasure_due(at_ms, samples, now_ms):
                jobs.add(job)
        if not jobs:
            return
        try:
            written = job_durations_refresh(self.engine, jobs, self.lease_bounds)
        except Exception as exc:
            self._finished_jobs |= jobs
            log.warning(
                "measuring the durations of %d jobs failed (again later): %s", len(jobs), exc
            )
            return
        for job in jobs:
            found = written.get(job)
            measured[job] = (now_ms, found[0].samples if found else 0)
            measured.move_to_end(job)
        while len(measured) > MEASURED_KEPT:  # a job forgotten is only measured sooner
            measured.popitem(last=False)

    def _yield_to_starts(self) -> None:
        """Let the second's starts have the interpreter lock and the cores first, for at
        most _FINISH_YIELD_S (a lease's horizon is many beats, a batch of starts ~0.1 s)."""
        if self._starting.is_set():
            waited = time.monotonic() + _FINISH_YIELD_S
            while self._starting.is_set() and time.monotonic() < waited:
                time.sleep(0.01)

    def _observe_lags(self) -> None:
        """Start lags into the histograms (fleet-wide and the tenant's) and the tenants'
        window, here rather than where runs start."""
        lags, observe, label = self._lags, self.metrics.start_lag.observe, self.shares.label
        labelled: list[tuple[str, float]] = []
        labels: dict[str, str] = {}
        for _ in range(len(lags)):
            tenant, lag = lags.popleft()
            observe(max(0.0, lag))
            if tenant not in labels:
                labels[tenant] = label(tenant)
            labelled.append((labels[tenant], lag))
        if labelled:
            self.tenant_report.lags(labelled)

    def _finish_ok(self, batch: list[_InFlight]) -> None:
        leases = sorted((e.run.run_id, e.run.lease_token) for e in batch)
        started = {e.run.run_id: e.started_ms for e in batch if e.started_ms is not None}
        outputs = {e.run.run_id: e.output for e in batch if e.output}
        outcome = self._finish(
            lambda: runs_finish_ok(self.engine, leases, started_ms=started, outputs=outputs)
        )
        if outcome is None:
            return
        accepted, queued = outcome
        self._finished_jobs.update(e.run.job_id for e in batch if e.run.run_id in accepted)
        stale = len(batch) - len(accepted)
        self.metrics.runs.labels("succeeded").inc(len(accepted))
        if stale:
            self.metrics.stale_finishes.inc(stale)
            self.metrics.runs.labels("stale").inc(stale)
            log.info("%d stale finishes rejected (lease lost)", stale)
        if queued:
            self._publish_queued(queued)

    def _fail(self, entry: _InFlight, error: str) -> FinishResult:
        with self._rng_lock:
            rng = random.Random(self.rng.getrandbits(64))
        run = entry.run
        return run_finish_failed(
            self.engine,
            run.run_id,
            run.lease_token,
            error,
            rng,
            self.partitions,
            started_ms=entry.started_ms,
            output=entry.output,
            pause_after_dead_default=self.pause_after_dead_default,
        )

    def _finish(self, write: Callable[[], _T]) -> _T | None:
        """Write the outcome, retrying a database hiccup while the lease would still
        hold; after that the reaper takes over."""
        deadline = time.monotonic() + self.lease_ttl_s
        while True:
            try:
                return write()
            except Exception:
                log.exception("finish failed; retrying")
                if time.monotonic() + _RETRY_DB_S > deadline:
                    return None
                time.sleep(_RETRY_DB_S)

    def _publish_queued(self, queued: list[RunPointer]) -> None:
        try:
            publish_pointers(self.publisher, queued)
            crash_point("finish.queued_published")
            runs_mark_published(self.engine, [q.run_id for q in queued])
        except Exception:  # the reaper publishes a run nobody claimed
            log.exception("publishing queued runs %s failed", [q.run_id for q in queued])

    # -- leases -------------------------------------------------------------------------

    def heartbeat(self) -> set[str]:
        """Extend, in one statement, every lease kit.core.leases.beat_wanted says this
        beat should (those that would end within its horizon, held or started; a finished
        run's until its outcome is written; never a task's past its timeout); stop the
        runs that lost theirs. Returns the run ids told to stop. The thread looks every
        tick (kit.core.leases.beat_rule), but walks the runs (under the worker's lock)
        only when one of them is due: not at every tick of a storm's seconds. A beat
        that failed walks again at the next tick."""
        sent = time.monotonic()
        if sent < self._next_walk:
            return set()
        now_ms = int(sent * 1000)
        # a lease claimed after this walk is not due a beat before this
        next_walk = sent + self._fresh_s
        entries = []
        with self._lock:
            for entry in self._in_flight.values():
                if self._beat_wanted(entry, now_ms):
                    entries.append(entry)
                elif not (entry.fenced or entry.releasing):
                    horizon_s = self._lease_of(entry).horizon_ms / 1000
                    next_walk = min(next_walk, entry.confirmed_until - horizon_s)
        if not entries:
            self._next_walk = next_walk
            return set()
        started = {e.run.run_id: e.started_ms for e in entries if e.started_ms is not None}
        _kept, lost = runs_heartbeat(
            self.engine,
            [(e.run.run_id, e.run.lease_token) for e in entries],
            self.lease_ttl_ms,
            started_ms=started,
            ttls_ms={e.run.run_id: e.lease.ttl_ms for e in entries if e.lease is not None},
        )
        self._next_walk = next_walk  # renewed ones are due a ttl - horizon from now
        stopped: set[str] = set()
        with self._lock:
            for entry in entries:
                if entry.run.run_id not in lost:
                    ttl_s = self._lease_of(entry).ttl_s
                    entry.confirmed_until = max(entry.confirmed_until, sent + ttl_s)
                    entry.cancel.hold_until(self._stop_deadline(entry))
                # a run that finished meanwhile also shows as lost: only stop live ones
                elif entry.run.run_id in self._in_flight and not entry.done:
                    entry.cancel.set()
                    stopped.add(entry.run.run_id)
        if stopped:
            self.metrics.leases_lost.inc(len(stopped))
            log.warning("leases lost (reaped or cancelled), stopping: %s", sorted(stopped))
        return stopped

    def _tick_ms(self, ttl_ms: int) -> int:
        beat = max(200, ttl_ms // 3)
        return beat_rule(ttl_ms, beat, fence_margin_ms(ttl_ms, KILL_GRACE_MS)).tick_ms

    def _lease_for(self, ttl_ms: int | None) -> _Lease:
        """What a lease of `ttl_ms` (None: the default) means here: its fence margin,
        and its beat a third of it (kit.core.leases.beat_rule)."""
        if ttl_ms is None:
            return self._default_lease
        lease = self._leases.get(ttl_ms)
        if lease is None:
            margin = fence_margin_ms(ttl_ms, KILL_GRACE_MS)
            horizon = beat_rule(ttl_ms, max(200, ttl_ms // 3), margin).horizon_ms
            lease = _Lease(ttl_ms, margin / 1000, horizon)
            if len(self._leases) < 10_000:
                self._leases[ttl_ms] = lease
        return lease

    def _lease_of(self, entry: _InFlight) -> _Lease:
        return entry.lease or self._default_lease

    def _stop_deadline(self, entry: _InFlight) -> float:
        """When the run's task must be stopped if this worker cannot do it itself (it is
        stopped or starved): a little after its own fence would (so, running, it acts
        first and gives the run back), still the kill grace and more before the lease
        ends. Kept from outside the worker by kit.tasks.command's keeper."""
        margin = self._lease_of(entry).margin_s
        return entry.confirmed_until - margin + min(0.5, margin / 4)

    def _beat_wanted(self, entry: _InFlight, now_ms: int) -> bool:
        """kit.core.leases.beat_wanted for one run held, running or finished. A finished
        task's outcome is still to be written under its lease, so its timeout no longer
        applies; but, like any other, its lease is extended only when it would end within
        the horizon: renewing every finished run at every beat renewed thousands with 30 s
        left at a storm's second (a beat during the starts took the worker's lock and a
        statement while half its runs waited to start)."""
        if entry.fenced or entry.releasing:
            return False
        deadline = None if entry.done or math.isinf(entry.deadline) else entry.deadline
        return beat_wanted(
            entry.started or entry.done,
            int(entry.confirmed_until * 1000),
            None if deadline is None else int(deadline * 1000),
            now_ms,
            self._lease_of(entry).horizon_ms,
        )

    def stop_cancelled(self, run_ids: Iterable[str]) -> set[str]:
        """Runs cancelled through the API (kit.store.run_cancel): stop their tasks now.
        Nothing is written for them afterwards: the cancel already finished the run."""
        stopped: set[str] = set()
        held: list[_InFlight] = []
        with self._lock:
            for run_id in run_ids:
                entry = self._in_flight.get(run_id)
                if entry is not None and not entry.done:
                    entry.releasing = True
                    entry.cancel.set()
                    stopped.add(run_id)
                    if not entry.started:
                        held.append(entry)  # waiting for its second: it never starts
        if held:
            self._free(held)
        if stopped:
            self.metrics.runs.labels("cancelled").inc(len(stopped))
            log.info("runs cancelled through the API, stopping: %s", sorted(stopped))
        return stopped

    def _heartbeat_loop(self) -> None:
        while not self._beating.wait(self.beat_tick_s):
            # a beat walks every run in flight under the worker's lock (~12 ms for 25,000)
            self._yield_to_starts()
            try:
                self.heartbeat()
            except Exception:
                log.exception("heartbeat failed; retrying")

    def _clock_loop(self) -> None:
        """A sample of the database's clock every second: the more samples, the tighter
        the lower bound of the offset, and the closer to its second a run starts."""
        while not self._beating.wait(_CLOCK_SAMPLE_S):
            try:
                self._sample_clock()
            except Exception as exc:
                log.debug("sampling the database clock failed: %s", exc)
            self._read_switches()

    def _fence_loop(self) -> None:
        """Stop what can no longer be confirmed, whatever the heartbeat is doing (a call
        to a database behind a dead link hangs; this thread does not wait for it)."""
        period = min(0.25, self.lease_ttl_s / 10)
        last = time.monotonic()
        while not self._beating.wait(period):
            now = time.monotonic()
            if now - last > period + _WOKE_AFTER_S:
                self._woke(now - last, now)
            last = now
            self._fence_pass(now)

    def _woke(self, gap_s: float, now: float) -> None:
        """The fence thread ran nothing for `gap_s` (the process was stopped, paused by
        its host, or starved): say so, and what follows. Runs whose lease it can no
        longer confirm are fenced by this pass: their tasks stopped (the keeper of command
        tasks stopped them already at their fence deadline), handed back, and whatever
        it still writes of them (a finish, a beat) is refused by the database unless the
        lease token is still its own: another worker may hold them now."""
        with self._lock:
            held = [e for e in self._in_flight.values() if not (e.done or e.fenced)]
        lost = sum(1 for e in held if now > e.confirmed_until - self._lease_of(e).margin_s)
        self.metrics.woke.inc()
        log.warning(
            "woke after %.1f s without running (stopped or starved): %d of %d runs in "
            "flight have leases it can no longer confirm: fencing them (tasks stopped, "
            "runs handed back); their finishes count only where the lease is still its own",
            gap_s,
            lost,
            len(held),
        )

    def _fence_pass(self, now: float) -> None:
        with self._lock:
            entries = list(self._in_flight.values())
        for entry in entries:
            if entry.done or entry.fenced or entry.releasing:
                continue
            if now > entry.confirmed_until - self._lease_of(entry).margin_s:
                self._fence(entry, "lease not confirmed")
                if not entry.started:
                    self._give_back(entry)
            elif entry.started and now > entry.deadline and not entry.cancel.is_set():
                log.warning("run %s overran its timeout; cancelling", entry.run.run_id)
                entry.cancel.set()

    def _past_fence(self, entry: _InFlight) -> bool:
        return time.monotonic() > entry.confirmed_until - self._lease_of(entry).margin_s

    def _fence(self, entry: _InFlight, why: str) -> None:
        entry.fenced = True
        entry.cancel.set()
        self.metrics.fenced.inc()
        log.warning("run %s stopped: %s (it goes back to the reaper)", entry.run.run_id, why)

    def _give_back(self, entry: _InFlight) -> None:
        """A fenced run, if the database answers: one that never started goes back to
        pending at the same attempt and is published again (no attempt was made); one
        that started has its lease ended now (the reaper re-queues it, attempt + 1). If
        the database does not answer, the lease runs out. The slot is freed either way."""
        try:
            self._hand_back([entry])
        except Exception as exc:
            log.info(
                "could not give back run %s (%s); its lease will expire", entry.run.run_id, exc
            )
        self._free([entry])

    def _hand_back(self, entries: list[_InFlight]) -> tuple[int, int]:
        """Return the unstarted runs (and publish them), release the started ones;
        (returned, released)."""
        unstarted = [(e.run.run_id, e.run.lease_token) for e in entries if not e.started]
        started = [(e.run.run_id, e.run.lease_token) for e in entries if e.started]
        returned = runs_return(self.engine, unstarted) if unstarted else []
        crash_point("give_back.returned", returned)
        if returned:
            try:
                publish_pointers(self.publisher, returned)
            except Exception:  # pending and marked: the reaper publishes them again
                log.exception("publishing %d returned runs failed", len(returned))
        released = runs_release(self.engine, started) if started else 0
        return len(returned), released

    def _drain(self, drain_s: float) -> None:
        deadline = time.monotonic() + drain_s
        with self._slot:
            while any(not e.done for e in self._in_flight.values()) and time.monotonic() < deadline:
                self._slot.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            # Only runs whose task has not returned are given up; a finished one's
            # outcome is being written and must not be released (it would run again).
            left = [e for e in self._in_flight.values() if not (e.done or e.fenced)]
            for entry in left:
                entry.releasing = True
                entry.cancel.set()
            self._wheel = TimerWheel()  # what was held is in `left`: given back below
            self._waiting = self._slotted_waiting = self._due_waiting = 0
            self._due_by.clear()
            for entry in self._in_flight.values():
                entry.counted_out = True
            self._gauges()
        self._pool.shutdown(wait=True, cancel_futures=False)  # cancelled tasks end first
        if left:
            try:
                returned, released = self._hand_back(left)
                log.warning(
                    "shutdown: %d runs not started given back and published again, %d started "
                    "and unfinished released to the reaper",
                    returned,
                    released,
                )
            except Exception:
                log.exception(
                    "shutdown: giving back %d runs failed; their leases expire", len(left)
                )
            self._free(left)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

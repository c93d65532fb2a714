"""A top-of-hour storm on one machine, in the kit's current design (issue 8): N runs due
at the same second T, one scheduler node, W workers, PostgreSQL and the broker sharing
the machine's cores.

The design as the kit runs it (docs/life-of-a-run.md, kit/scheduler, kit/worker), thread
by thread:

- the node scans at whole seconds (`kit.core.dispatch.next_scan_at_ms`),
  `kit.core.dispatch.scan_window` ahead (10 s by default), so the burst's second is first
  reached at T - 10 s; a scan transaction reads the due triggers, decides, inserts the
  runs and encodes them (its scan thread), a batch per transaction, the next batch at
  once; its publish thread publishes each commit's runs in chunks, each produced, sent
  (librdkafka's threads), appended by the broker and acknowledged before the next; a
  published run stays pending until claimed;
- each worker's librdkafka threads fetch its share, its main thread claims a batch per
  statement ahead of the second (`kit.core.leases.claim_run`) up to its prefetch and holds
  the claimed runs in a `kit.core.dispatch.TimerWheel` until they are due;
- at the second the worker's hold thread pops the due runs and starts the inline (noop)
  ones one after another in one batch; a run whose start would come after its confirmed
  lease less the fence margin is given back instead. Every such decision (the tick at
  the second, the begin, the end, the beat) is the kit's own machine's
  (kit.core.worker_run), which the model's workers feed the kit's events (kit.worker is
  to interpret the same machine: issue 29);
- its finisher thread, every turn (0.1 s at most), observes the start lags recorded so
  far, then waits for the starts to end and writes the successes a batch per transaction;
- its fence thread walks every run it holds every 0.25 s; its heartbeat thread extends,
  every ttl/3, the leases a beat lengthens (runs started and not finished).

CPU: the cores are shared in quanta, first come first served (a round robin of the
runnable threads); a Python process's threads also take turns on its one interpreter
lock, so a worker's claims, starts, lag observations, fence passes, finishes and beats
never overlap each other; librdkafka's threads, PostgreSQL's backends and the broker need
a core only. The periodic threads' phases against T are the seed's. The CPU each step
costs comes from the calibration profile: the worker's wheel, start, fence and lag paths
measured on the kit's own code (`cronfleet calibrate --only-worker-starts`), every other
step thread by thread from a storm of the kit sampled by benchmarks/burst_at_t.py
(`[storm_cpu]` of the profile, docs/sim-storm.md).

What the runs execute (`storm.task`): noop runs start inline on the hold thread; an http
run goes to the worker's task loop (one thread, on its interpreter lock), waits for one
of the target's kept-alive connections (per worker) and a concurrency slot, and costs the
loop's CPU before and after the target's; a command run costs a pool thread's CPU to spawn
and reap it and the command's own. Their costs: `cronfleet calibrate --only-tasks`.

Not modelled: the clock (a worker starts a run when its lower bound of the database's
clock reaches T and measures the start by the same bound, so the measured lag does not
see the bound's error), the garbage collector (its time is in the thread it interrupts),
the kernel's scheduler beyond the quanta, the broker's fetch batching, page cache and I/O.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from kit.core import defaults, dispatch, leases
from kit.core import worker_run as machine
from kit.core.worker_run import Effect, RunPhase

# A SimPy process: a generator of the events it waits on.
Process = Generator[simpy.Event, Any, None]

STORM_DEFAULTS: dict[str, Any] = {
    "kind": "storm",
    "name": "storm",
    "description": "",
    "storm": {
        "runs": 50_000,  # due at the same second T
        "cores": 2,
        "workers": 2,  # worker processes, one consumer group
        "prefetch": 0,  # runs a worker claims ahead (0: its share of the burst)
        "lead_s": 20.0,  # the model starts this long before T (jobs exist, fleet idle)
        "scan_ahead_s": -1.0,  # < 0: the core's default
        "scan_period_s": defaults.SCAN_PERIOD_MS / 1000,
        "scan_batch_rows": defaults.SCAN_BATCH_ROWS,
        "publish_chunk": 5_000,  # kit.scheduler.node.PUBLISH_CHUNK
        "claim_batch": 2_000,  # kit.worker.worker.CLAIM_BATCH
        "finish_batch": 1_000,  # kit.worker.worker.FINISH_BATCH
        "finish_yield_s": 1.0,  # kit.worker.worker._FINISH_YIELD_S
        "run_ttl_s": defaults.RUN_LEASE_TTL_MS / 1000,
        "heartbeat_s": defaults.RUN_LEASE_TTL_MS / 3000,  # the worker's default
        "quantum_ms": 2.0,  # a slice of a core
        # the kit's workers beat the leases a beat lengthens: the runs started (and any
        # held past the second they were leased for); a run claimed ahead is leased a ttl
        # past its second (kit.core.leases.claim_run), so held runs get no beats
        "heartbeats": True,
        # each worker's first heartbeat from T - 1 s, seconds from T, comma-separated (as
        # benchmarks/life_of_a_run.py records them: heartbeat_phase_s); "": drawn from the seed
        "heartbeat_phases": "",
        "background": True,  # the rest of the machine's CPU, as measured in a storm
        # the second as a storm makes it (benchmarks/burst_at_t.py in the calibration run):
        # the hold threads' CPU per start at T, and what the rest of the machine takes from
        # T to T + 0.3 s (in place of the steady background in that window)
        "at_t": True,
        # what each run executes: noop (inline on the hold thread), http (on the worker's
        # task loop, kit.worker.task_loop: the loop's CPU per task under the interpreter
        # lock, then the target's), command (a pool thread spawns it: the worker's CPU
        # under the lock, then the command's own)
        "task": "noop",
        "concurrency": 1024,  # tasks one worker runs at once (the benchmark's --concurrency)
        # kept-alive connections per target per worker: kit.tasks.http.CONNECTIONS_PER_TARGET
        "connections_per_target": 64,
    },
    "profile": {},
}


TASKS = ("noop", "http", "command")
# the profile keys each task kind is charged by (cronfleet calibrate --only-tasks)
TASK_PROFILE_KEYS: dict[str, tuple[str, ...]] = {
    "http": (
        "worker_http_submit_s",
        "worker_http_loop_cpu_s",
        "worker_http_loop_before_send_s",
        "http_target_cpu_s",
    ),
    "command": ("worker_command_submit_s", "worker_command_cpu_s", "command_child_cpu_s"),
}

# the slot of the CPU timeline, as benchmarks/burst_at_t.py's (timeline_ms)
TIMELINE_SLOT_S = 0.25


class ScenarioShapeError(ValueError):
    pass


@dataclass
class Cpu:
    """Cores shared in quanta; each process's busy time is counted."""

    env: simpy.Environment
    cores: int
    quantum_s: float
    busy: dict[str, float] = field(default_factory=dict)
    # CPU seconds by who and by TIMELINE_SLOT_S slot of time (slot k: k * slot from T)
    timeline: dict[str, dict[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.res = simpy.Resource(self.env, self.cores)

    def run(self, who: str, seconds: float, gil: simpy.Resource | None = None) -> Process:
        """Take `seconds` of a core (and of the process's interpreter lock, if any)."""
        left = seconds
        while left > 1e-12:
            q = min(left, self.quantum_s)
            g = gil.request() if gil is not None else None
            if g is not None:
                yield g
            c = self.res.request()
            yield c
            slot = math.floor(self.env.now / TIMELINE_SLOT_S)
            yield self.env.timeout(q)
            line = self.timeline.setdefault(who, {})
            line[slot] = line.get(slot, 0.0) + q
            self.res.release(c)
            if g is not None:
                gil.release(g)  # type: ignore[union-attr]
            left -= q
            self.busy[who] = self.busy.get(who, 0.0) + q


@dataclass
class Costs:
    """CPU seconds per run of each step (profile), thread by thread as the kit runs them,
    and the rest of the machine's CPU rate."""

    sched_scan: float  # node's scan thread: decide, build, read (its interpreter lock)
    pg_scan: float  # PostgreSQL, the scan's backend: trigger read, run insert, advance
    sched_publish: float  # node's publish thread: produce, delivery reports (its lock)
    sched_native: float  # node's librdkafka threads (no interpreter lock)
    broker: float  # the broker, for the publish and the workers' fetch (less its idle)
    broker_after: float  # the broker after T (less its idle)
    worker_native: float  # a worker's librdkafka threads: fetch (no interpreter lock)
    worker_claim: float  # a worker's main thread: consume, claim statement, decode, commit
    pg_claim: float  # PostgreSQL, the workers' backends: the claim
    hold_add: float  # worker: into the wheel (measured on kit.worker)
    fence: float  # worker: the fence thread's pass, per run it walks (measured on kit.worker)
    wheel_pop: float  # worker: out of the wheel at the second (measured)
    start: float  # worker: one inline start (measured)
    observe_lag: float  # worker: the finisher's observation of a start's lag (measured)
    worker_finish: float  # worker: the finisher's finish statement, per run (and a beat's)
    pg_finish: float  # PostgreSQL: the success's update
    other: float  # CPU seconds per second the rest of the machine takes
    at_t: float  # CPU seconds the rest of the machine takes from T to T + at_t_window
    at_t_window: float  # seconds
    # how that CPU came, slot by slot (at_t_slot seconds each, from T); (): evenly
    at_t_slots: tuple[float, ...]
    at_t_slot: float
    at_t_start: float  # a hold thread's CPU per run popped and started at T, in a storm
    # http and command tasks (cronfleet calibrate --only-tasks); 0 when not measured
    http_submit: float = 0.0  # worker's hold thread: a due run handed to the task loop
    http_before_send: float = 0.0  # worker's task loop: a task up to its request leaving
    http_after_send: float = 0.0  # worker's task loop: the write, the response, the end
    http_target: float = 0.0  # the target's CPU per request (a core only)
    command_submit: float = 0.0  # worker's hold thread: a due run handed to the pool
    command_worker: float = 0.0  # worker: a pool thread spawning and reaping the command
    command_child: float = 0.0  # the command's own process (a core only)

    @classmethod
    def from_profile(cls, p: dict[str, float]) -> Costs:
        ahead = (
            "scheduler_scan",
            "scheduler_publish",
            "scheduler_native",
            "postgres_scan",
            "postgres_claim",
            "worker_claim",
            "worker_native",
            "broker",
        )
        need = [
            "worker_hold_add_s",
            "worker_wheel_pop_s",
            "worker_start_inline_s",
            "worker_fence_pass_per_run_s",
            "worker_observe_lag_s",
            "storm_other_cpu_per_s",
            "storm_at_t_cpu_s",
            "storm_at_t_window_s",
            "storm_at_t_start_cpu_per_run_s",
            *[f"storm_ahead_{k}_cpu_per_run_s" for k in ahead],
            *[f"storm_after_{k}_cpu_per_run_s" for k in ("worker_finish", "postgres", "broker")],
        ]
        missing = [k for k in need if k not in p]
        if missing:
            raise ScenarioShapeError(
                f"profile: missing {', '.join(missing)} (cronfleet calibrate "
                "--only-worker-starts --storm-cpu BURST.json --storm-at-t ALL_AT_T.json; "
                "see docs/sim-storm.md)"
            )
        return cls(
            sched_scan=p["storm_ahead_scheduler_scan_cpu_per_run_s"],
            pg_scan=p["storm_ahead_postgres_scan_cpu_per_run_s"],
            sched_publish=p["storm_ahead_scheduler_publish_cpu_per_run_s"],
            sched_native=p["storm_ahead_scheduler_native_cpu_per_run_s"],
            broker=p["storm_ahead_broker_cpu_per_run_s"],
            broker_after=p["storm_after_broker_cpu_per_run_s"],
            worker_native=p["storm_ahead_worker_native_cpu_per_run_s"],
            # the main thread also puts the claimed runs into the wheel (kit.worker._hold)
            worker_claim=max(
                0.0, p["storm_ahead_worker_claim_cpu_per_run_s"] - p["worker_hold_add_s"]
            ),
            pg_claim=p["storm_ahead_postgres_claim_cpu_per_run_s"],
            hold_add=p["worker_hold_add_s"],
            fence=p["worker_fence_pass_per_run_s"],
            wheel_pop=p["worker_wheel_pop_s"],
            start=p["worker_start_inline_s"],
            observe_lag=p["worker_observe_lag_s"],
            # the finisher thread's CPU after T less its lag observation (run apart)
            worker_finish=max(
                0.0, p["storm_after_worker_finish_cpu_per_run_s"] - p["worker_observe_lag_s"]
            ),
            pg_finish=p["storm_after_postgres_cpu_per_run_s"],
            other=p["storm_other_cpu_per_s"],
            at_t=p["storm_at_t_cpu_s"],
            at_t_window=p["storm_at_t_window_s"],
            at_t_start=p["storm_at_t_start_cpu_per_run_s"],
            at_t_slots=tuple(
                p[f"storm_at_t_slot_{k}_cpu_s"]
                for k in itertools.takewhile(
                    lambda k: f"storm_at_t_slot_{k}_cpu_s" in p, itertools.count()
                )
            ),
            at_t_slot=p.get("storm_at_t_slot_s", 0.0),
            http_submit=p.get("worker_http_submit_s", 0.0),
            **http_costs(p),
            command_submit=p.get("worker_command_submit_s", 0.0),
            command_worker=p.get("worker_command_cpu_s", 0.0),
            command_child=p.get("command_child_cpu_s", 0.0),
        )


def http_costs(p: dict[str, float]) -> dict[str, float]:
    """The task loop's CPU per http task, before its request leaves and after, and the
    target's per request: as bursts of the kit measured them when the profile has them
    (`http_storm_*`, `cronfleet calibrate --http-storm`), else as measured alone
    (`worker_http_loop_*`). In a burst the loop costs what it costs alone; what moves it
    is the machine's speed on the day (113-185 us per task for the same code), so a
    burst's own figures calibrate the model for its sitting. The part before the send
    keeps its isolated share of the whole."""
    alone = p.get("worker_http_loop_cpu_s", 0.0)
    before = p.get("worker_http_loop_before_send_s", 0.0)
    loop = p.get("http_storm_loop_cpu_s", alone)
    share = before / alone if alone > 0 else 0.0
    return {
        "http_before_send": loop * share,
        "http_after_send": max(0.0, loop * (1 - share)),
        "http_target": p.get("http_storm_target_cpu_s", p.get("http_target_cpu_s", 0.0)),
    }


def _ms(t_s: float) -> int:
    """The model's time (s from T) as the machine's clock (ms)."""
    return math.floor(t_s * 1000)


class StormWorker:
    """One worker process: its main (consume and claim), hold, finisher, fence and
    librdkafka threads, as kit.worker runs them; the Python ones take turns on its
    interpreter lock. What happens to each run it holds is decided by the kit's own
    machine (kit.core.worker_run): the threads here send it the kit's events in simulated
    time (claimed, tick, placed, begin, ended, written, heartbeat, beat confirmed) and
    carry out its effects (what kit.worker is to do: issue 29)."""

    def __init__(self, m: StormModel, index: int, prefetch: int, phases: dict[str, float]):
        self.m = m
        self.name = f"worker-{index}"
        self.gil = simpy.Resource(m.env, 1)
        self.inbox: deque[int] = deque()  # fetched run messages, for the main thread
        self.wheel: dispatch.TimerWheel[int] = dispatch.TimerWheel()
        self.prefetch = prefetch
        self.waiting = 0  # claimed, not started
        self.in_flight = 0  # claimed, not finished
        self.succeeded: deque[int] = deque()
        self.beats: list[tuple[float, int]] = []  # (when, runs beaten)
        self.lags = 0  # start lags recorded by the hold thread, not yet observed
        self.starting = False
        self.entries: dict[int, machine.RunEntry] = {}  # the machine's, per run held
        self.slots = simpy.Resource(m.env, int(m.sc["concurrency"]))
        self.connections = simpy.Resource(m.env, int(m.sc["connections_per_target"]))
        self.arrived = m.env.event()
        self.held_changed = m.env.event()
        self.success_ready = m.env.event()
        env = m.env
        env.process(self._consume())
        env.process(self._hold())
        env.process(self._finish(phases["finisher"]))
        env.process(self._fence(phases["fence"]))
        if m.sc["heartbeats"]:
            env.process(self._heartbeat(phases["heartbeat"]))

    def deliver(self, runs: list[int]) -> None:
        """The broker serves the worker's share of a published chunk: its librdkafka
        threads fetch and queue it (CPU, no interpreter lock), then the main thread sees it."""
        self.m.env.process(self._fetch(runs))

    def _fetch(self, runs: list[int]) -> Process:
        m = self.m
        yield m.env.process(m.cpu.run(f"{self.name} native", len(runs) * m.costs.worker_native))
        self.inbox.extend(runs)
        if not self.arrived.triggered:
            self.arrived.succeed()

    def _consume(self) -> Process:
        """kit.worker's main thread: poll a batch (up to the prefetch left, at most a claim
        batch), claim it in one statement, put the claimed runs into the wheel."""
        m, c = self.m, self.m.costs
        env = m.env
        while True:
            room = min(self.prefetch - self.waiting, m.sc["claim_batch"])
            if not self.inbox or room <= 0:
                self.arrived = env.event()
                yield self.arrived | env.timeout(0.2)
                continue
            batch = [self.inbox.popleft() for _ in range(min(room, len(self.inbox)))]
            n = len(batch)
            sent = env.now
            yield env.process(m.cpu.run(self.name, n * c.worker_claim / 2, self.gil))
            yield env.process(m.cpu.run("postgres", n * c.pg_claim))
            yield env.process(m.cpu.run(self.name, n * c.worker_claim / 2, self.gil))
            m.claim_verdict()
            claimed_at = env.now
            # the lease runs a ttl past the later of the claim and the run's second
            # (kit.core.leases.claim_run; kit.worker counts it from before the claim)
            sent_ms, ahead_ms = _ms(sent), -_ms(claimed_at)  # the second is T: 0 ms
            for r in batch:
                m.claimed[r] = claimed_at
                self.entries[r] = machine.claimed(m.facts, sent_ms, ahead_ms)[0]
            yield env.process(m.cpu.run(self.name, n * c.hold_add, self.gil))
            for r in batch:
                self.wheel.add(0, r)  # every run is due at T (time 0, in ms)
            self.waiting += n
            self.in_flight += n
            if not self.held_changed.triggered:
                self.held_changed.succeed()

    def _hold(self) -> Process:
        m, c = self.m, self.m.costs
        env = m.env
        while True:
            nxt = self.wheel.next_due_ms()
            if nxt is None or nxt / 1000 > env.now:
                self.held_changed = env.event()
                wait = 1.0 if nxt is None else min(1.0, nxt / 1000 - env.now)
                yield self.held_changed | env.timeout(max(0.0005, wait))
                continue
            self.starting = True
            n = len(self.wheel)
            yield env.process(m.cpu.run(self.name, n * m.pop_s, self.gil))
            popped = self.wheel.pop_due(int(env.now * 1000))
            self.waiting -= len(popped)
            due = []
            for r in popped:  # the machine's tick at the second: due, or past its fence
                if Effect.give_back in self._step(r, machine.TICK, _ms(env.now)):
                    self._given_back(r)
                else:
                    due.append(r)
            if m.task != "noop":
                # handed on in one batch (kit.worker.Worker._start): to the task loop (http)
                # or a pool thread each (command); each run's start is its own process
                submit = c.http_submit if m.task == "http" else c.command_submit
                yield env.process(m.cpu.run(self.name, len(due) * submit, self.gil))
                run = self._http if m.task == "http" else self._command
                for r in due:
                    env.process(run(r))
                self.starting = False
                continue
            # started one after another: each quantum of the batch is timed when it ends
            per_q = max(1, int(m.cpu.quantum_s / m.start_s)) if m.start_s > 0 else len(due)
            for i in range(0, len(due), per_q):
                part = due[i : i + per_q]
                t0 = env.now
                yield env.process(m.cpu.run(self.name, len(part) * m.start_s, self.gil))
                step = (env.now - t0) / len(part)
                for k, r in enumerate(part):
                    at = t0 + (k + 1) * step
                    if not self._begin(r, at):
                        continue
                    m.started[r] = at
                    self.lags += 1
                    self._step(r, machine.OK, _ms(at))  # finish_ok: to the finisher
                    self.succeeded.append(r)
            self.starting = False
            if not self.success_ready.triggered:
                self.success_ready.succeed()

    def _step(self, r: int, event: machine.Event, now_ms: int) -> tuple[Effect, ...]:
        """The run's machine takes the event (kit.core.worker_run.on); returns its effects."""
        self.entries[r], effects = machine.on(self.entries[r], event, now_ms)
        return effects

    def _begin(self, r: int, at: float) -> bool:
        """kit.worker.Worker._began: the machine's `begin` (refused past the fence: the
        run is given back); its start is recorded by the caller."""
        self._step(r, machine.BEGIN, _ms(at))
        if self.entries[r].phase is RunPhase.running:
            return True
        self._given_back(r)
        return False

    def _given_back(self, r: int) -> None:
        self.m.give_back(r)
        self.in_flight -= 1
        del self.entries[r]

    def _began(self, r: int) -> bool:
        """A slotted run (http, command) placed and begun on its slot's thread."""
        self._step(r, machine.PLACED, _ms(self.m.env.now))
        return self._begin(r, self.m.env.now)

    def _ended(self, r: int) -> None:
        self._step(r, machine.OK, _ms(self.m.env.now))  # finish_ok: to the finisher
        self.lags += 1
        self.succeeded.append(r)
        if not self.success_ready.triggered:
            self.success_ready.succeed()

    def _http(self, r: int) -> Process:
        """One http task on the worker's task loop (kit.tasks.http): its turn for one of
        the target's kept-alive connections, then one of `concurrency` slots, the loop's
        CPU up to the request leaving (one thread: the interpreter lock), the target's CPU
        (the ledger records the arrival: the start lag as the benchmark measures it), then
        the loop's CPU for the response and the end. Every task's CPU before its
        connection is charged after it (the total is the same; the kit does that part for
        every due task at once, before the first requests)."""
        m, c = self.m, self.m.costs
        env = m.env
        with self.connections.request() as conn:
            yield conn
            with self.slots.request() as slot:
                yield slot
                if not self._began(r):
                    return
                yield env.process(m.cpu.run(self.name, c.http_before_send, self.gil))
                yield env.process(m.cpu.run("target", c.http_target))
                m.started[r] = env.now
                yield env.process(m.cpu.run(self.name, c.http_after_send, self.gil))
        self._ended(r)

    def _command(self, r: int) -> Process:
        """One command task on a pool thread (kit.tasks.command): a slot, the worker's CPU
        to spawn, wait for and reap it (charged before the command runs: the spawn is most
        of it), then the command's own CPU, which records its start (the benchmark's
        command writes its arrival first thing; its process's start-up comes first)."""
        m, c = self.m, self.m.costs
        env = m.env
        with self.slots.request() as slot:
            yield slot
            if not self._began(r):
                return
            yield env.process(m.cpu.run(self.name, c.command_worker, self.gil))
            yield env.process(m.cpu.run("command", c.command_child))
            m.started[r] = env.now
        self._ended(r)

    def _finish(self, phase_s: float) -> Process:
        """kit.worker's finisher: each turn it first observes the start lags recorded so
        far (on the interpreter lock; not while the hold thread starts), then, with
        successes to write, waits for the second's starts to end and writes a batch; with
        none it waits for them up to 0.1 s. Its turns' phase against T is the seed's."""
        m, c = self.m, self.m.costs
        env = m.env
        yield env.timeout(phase_s)
        while True:
            if self.lags and not self.starting:  # kit.worker: not while the hold thread starts
                n, self.lags = self.lags, 0
                yield env.process(m.cpu.run(self.name, n * c.observe_lag, self.gil))
            if not self.succeeded:
                self.success_ready = env.event()
                yield self.success_ready | env.timeout(0.1)
                continue
            waited = env.now + m.sc["finish_yield_s"]
            while self.starting and env.now < waited:
                yield env.timeout(0.01)
            n = min(len(self.succeeded), m.sc["finish_batch"])
            batch = [self.succeeded.popleft() for _ in range(n)]
            yield env.process(m.cpu.run(self.name, n * c.worker_finish / 2, self.gil))
            yield env.process(m.cpu.run("postgres", n * c.pg_finish))
            yield env.process(m.cpu.run("broker", n * c.broker_after))
            yield env.process(m.cpu.run(self.name, n * c.worker_finish / 2, self.gil))
            m.finish_verdict()
            now_ms = _ms(env.now)
            for r in batch:
                m.finished[r] = env.now
                self._step(r, machine.WRITTEN, now_ms)  # done: free
                del self.entries[r]
            self.in_flight -= n

    def _fence(self, phase_s: float) -> Process:
        """kit.worker's fence thread: every 0.25 s (a tenth of the lease ttl at most) it
        walks every run the worker holds or runs, on the interpreter lock."""
        m = self.m
        period = min(0.25, m.ttl_s / 10)
        yield m.env.timeout(phase_s * period)
        while True:
            yield m.env.timeout(period)
            if self.in_flight:
                yield m.env.process(m.cpu.run(self.name, self.in_flight * m.costs.fence, self.gil))

    def _heartbeat(self, phase_s: float) -> Process:
        """kit.worker's heartbeat thread: every ttl/3 it extends, in one statement, every
        lease a beat would lengthen (kit.worker.Worker.heartbeat: the runs started and not
        finished, and those held whose lease, granted a ttl past their second, runs out
        before a fresh one would); a run claimed ahead is not beaten before its second.
        Priced as a finish per run beaten (the same update of a batch of runs by token)."""
        m, c = self.m, self.m.costs
        env = m.env
        yield env.timeout(phase_s)
        while True:
            waited = env.now + m.sc["finish_yield_s"]  # kit.worker: after the starts
            while self.starting and env.now < waited:
                yield env.timeout(0.01)
            sent = env.now
            sent_ms = _ms(sent)
            beaten = [  # the runs whose `next_beat_ms` came and that the machine beats
                r
                for r, e in self.entries.items()
                if (at := machine.next_beat_ms(e)) is not None
                and at <= sent_ms
                and Effect.beat in self._step(r, machine.HEARTBEAT, sent_ms)
            ]
            if beaten:
                n = len(beaten)
                yield env.process(m.cpu.run(self.name, n * c.worker_finish / 2, self.gil))
                yield env.process(m.cpu.run("postgres", n * c.pg_finish))
                yield env.process(m.cpu.run(self.name, n * c.worker_finish / 2, self.gil))
                self.beats.append((sent, n))
                confirmed, now_ms = machine.BeatConfirmed(sent_ms), _ms(env.now)
                for r in beaten:
                    if r in self.entries:
                        self._step(r, confirmed, now_ms)
            yield env.timeout(m.beat_tick_s)


class StormModel:
    def __init__(self, scenario: dict[str, Any], profile: dict[str, float], seed: int) -> None:
        self.s = scenario
        self.sc = sc = scenario["storm"]
        self.seed = seed
        rnd = random.Random(seed)
        n, w = int(sc["runs"]), int(sc["workers"])
        for key in ("runs", "workers", "cores", "claim_batch", "finish_batch", "scan_batch_rows"):
            if int(sc[key]) < 1:
                raise ScenarioShapeError(f"storm.{key}: must be at least 1")
        for key in ("quantum_ms", "scan_period_s", "heartbeat_s", "run_ttl_s"):
            if float(sc[key]) <= 0:
                raise ScenarioShapeError(f"storm.{key}: must be positive")
        if int(sc["prefetch"]) < 0:
            raise ScenarioShapeError("storm.prefetch: must not be negative (0: the burst's share)")
        self.n = n
        self.task = str(sc["task"])
        if self.task not in TASKS:
            raise ScenarioShapeError(f"storm.task: one of {', '.join(TASKS)}, got {self.task!r}")
        for key in ("concurrency", "connections_per_target"):
            if int(sc[key]) < 1:
                raise ScenarioShapeError(f"storm.{key}: must be at least 1")
        self.env = simpy.Environment(initial_time=-float(sc["lead_s"]))
        self.costs = Costs.from_profile(profile)
        missing = [k for k in TASK_PROFILE_KEYS.get(self.task, ()) if k not in profile]
        if missing:
            raise ScenarioShapeError(
                f"profile: storm.task={self.task} needs {', '.join(missing)} "
                "(cronfleet calibrate --only-tasks; see docs/sim-storm.md)"
            )
        self.cpu = Cpu(self.env, int(sc["cores"]), float(sc["quantum_ms"]) / 1000)
        ahead = float(sc["scan_ahead_s"])
        self.ahead_ms = defaults.SCAN_AHEAD_MS if ahead < 0 else int(ahead * 1000)
        self.ttl_s = float(sc["run_ttl_s"])
        ttl_ms, beat_ms = int(self.ttl_s * 1000), int(sc["heartbeat_s"] * 1000)
        lease = machine.lease_terms(ttl_ms, beat_ms)
        # what the kit's worker knows of every run of the storm (one class: the same task,
        # lease and second; the run id only names a refused event)
        self.facts = machine.RunFacts(
            "storm", 0, lease, self.task, slotted=self.task != "noop", timeout_s=None
        )
        self.beat_tick_s = leases.beat_rule(ttl_ms, beat_ms, lease.margin_ms).tick_ms / 1000
        self.sched_gil = simpy.Resource(self.env, 1)
        self.scanned = 0
        self.committed: deque[int] = deque()
        self.committed_ev = self.env.event()
        self.published = np.full(n, np.nan)
        self.claimed = np.full(n, np.nan)
        self.started = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.worker_of = np.full(n, -1)
        self.given_back = 0
        self.verdicts: set[str] = set()
        prefetch = int(sc["prefetch"]) or -(-n // w)
        period = float(sc["heartbeat_s"])
        beats = self._heartbeat_phases(str(sc["heartbeat_phases"]), w, period)
        # each worker's periodic threads' phase against T: the seed's (the heartbeat's as
        # given, if it is)
        self.workers = []
        for i in range(w):
            drawn = rnd.uniform(0, period)
            phases = {"heartbeat": drawn, "finisher": rnd.uniform(0, 0.1), "fence": rnd.random()}
            if beats:
                # the first beat at or after the model's start, in the given phase
                first = beats[i] + float(sc["lead_s"])
                phases["heartbeat"] = first - period * math.floor(first / period)
            self.workers.append(StormWorker(self, i, prefetch, phases))
        self.env.process(self._scan())
        self.env.process(self._publish())
        c = self.costs
        for key, v in (
            ("storm_at_t_cpu_s", c.at_t),
            ("storm_at_t_window_s", c.at_t_window),
            ("storm_at_t_start_cpu_per_run_s", c.at_t_start),
        ):
            if v < 0:
                raise ScenarioShapeError(f"profile.{key}: must not be negative")
        self.at_t_window_s = c.at_t_window if sc["at_t"] and c.at_t > 0 else 0.0
        # the second's pop and starts at what they cost in the storm (measured on the hold
        # threads at T), split as the isolated measurement splits them
        self.pop_s, self.start_s = c.wheel_pop, c.start
        if sc["at_t"] and c.at_t_start > 0 and c.wheel_pop + c.start > 0:
            scale = c.at_t_start / (c.wheel_pop + c.start)
            self.pop_s, self.start_s = c.wheel_pop * scale, c.start * scale
        if sc["background"] and c.other > 0:
            threads = math.ceil(c.other)  # one thread per core it needs
            for _ in range(threads):
                self.env.process(self._background(c.other / threads))
        if self.at_t_window_s > 0:
            # the rest's CPU at T (storm_at_t_cpu_s) as it came, slot by slot (the shape of
            # the profile's storm_at_t_slot_*), or evenly over the window
            if any(v < 0 for v in c.at_t_slots):
                raise ScenarioShapeError("profile.storm_at_t_slot_*_cpu_s: must not be negative")
            shape = sum(c.at_t_slots)
            if c.at_t_slot > 0 and shape > 0:
                slots = tuple(c.at_t * v / shape for v in c.at_t_slots)
                length = c.at_t_slot
            else:
                slots, length = (c.at_t,), self.at_t_window_s
            for k, cpu in enumerate(slots):
                threads = math.ceil(cpu / length)  # one per core it needs
                for _ in range(threads):
                    self.env.process(self._at_t(k * length, length, cpu / threads))

    @staticmethod
    def _heartbeat_phases(text: str, workers: int, period: float) -> list[float]:
        if not text.strip():
            return []
        try:
            beats = [float(x) for x in text.split(",")]
        except ValueError:
            raise ScenarioShapeError(
                f"storm.heartbeat_phases: expected numbers separated by commas, got {text!r}"
            ) from None
        if len(beats) != workers:
            raise ScenarioShapeError(
                f"storm.heartbeat_phases: one per worker ({workers}), got {len(beats)}"
            )
        if any(not -1.0 <= b < period for b in beats):
            raise ScenarioShapeError(
                f"storm.heartbeat_phases: each within [-1, {period:g}) s of T (the first "
                "beat from T - 1 s)"
            )
        return beats

    def _background(self, rate: float, period_s: float = 0.05) -> Process:
        """The rest of the machine (other stacks and agents, PostgreSQL's checkpointer and
        autovacuum): its measured CPU per second, taken in slices; in the window after T
        the CPU measured at T takes its place."""
        while True:
            if 0 <= self.env.now < self.at_t_window_s:
                yield self.env.timeout(self.at_t_window_s - self.env.now)
                continue
            yield self.env.timeout(period_s * (1 - rate))
            yield self.env.process(self.cpu.run("rest of the machine", rate * period_s))

    def _at_t(self, start: float, length: float, cpu: float, period_s: float = 0.01) -> Process:
        """What the rest of the machine (the node's scan at the whole second, the
        benchmark's poll and its backend, the broker, the workers' other threads, other
        stacks) takes from T on, while the hold threads start their runs: the CPU measured
        in each slot of that window at T, taken in slices at its measured rate from the
        slot's start and competing for the cores like everything else."""
        env = self.env
        yield env.timeout(start - env.now)
        rate = cpu / length
        left = cpu
        while left > 1e-12:
            q = min(left, rate * period_s)
            yield env.timeout(q / rate - q)
            yield env.process(self.cpu.run("rest of the machine at T", q))
            left -= q

    # -- kit.core's verdicts, once per class of runs (the core is pure) -------------------

    def claim_verdict(self) -> None:
        if "claim" not in self.verdicts:
            run = leases.RunLease("class", 1, leases.RunStatus.pending)
            tr = leases.claim_run(run, "w", "t", 1, 0, int(self.ttl_s * 1000))
            if not tr.accepted:
                raise RuntimeError(f"kit.core refused a claim of a pending run: {tr.reason}")
            self.verdicts.add("claim")

    def finish_verdict(self) -> None:
        if "finish" not in self.verdicts:
            run = leases.RunLease("class", 1, leases.RunStatus.running, token="t")
            if not leases.finish_run(run, "t", True, 0, None).accepted:
                raise RuntimeError("kit.core refused a success")
            self.verdicts.add("finish")

    def give_back(self, r: int) -> None:
        """A run held past its confirmed lease is given back, not started (pending again,
        same attempt): counted, and in this model not published again."""
        run = leases.RunLease(str(r), 1, leases.RunStatus.running, token="t")
        if not leases.return_run(run, "t", started=False).accepted:
            raise RuntimeError("kit.core refused to take back a run never started")
        self.given_back += 1

    # -- the scheduler node -----------------------------------------------------------

    def _scan(self) -> Process:
        """Scans at whole periods (`kit.core.dispatch.next_scan_at_ms`, as the kit's node
        waits): the burst's second is first reached by the scan at T - scan-ahead; a full
        batch is followed by the next at once."""
        env, c, sc = self.env, self.costs, self.sc
        period_ms = round(float(sc["scan_period_s"]) * 1000)
        while True:
            now_ms = round(env.now * 1000)
            yield env.timeout(
                max(0.0, dispatch.next_scan_at_ms(now_ms, period_ms) / 1000 - env.now)
            )
            _lo, hi = dispatch.scan_window(round(env.now * 1000), self.ahead_ms)
            while hi >= 0 and self.scanned < self.n:  # the burst's second is in the window
                b = min(int(sc["scan_batch_rows"]), self.n - self.scanned)
                # one transaction: it reads the due triggers first (the database), then
                # decides, writes and encodes (the node's scan thread, its statements'
                # database time charged with the read)
                yield env.process(self.cpu.run("postgres", b * c.pg_scan))
                yield env.process(self.cpu.run("scheduler", b * c.sched_scan, self.sched_gil))
                self.committed.extend(range(self.scanned, self.scanned + b))
                self.scanned += b
                if not self.committed_ev.triggered:
                    self.committed_ev.succeed()

    def _publish(self) -> Process:
        env, c, sc = self.env, self.costs, self.sc
        w = len(self.workers)
        while True:
            if not self.committed:
                self.committed_ev = env.event()
                yield self.committed_ev
                continue
            k = min(int(sc["publish_chunk"]), len(self.committed))
            chunk = [self.committed.popleft() for _ in range(k)]
            # produce and flush (kit.transport.publisher.publish_encoded): the publish
            # thread produces and takes the delivery reports, librdkafka's threads send,
            # the broker appends; the next chunk after this one's acknowledgements
            yield env.process(self.cpu.run("scheduler", k * c.sched_publish, self.sched_gil))
            yield env.process(self.cpu.run("scheduler native", k * c.sched_native))
            yield env.process(self.cpu.run("broker", k * c.broker))
            self.published[chunk] = env.now
            for i in range(w):  # keyed by job: an even share per worker's partitions
                self.worker_of[chunk[i::w]] = i
                self.workers[i].deliver(chunk[i::w])

    # -- running it ---------------------------------------------------------------------

    def run(self, limit_s: float = 300.0) -> dict[str, Any]:
        env = self.env
        while env.now < limit_s:
            env.run(until=env.now + 0.5)
            if np.isfinite(self.finished).sum() + self.given_back >= self.n:
                break
        return self.result()

    def result(self) -> dict[str, Any]:
        lag = self.started[np.isfinite(self.started)]
        fin = self.finished[np.isfinite(self.finished)]

        def pct(a: np.ndarray, q: float) -> float | None:
            # the benchmark's percentile: the value at rank int(q * (n - 1)) of the sorted
            return None if a.size == 0 else round(float(np.sort(a)[int(q * (a.size - 1))]), 4)

        claimed = self.claimed[np.isfinite(self.claimed)]
        pub = self.published[np.isfinite(self.published)]
        return {
            "scenario": self.s["name"],
            "seed": self.seed,
            "runs": self.n,
            "cores": int(self.sc["cores"]),
            "workers": len(self.workers),
            "scan_ahead_s": self.ahead_ms / 1000,
            "started": int(lag.size),
            "succeeded": int(fin.size),
            "given_back": self.given_back,
            "task": self.task,
            "start_lag_s": [pct(lag, 0.5), pct(lag, 0.99), pct(lag, 1.0)],
            # each worker's p50 / p99 / max, as the benchmark's runs_by_worker
            "start_lag_by_worker_s": [
                [pct(a, 0.5), pct(a, 0.99), pct(a, 1.0)]
                for i in range(len(self.workers))
                for a in [self.started[(self.worker_of == i) & np.isfinite(self.started)]]
            ],
            "all_claimed_s": None if claimed.size < self.n else round(float(claimed.max()), 3),
            "published_s": None
            if pub.size < self.n
            else [round(float(pub.min()), 3), round(float(pub.max()), 3)],
            "all_succeeded_s": None if fin.size < self.n else round(float(fin.max()), 3),
            "heartbeats": [  # each beat that extended leases: worker, when (s from T), runs
                [w.name, round(at, 3), n] for w in self.workers for at, n in w.beats
            ],
            "cpu_s": {k: round(v, 2) for k, v in sorted(self.cpu.busy.items())},
            "cpu_timeline_s": {
                who: {f"{k * TIMELINE_SLOT_S:+.2f}": round(v, 4) for k, v in sorted(line.items())}
                for who, line in sorted(self.cpu.timeline.items())
            },
        }


def load_storm(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The storm scenario as run: defaults <- file <- overrides."""
    from sim.scenario import ScenarioError, apply_overrides, deep_merge

    s = apply_overrides(deep_merge(STORM_DEFAULTS, raw), overrides)
    unknown = set(s["storm"]) - set(STORM_DEFAULTS["storm"])
    if unknown:
        raise ScenarioError(f"storm.{sorted(unknown)[0]}: unknown key")
    return s


def simulate_storm(
    raw: dict[str, Any], overrides: list[str], seed: int, profile: dict[str, float]
) -> dict[str, Any]:
    s = load_storm(raw, overrides)
    return StormModel(s, profile, seed).run()

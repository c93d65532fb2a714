"""A top-of-hour storm on one machine, in the kit's current design (issue 8): N runs due
at the same second T, one scheduler node, W workers, PostgreSQL and the broker sharing
the machine's cores.

The design as the kit runs it (docs/life-of-a-run.md, kit/scheduler, kit/worker):

- the node scans once a second, `kit.core.dispatch.scan_window` ahead (10 s by default),
  inserts the due runs a batch per transaction and publishes them right after the commit
  (its publish thread); a published run stays pending until claimed;
- each worker consumes its share, claims a batch per statement ahead of the second
  (`kit.core.leases.claim_run`) up to its prefetch, and holds the claimed runs in a
  `kit.core.dispatch.TimerWheel` until they are due;
- at the second the worker's hold thread pops the due runs and starts the inline (noop)
  ones one after another in one batch; a run whose start would come after its confirmed
  lease less the fence margin is given back instead (`kit.core.leases.return_run`);
- a finisher thread writes the successes a batch per transaction and yields to starts;
- every worker extends the leases of what it holds every heartbeat.

CPU: the cores are shared in quanta, first come first served (a round robin of the
runnable threads); a Python process's threads also take turns on its one interpreter
lock, so a worker's starts, claims, finishes and heartbeats never overlap each other.
PostgreSQL backends and the broker need a core only. The CPU each step costs per run
comes from the calibration profile: the worker's wheel and start path measured on the
kit's own code (`cronfleet calibrate`), the rest from the kit's CPU accounting of a
storm (`[storm_cpu]` of the profile, see docs/sim.md).

Not modelled: the clock (a worker starts a run when its lower bound of the database's
clock reaches T and measures the start by the same bound, so the measured lag does not
see the bound's error), the kernel's scheduler beyond the quanta, the broker's fetch
batching, page cache and I/O.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from kit.core import defaults, dispatch, leases
from kit.core.schedule import ScheduleKind
from sim.scenario import scan_cost_keys

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
        # the kit's workers beat only leases a beat lengthens: a run claimed ahead is leased
        # a ttl past its second (kit.core.leases.claim_run), so held runs get no beats
        "heartbeats": False,
        "background": True,  # the rest of the machine's CPU, as measured in a storm
        # the second as a storm makes it (benchmarks/burst_at_t.py in the calibration run):
        # the hold threads' CPU per start at T, and what the rest of the machine takes from
        # T to T + 0.3 s (in place of the steady background in that window)
        "at_t": True,
    },
    "profile": {},
}


class ScenarioShapeError(ValueError):
    pass


@dataclass
class Cpu:
    """Cores shared in quanta; each process's busy time is counted."""

    env: simpy.Environment
    cores: int
    quantum_s: float
    busy: dict[str, float] = field(default_factory=dict)

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
            yield self.env.timeout(q)
            self.res.release(c)
            if g is not None:
                gil.release(g)  # type: ignore[union-attr]
            left -= q
            self.busy[who] = self.busy.get(who, 0.0) + q


@dataclass
class Costs:
    """CPU seconds per run of each step, and each process's idle CPU rate (profile)."""

    sched_scan: float  # node: scan and insert (Python)
    sched_publish: float  # node: publish (Python)
    pg_scan: float  # PostgreSQL: trigger advance and run insert
    pg_claim: float  # PostgreSQL: the claim
    pg_finish: float  # PostgreSQL: the success's update
    broker: float  # produce and fetch
    worker_claim: float  # worker: consume, claim statement, decode
    worker_finish: float  # worker: the finish statement
    hold_add: float  # worker: into the wheel (measured on kit.worker)
    wheel_pop: float  # worker: out of the wheel at the second (measured)
    start: float  # worker: one inline start (measured)
    other: float  # CPU seconds per second the rest of the machine takes
    at_t: float  # CPU seconds the rest of the machine takes from T to T + at_t_window
    at_t_window: float  # seconds
    at_t_start: float  # a hold thread's CPU per run popped and started at T, in a storm

    @classmethod
    def from_profile(cls, p: dict[str, float]) -> Costs:
        kinds = ("scheduler", "worker", "postgres", "broker")
        need = [
            "worker_hold_add_s",
            "worker_wheel_pop_s",
            "worker_start_inline_s",
            "storm_other_cpu_per_s",
            "storm_at_t_cpu_s",
            "storm_at_t_window_s",
            "storm_at_t_start_cpu_per_run_s",
            *[f"storm_{ph}_{k}_cpu_per_run_s" for ph in ("ahead", "after") for k in kinds],
        ]
        missing = [k for k in need if k not in p]
        if missing:
            raise ScenarioShapeError(
                f"profile: missing {', '.join(missing)} (cronfleet calibrate "
                "--only-worker-starts --storm-cpu BURST.json --storm-at-t ALL_AT_T.json; "
                "see docs/sim-storm.md)"
            )
        # PostgreSQL's scan-ahead work: the scan's insert and trigger advance, then the
        # claim, in the proportion the calibration measured them statement by statement
        # (the storm's jobs are one-off: a one-off fire's scan costs)
        _cpu, advance, run_insert = scan_cost_keys(ScheduleKind.one_off)
        insert = p[run_insert] + p[advance]
        scan_share = insert / (insert + p["db_claim_demand_s"])
        pg_ahead = p["storm_ahead_postgres_cpu_per_run_s"]
        after_worker = p["storm_after_worker_cpu_per_run_s"]
        return cls(
            sched_scan=p["storm_ahead_scheduler_cpu_per_run_s"] / 2,
            sched_publish=p["storm_ahead_scheduler_cpu_per_run_s"] / 2,
            pg_scan=pg_ahead * scan_share,
            pg_claim=pg_ahead * (1 - scan_share),
            pg_finish=p["storm_after_postgres_cpu_per_run_s"],
            broker=p["storm_ahead_broker_cpu_per_run_s"] + p["storm_after_broker_cpu_per_run_s"],
            worker_claim=max(0.0, p["storm_ahead_worker_cpu_per_run_s"] - p["worker_hold_add_s"]),
            worker_finish=max(
                0.0, after_worker - p["worker_wheel_pop_s"] - p["worker_start_inline_s"]
            ),
            hold_add=p["worker_hold_add_s"],
            wheel_pop=p["worker_wheel_pop_s"],
            start=p["worker_start_inline_s"],
            other=p["storm_other_cpu_per_s"],
            at_t=p["storm_at_t_cpu_s"],
            at_t_window=p["storm_at_t_window_s"],
            at_t_start=p["storm_at_t_start_cpu_per_run_s"],
        )


class StormWorker:
    """One worker process: consume-and-claim, hold, finisher and heartbeat threads."""

    def __init__(self, m: StormModel, index: int, prefetch: int, heartbeat_phase_s: float):
        self.m = m
        self.name = f"worker-{index}"
        self.gil = simpy.Resource(m.env, 1)
        self.inbox: deque[int] = deque()  # published run ids, visible to this worker
        self.wheel: dispatch.TimerWheel[int] = dispatch.TimerWheel()
        self.prefetch = prefetch
        self.waiting = 0  # claimed, not started
        self.in_flight = 0  # claimed, not finished
        self.succeeded: deque[int] = deque()
        self.starting = False
        self.confirmed_until: dict[int, float] = {}
        self.arrived = m.env.event()
        self.held_changed = m.env.event()
        self.success_ready = m.env.event()
        env = m.env
        env.process(self._consume())
        env.process(self._hold())
        env.process(self._finish())
        if m.sc["heartbeats"]:
            env.process(self._heartbeat(heartbeat_phase_s))

    def deliver(self, runs: list[int]) -> None:
        self.inbox.extend(runs)
        if not self.arrived.triggered:
            self.arrived.succeed()

    def _consume(self) -> Process:
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
            yield env.process(m.cpu.run(self.name, n * c.worker_claim / 2, self.gil))
            yield env.process(m.cpu.run("postgres", n * c.pg_claim))
            yield env.process(m.cpu.run(self.name, n * c.worker_claim / 2, self.gil))
            m.claim_verdict()
            claimed_at = env.now
            for r in batch:
                m.claimed[r] = claimed_at
                self.confirmed_until[r] = claimed_at + m.ttl_s
            yield env.process(m.cpu.run(self.name, n * c.hold_add, self.gil))
            for r in batch:
                self.wheel.add(0, r)  # every run is due at T (time 0, in ms)
            self.waiting += n
            self.in_flight += n
            if not self.held_changed.triggered:
                self.held_changed.succeed()

    def _hold(self) -> Process:
        m = self.m
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
            due = self.wheel.pop_due(int(env.now * 1000))
            self.waiting -= len(due)
            # started one after another: each quantum of the batch is timed when it ends
            per_q = max(1, int(m.cpu.quantum_s / m.start_s)) if m.start_s > 0 else len(due)
            for i in range(0, len(due), per_q):
                part = due[i : i + per_q]
                t0 = env.now
                yield env.process(m.cpu.run(self.name, len(part) * m.start_s, self.gil))
                step = (env.now - t0) / len(part)
                for k, r in enumerate(part):
                    at = t0 + (k + 1) * step
                    if at > self.confirmed_until[r] - m.fence_margin_s:
                        m.give_back(r)
                        self.in_flight -= 1
                        continue
                    m.started[r] = at
                    self.succeeded.append(r)
            self.starting = False
            if not self.success_ready.triggered:
                self.success_ready.succeed()

    def _finish(self) -> Process:
        m, c = self.m, self.m.costs
        env = m.env
        while True:
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
            yield env.process(m.cpu.run(self.name, n * c.worker_finish / 2, self.gil))
            m.finish_verdict()
            for r in batch:
                m.finished[r] = env.now
                self.confirmed_until.pop(r, None)
            self.in_flight -= n

    def _heartbeat(self, phase_s: float) -> Process:
        m, c = self.m, self.m.costs
        env = m.env
        yield env.timeout(phase_s)
        while True:
            n = self.in_flight
            if n:
                sent = env.now
                # an update of each held run's lease: priced as a finish
                yield env.process(m.cpu.run(self.name, n * c.worker_finish, self.gil))
                yield env.process(m.cpu.run("postgres", n * c.pg_finish))
                for r in list(self.confirmed_until):
                    self.confirmed_until[r] = sent + m.ttl_s
            yield env.timeout(m.sc["heartbeat_s"])


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
        self.env = simpy.Environment(initial_time=-float(sc["lead_s"]))
        self.costs = Costs.from_profile(profile)
        self.cpu = Cpu(self.env, int(sc["cores"]), float(sc["quantum_ms"]) / 1000)
        ahead = float(sc["scan_ahead_s"])
        self.ahead_ms = defaults.SCAN_AHEAD_MS if ahead < 0 else int(ahead * 1000)
        self.ttl_s = float(sc["run_ttl_s"])
        self.fence_margin_s = min(6.0, self.ttl_s / 4)  # kit.worker: KILL_GRACE_S + 1, ttl/4
        self.sched_gil = simpy.Resource(self.env, 1)
        self.scanned = 0
        self.committed: deque[int] = deque()
        self.committed_ev = self.env.event()
        self.published = np.full(n, np.nan)
        self.claimed = np.full(n, np.nan)
        self.started = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.given_back = 0
        self.verdicts: set[str] = set()
        prefetch = int(sc["prefetch"]) or -(-n // w)
        period = float(sc["heartbeat_s"])
        self.workers = [StormWorker(self, i, prefetch, rnd.uniform(0, period)) for i in range(w)]
        self.scan_phase_s = rnd.uniform(0, float(sc["scan_period_s"]))
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
            rate = c.at_t / self.at_t_window_s
            threads = math.ceil(rate)
            for _ in range(threads):
                self.env.process(self._at_t(rate / threads))

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

    def _at_t(self, rate: float, period_s: float = 0.01) -> Process:
        """What the rest of the machine (the benchmark's poll and its backend, the broker,
        the scheduler, the workers' other threads, other stacks) takes from T on, while
        the hold threads start their runs: the CPU measured in that window at T, taken in
        slices at its measured rate and competing for the cores like everything else."""
        env = self.env
        yield env.timeout(-env.now)
        left = rate * self.at_t_window_s
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
        env, c, sc = self.env, self.costs, self.sc
        yield env.timeout(self.scan_phase_s)
        while True:
            _lo, hi = dispatch.scan_window(int(env.now * 1000), self.ahead_ms)
            while hi >= 0 and self.scanned < self.n:  # the burst's second is in the window
                b = min(int(sc["scan_batch_rows"]), self.n - self.scanned)
                yield env.process(self.cpu.run("scheduler", b * c.sched_scan, self.sched_gil))
                yield env.process(self.cpu.run("postgres", b * c.pg_scan))
                self.committed.extend(range(self.scanned, self.scanned + b))
                self.scanned += b
                if not self.committed_ev.triggered:
                    self.committed_ev.succeed()
            yield env.timeout(float(sc["scan_period_s"]))

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
            yield env.process(self.cpu.run("scheduler", k * c.sched_publish, self.sched_gil))
            env.process(self._broker(chunk, w))  # the producer does not wait for the broker

    def _broker(self, chunk: list[int], w: int) -> Process:
        """The broker appends the chunk and serves it to the consumers (its own threads)."""
        yield self.env.process(self.cpu.run("broker", len(chunk) * self.costs.broker))
        self.published[chunk] = self.env.now
        for i in range(w):  # keyed by job: an even share per worker's partitions
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
            "start_lag_s": [pct(lag, 0.5), pct(lag, 0.99), pct(lag, 1.0)],
            "all_claimed_s": None if claimed.size < self.n else round(float(claimed.max()), 3),
            "all_succeeded_s": None if fin.size < self.n else round(float(fin.max()), 3),
            "cpu_s": {k: round(v, 2) for k, v in sorted(self.cpu.busy.items())},
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

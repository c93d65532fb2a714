"""The model: SimPy processes for scheduler nodes, the reaper, faults and the worker
pool tick, over a workload generated a minute at a time. Every decision is a `kit.core`
call: partition hashing and assignment, partition leases and fencing, the scan window,
the scan's decisions (`kit.core.trigger.decide_scan`: lateness past the node's misfire
grace, misfire and overlap policies), the timer wheel, jitter, retry backoff and
run-lease transitions.

A run's life in the model, one function per step of the kit's life of a run:
`SchedulerNode.scan` (due triggers read, fenced, inserted, decided by decide_scan,
held in the timer wheel), `SchedulerNode.dispatch_due` (published at the second),
`Model.claim` (a worker's claim of a delivery), `WorkerPool` (execution in a slot),
`Model.record_finish` (finish, retry or dead letter), `Reaper` (recovery).

Where one core call per run or per partition would not fit the time budget, the core
is asked once per equivalence class and its verdict applied to the class: claims and
finishes on the normal path (same status, event and attempt), partition lease renewals
and fencing (same owner, epoch, expiry and believed epoch; see sim.partition_table).
Runs off the normal path (failures, redeliveries, crashes, expiries) get one call each.
The scan's decisions are asked once per class of jobs (`SchedulerNode._decide`).

Randomness: one stream per purpose (sim.draws, sim.workload, one generator per fault),
keyed rather than sequential where the order of asking depends on the run (a run
attempt's duration, failure and retry jitter), so runs with and without a fault are
paired: they differ only where the fault reached.

Memory: runs live in `sim.runs.RunTable` only between their generation and their
retirement (`Model.retire`), when their statistics are folded into `sim.stats`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from kit.core import defaults, dispatch, jitter, leases, partitions, policies, retry, trigger
from kit.core.schedule import OneOffSchedule
from kit.core.timeutil import from_epoch_ms
from sim.draws import KeyedRandom, RunDraws
from sim.faults import FAULT_KINDS, Fault, Windows, parse_faults
from sim.partition_table import LeaseClasses, PartitionTable
from sim.resources import ATTEMPT, END, REAPED, RUN, START, Database, WorkerPool
from sim.runs import (
    ACTIVE,
    CANCELLED,
    DEAD,
    DISPATCHED,
    LOST,
    NONE,
    PENDING,
    RETRY,
    RUNNING,
    SKIPPED,
    SUCCEEDED,
    TERMINAL,
    RunTable,
)
from sim.scenario import scan_cost_keys
from sim.stats import RunStats
from sim.workload import SCHEDULE_KINDS, WINDOW_MS, TaskDurations, WorkloadStream

# A SimPy process: a generator of the events it waits on.
Process = Generator[simpy.Event, Any, None]

CORE_STATUS = {
    PENDING: leases.RunStatus.pending,
    DISPATCHED: leases.RunStatus.pending,  # published, not claimed: the kit calls it pending
    RUNNING: leases.RunStatus.running,
    SUCCEEDED: leases.RunStatus.succeeded,
    RETRY: leases.RunStatus.retry_scheduled,
    DEAD: leases.RunStatus.dead,
    SKIPPED: leases.RunStatus.skipped,
    LOST: leases.RunStatus.pending,
    CANCELLED: leases.RunStatus.cancelled,
}
IS_TERMINAL = np.zeros(16, bool)
IS_TERMINAL[list(TERMINAL)] = True
IS_ACTIVE = np.zeros(16, bool)
IS_ACTIVE[list(ACTIVE)] = True
TICK_MS = 1000
RETIRE_EVERY_S = 60.0

# random streams of a seed (the workload's are in sim.workload), one per purpose, so
# that drawing more of one (a fault's victims) shifts no draw of another (a run's
# duration): service draws and retry jitter are keyed by run and attempt (sim.draws),
# each fault has its own generator
STREAM_SERVICE, STREAM_FAULTS, STREAM_RETRY = 1, 2, 3
# slots of a run attempt's service draws (sim.draws.RunDraws)
SLOT_NORMAL, SLOT_UNIFORM, SLOT_FAIL = 0, 2, 3

# what a scan's decision made of one fire (kit.core.trigger.PlannedRun)
FIRE, QUEUE, SKIP_MISFIRE, SKIP_OVERLAP = range(4)


class Model:
    def __init__(
        self,
        scenario: dict[str, Any],
        profile: dict[str, float],
        seed: int,
        keep_samples: bool = False,
    ) -> None:
        self.s = scenario
        self.p = profile
        self.seed = seed
        self.draws = RunDraws(seed, STREAM_SERVICE)  # durations, failures
        self.rand = KeyedRandom(seed, STREAM_RETRY)  # kit.core.retry's jitter
        # the fleet runs a lead-in before time 0 (the scenario's start), so the first
        # minute meets scans already ahead; runs due in the lead-in are audited, not timed
        self.lead_ms = int(float(scenario["lead_in_s"]) * 1000)
        self.env = simpy.Environment(initial_time=-self.lead_ms / 1000)
        self.faults: list[Fault] = parse_faults(scenario["faults"])
        poison = [(f.at_ms, f.share) for f in self.faults if f.kind == "poison_jobs"]
        self.stream = WorkloadStream(scenario, seed, poison)
        self.duration_ms = self.stream.duration_ms
        # what a scan costs per fire of each schedule kind (SCHEDULE_KINDS order): the
        # database's (trigger advance + run insert) and the node's own CPU
        costs = [scan_cost_keys(k) for k in SCHEDULE_KINDS]
        self.scan_db_per_fire = np.array([profile[a] + profile[i] for _, a, i in costs])
        self.scan_cpu_per_fire = np.array([profile[c] for c, _, _ in costs])
        used = self.stream.kinds
        self.scan_one_kind = SCHEDULE_KINDS.index(used.pop()) if len(used) == 1 else None
        self.runs = RunTable(1 << 22)
        self.stats = RunStats(self.duration_ms, keep_samples)
        self.counters: dict[str, int] = {
            "fenced_writes_refused": 0,
            "lease_renewals_refused": 0,
            "insert_conflicts": 0,
            "misfire_skipped": 0,
            "overlap_skipped": 0,
            "overlap_queued": 0,
            "overlap_cancelled": 0,
            "redeliveries_deduplicated": 0,
            "claims_refused": 0,
            "heartbeats_refused": 0,
            "finishes_refused": 0,
            "leases_expired": 0,
            "reaper_republished": 0,
            "retries_published": 0,
            "db_statements": 0,
        }
        self.lease_events: list[tuple[int, int, str | None]] = []
        self._verdicts: set[tuple[str, leases.RunStatus]] = set()
        self._fail_verdicts: dict[tuple[int, bool], leases.RunLease] = {}
        self.events = 0  # model events: SimPy steps plus per-run dispatch/take/finish
        self.end_s = 0.0
        self.simpy_events = 0
        self._build_policies()
        self._build_infra()

    # -- construction ---------------------------------------------------------------------

    def _build_policies(self) -> None:
        w = self.s["workload"]
        self.retry_policy = retry.RetryPolicy.parse(w["retry"])
        self.misfire = policies.MisfirePolicy(
            kind=w["misfire"], deadline_s=int(w["misfire_deadline_s"])
        )
        self.overlap = policies.OverlapPolicy.parse(w["overlap"])
        # a job that limits overlap is judged on its busy runs, as the kit's scan counts
        # them (kit.store runs_active_counts): its latest fired run, any other it fired
        # beside it (several fires in one scan), and its queued runs
        self.limits_overlap = self.overlap is not policies.OverlapPolicy.allow
        self.last_run_of_job = np.full(
            max(self.stream.jobs, 1) if self.limits_overlap else 1, -1, np.int64
        )
        self.more_active: dict[int, list[int]] = {}
        self.queued: dict[int, deque[int]] = {}  # overlap 'queue': held back, oldest first
        self.n_cancelled = 0  # runs cancelled by overlap 'replace' (checked when > 0)
        # the scan's decisions, one kit.core.trigger.decide_scan call per class of jobs
        # (see SchedulerNode._decide): class -> (outcome per fire, cancel active runs)
        self.scan_verdicts: dict[tuple[int, ...], tuple[np.ndarray, bool]] = {}
        # tests: (now, job, fire, outcome) of every scan decision, when set to a list
        self.decision_log: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] | None = None
        self._key0 = np.array([tp.key0 for tp in self.stream.templates], np.int64)
        names = self.stream.class_names
        self.fail_p = np.array([float(w["classes"][c].get("fail_p", 0.0)) for c in names])
        self.durations = TaskDurations(self.s, names)
        ls = self.s["leases"]
        self.partition_ttl_ms = int(float(ls["partition_ttl_s"]) * 1000)
        # the kit's scheduler node passes its own grace to the scan (NodeConfig: from its
        # lease TTL, heartbeat and scan period); the model has the kit's heartbeat and
        # scan period, and the scenario's lease TTL
        self.misfire_grace_ms = defaults.misfire_grace_ms(
            self.partition_ttl_ms, defaults.NODE_HEARTBEAT_MS, defaults.SCAN_PERIOD_MS
        )
        self.renew_ms = int(float(ls["renew_s"]) * 1000)
        self.run_ttl_ms = int(float(ls["run_ttl_s"]) * 1000)
        self.heartbeat_ms = int(float(ls["heartbeat_s"]) * 1000)
        self.grace_ms = int(float(ls["unclaimed_grace_s"]) * 1000)
        self.scan_batch_rows = int(ls["scan_batch_rows"])
        ahead = float(ls["scan_ahead_s"])
        self.scan_ahead_ms = None if ahead < 0 else int(ahead * 1000)
        # the drain before a rebalance release must cover the scan-ahead window
        self.window_ms = dispatch.scan_window(0, **self._ahead())[1]

    def _ahead(self) -> dict[str, int]:
        return {} if self.scan_ahead_ms is None else {"scan_ahead_ms": self.scan_ahead_ms}

    def _build_infra(self) -> None:
        f = self.s["fleet"]

        def by_kind(kind: str) -> list[Fault]:
            return [x for x in self.faults if x.kind == kind]

        self.db = Database(self.env, int(f["db_connections"]), Windows(by_kind("db_stall")))
        self.broker = Windows(by_kind("broker_outage"))
        active_workers = min(int(f["workers"]), int(f["kafka_partitions"]))
        self.pool = WorkerPool(self, active_workers, int(f["concurrency"]))
        self.n_parts = int(f["partitions"])
        names = [f"n{i}" for i in range(int(f["nodes"]))]
        self.plt = PartitionTable(self.n_parts, names)
        self.members: dict[str, leases.PartitionLease] = {}
        self.advanced_to = np.full(self.n_parts, -self.lead_ms - 1, np.int64)
        self.nodes = [SchedulerNode(self, i) for i in range(len(names))]
        self.reaper = Reaper(self)
        self._assignment_key: tuple[str, ...] = ()
        self._assignment: dict[int, str] = {}
        self.assignment_version = 0
        self._want = np.full(self.n_parts, -1, np.int16)
        # the fleet has been running: members registered, partitions assigned and held
        now = -self.lead_ms
        for node in self.nodes:
            self.members[node.name] = leases.acquire_partition(
                None, node.member_id, node.name, now, self.partition_ttl_ms
            ).lease
        self.assignment(now)
        for p in range(self.n_parts):
            self.nodes[int(self._want[p])].take(p, now)
        kinds = list(FAULT_KINDS)
        rank: dict[str, int] = {}
        for fault in self.faults:
            # a fault's own generator, keyed by its kind and its rank among the faults of
            # that kind: adding a fault of another kind leaves its draws as they were
            nth = rank[fault.kind] = rank.get(fault.kind, -1) + 1
            if fault.kind != "poison_jobs":
                key = [self.seed, STREAM_FAULTS, kinds.index(fault.kind), nth]
                self.env.process(self._inject(fault, np.random.default_rng(key)))
        self.env.process(self._pool_ticks())

    # -- time and helpers ---------------------------------------------------------------

    def now_ms(self) -> float:
        return self.env.now * 1000.0

    def assignment(self, now_ms: float) -> np.ndarray:
        """Owner (node index) each partition should have: kit.core.partitions.
        assign_partitions over the live members (cached while the membership is
        unchanged: the function is deterministic)."""
        live = tuple(n.name for n in self.nodes if self.members[n.name].live(int(now_ms)))
        if live != self._assignment_key:
            current = self.plt.owners(int(now_ms), live)
            self._assignment = partitions.assign_partitions(self.n_parts, list(live), current)
            self._assignment_key = live
            self.assignment_version += 1
            self._want[:] = -1
            for p, owner in self._assignment.items():
                self._want[p] = int(owner[1:])
        return self._want

    def log_lease(self, lease: leases.PartitionLease) -> None:
        self.lease_events.append((lease.partition_id, lease.epoch, lease.owner))

    def publish_visible(self, publish_done_ms: np.ndarray) -> np.ndarray:
        """When a published message can be taken by a worker (broker outages hold it)."""
        lat = (self.p["kafka_publish_latency_s"] + self.p["kafka_consume_latency_s"]) * 1000
        v = publish_done_ms + lat
        return self.broker.after_array(v) if self.broker else v

    def fires_by_kind(self, rows: np.ndarray) -> np.ndarray:
        """How many of these runs (ids) are fires of each schedule kind (SCHEDULE_KINDS)."""
        if self.scan_one_kind is not None:  # one kind: no need to look
            out = np.zeros(len(SCHEDULE_KINDS), np.int64)
            out[self.scan_one_kind] = rows.size
            return out
        t = self.runs
        kinds = t.kind[rows - t.origin]
        counted: np.ndarray = np.bincount(kinds, minlength=len(SCHEDULE_KINDS))
        return counted

    def generate_through(self, t_ms: float) -> None:
        """Generate workload windows until every run due up to t_ms exists."""
        st = self.stream
        while st.generated_to <= t_ms and st.generated_to < self.duration_ms:
            a = st.generated_to
            self.runs.append(st.generate(a, a + WINDOW_MS))
            st.generated_to = a + WINDOW_MS

    # -- the worker side: claim, execute, finish --------------------------------------

    def service(
        self, run: np.ndarray, att: np.ndarray, vis: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-run claim latency, slot hold time and outcome for the runs being served;
        duration and outcome are the attempt's own draws (sim.draws), whatever order
        the runs come in."""
        t = self.runs
        ix = run - t.origin
        cls = t.cls[ix]
        claim = self.p["claim_s"] * 1000 + self.db.claim_delay_ms
        claim_ms = np.full(run.size, claim)
        d = self.draws
        normal = d.normal(run, att, SLOT_NORMAL) if self.durations.any_lognormal else run
        uniform = d.uniform(run, att, SLOT_UNIFORM) if self.durations.any_exponential else run
        dur = self.durations.draw(cls, normal, uniform)
        ok = (d.uniform(run, att, SLOT_FAIL) >= self.fail_p[cls]) & ~t.poison[ix]
        svc = claim_ms + dur + self.p["finish_s"] * 1000
        if self.db.stalls:  # a claim attempted in a stall waits for its end
            stall_wait = self.db.stalls.after_array(vis) - vis
            claim_ms = claim_ms + stall_wait
            svc = svc + stall_wait
        offered = run.size * (self.p["db_claim_demand_s"] + self.p["db_finish_demand_s"])
        self.db.charge_workers(offered, TICK_MS / 1000)
        return claim_ms, svc, ok

    def claim(
        self, run: np.ndarray, att: np.ndarray, redel: np.ndarray, vis: np.ndarray
    ) -> np.ndarray:
        """A worker's claim of each delivery (kit.core.leases.claim_run): the normal path
        by one verdict for the class, deliveries off it one call each."""
        keep = np.ones(run.size, bool)
        normal = redel == 0
        t = self.runs
        if self.n_cancelled and normal.any():  # overlap 'replace' cancelled some of them
            gone = normal & (t.status[run - t.origin] == CANCELLED)
            if gone.any():
                self._class_verdict("claim", leases.RunStatus.cancelled, accepted=False)
                keep[gone] = False
                self.counters["claims_refused"] += int(gone.sum())
                normal &= ~gone
        if normal.any():
            self._class_verdict("claim", leases.RunStatus.pending)
        if (normal | ~keep).all():
            return keep
        for i in np.flatnonzero(~normal & keep):
            r, a, kind = int(run[i]), int(att[i]), int(redel[i])
            if kind == 2:  # inject_duplicate: the bug skips the claim
                continue
            st = int(t.status[r - t.origin])
            if st == DISPATCHED:  # the first delivery is still queued: it wins the claim
                keep[i] = False
                self.counters["redeliveries_deduplicated"] += 1
                continue
            lease = leases.RunLease(
                str(r), int(t.attempt[r - t.origin]), CORE_STATUS.get(st, leases.RunStatus.pending)
            )
            tr = leases.claim_run(lease, "w", f"t{r}.{a}", a, int(vis[i]), self.run_ttl_ms)
            if not tr.accepted:
                keep[i] = False
                self.counters["claims_refused"] += 1
        return keep

    def _class_verdict(self, event: str, status: leases.RunStatus, accepted: bool = True) -> None:
        """The core's verdict for a whole equivalence class of runs (asked once per
        model: the core is pure and the class's inputs do not change); the model applies
        `accepted` to the class, so the core must agree."""
        if (event, status) in self._verdicts:
            return
        self._verdicts.add((event, status))
        run = leases.RunLease("class", 1, status, token="t", worker="w", expires_at_ms=1)
        if event == "claim":
            tr = leases.claim_run(run, "w", "t", 1, 0, self.run_ttl_ms)
        elif event == "cancel":
            tr = leases.cancel_run(run)
        else:
            tr = leases.finish_run(run, "t", event == "finish_ok", 0, None)
        if tr.accepted != accepted:
            raise RuntimeError(
                f"kit.core {'refused' if accepted else 'accepted'} a {event} of a "
                f"{status.value} run: {tr.reason}"
            )

    def mark_queued(self, run: np.ndarray) -> None:
        self.events += run.size

    def record_start(
        self, run: np.ndarray, att: np.ndarray, vis: np.ndarray, take: np.ndarray, start: np.ndarray
    ) -> None:
        t = self.runs
        ix = run - t.origin
        if self.n_cancelled:  # cancelled after its claim (overlap 'replace'): it runs on,
            st = t.status[ix]  # but stays cancelled and its finish is refused
            t.status[ix] = np.where(st == CANCELLED, CANCELLED, RUNNING)
        else:
            t.status[ix] = RUNNING
        again = bool((t.executions[ix] > 0).any())  # a re-run or a duplicate among them
        if not again and int(att.max()) == 1:  # the usual batch: first starts only
            t.executions[ix] = 1
            t.start[ix] = start
            t.wait[ix] = take - vis
            return
        _add_one(t.executions, ix, again)
        first = np.isnan(t.start[ix])
        f = ix[first]
        t.start[f] = start[first]
        t.wait[f] = (take - vis)[first]
        t.attempt[ix] = np.maximum(t.attempt[ix], att)

    def record_finish(self, fin: dict[str, np.ndarray]) -> None:
        t = self.runs
        run, ok, reaped = fin["run"], fin["ok"], fin["reaped"]
        ix = run - t.origin
        self.events += run.size
        _add_one(t.effects, ix[ok], bool((t.executions[ix] > 1).any()))
        if self.n_cancelled:  # cancelled while running (overlap 'replace'): its lease is
            gone = t.status[ix] == CANCELLED  # cleared, so its finish is refused
            if gone.any():
                self._class_verdict("finish_ok", leases.RunStatus.cancelled, accepted=False)
                self.counters["finishes_refused"] += int(gone.sum())
                reaped = reaped | gone
                ok = ok & ~gone
        normal_ok = ok & ~reaped
        if normal_ok.any():
            self._class_verdict("finish_ok", leases.RunStatus.running)
            t.status[ix[normal_ok]] = SUCCEEDED
            if self.queued:
                self.release_queued(run[normal_ok], fin["end"][normal_ok])
        for i in np.flatnonzero(reaped & (fin["reaped"] > 0)):  # re-queued: a stale token
            r = int(run[i])
            status = CORE_STATUS.get(int(t.status[r - t.origin]), leases.RunStatus.pending)
            lease = leases.RunLease(str(r), int(t.attempt[r - t.origin]), status, token="current")
            tr = leases.finish_run(
                lease, f"t{r}.{int(fin['attempt'][i])}", bool(ok[i]), int(fin["end"][i]), None
            )
            if not tr.accepted:
                self.counters["finishes_refused"] += 1
        failed = np.flatnonzero(~ok & ~reaped)
        if failed.size:
            self._failures(run[failed], fin["attempt"][failed], fin["end"][failed])

    def _failures(self, run: np.ndarray, att: np.ndarray, end: np.ndarray) -> None:
        """Failed attempts: each run's retry time from kit.core.retry (its own jitter
        draw), the finish transition from kit.core.leases once per class (attempt, and
        whether a retry time was given: nothing else of the run enters the rule)."""
        t = self.runs
        policy, rand = self.retry_policy, self.rand
        retry_at = [
            retry.next_retry_at_ms(int(e), policy, int(a), rand.at(int(r), int(a)))
            for r, e, a in zip(run.tolist(), end.tolist(), att.tolist(), strict=True)
        ]
        verdicts = self._fail_verdicts  # pure core, same class inputs: kept per model
        retries = self.reaper.retries
        for r, a, at, e in zip(run.tolist(), att.tolist(), retry_at, end.tolist(), strict=True):
            key = (a, at is not None)
            if key not in verdicts:
                lease = leases.RunLease("class", a, leases.RunStatus.running, token="t")
                verdicts[key] = leases.finish_run(lease, "t", False, 0, at).run
            after = verdicts[key]
            if after.status is leases.RunStatus.dead:
                t.status[r - t.origin] = DEAD
                if self.queued:
                    self.release_queued(np.array([r], np.int64), np.array([e], np.float64))
            else:
                t.status[r - t.origin] = RETRY
                assert at is not None  # the core schedules a retry only when given its time
                heapq.heappush(retries, (at, r, after.attempt))

    # -- overlap: queued and cancelled runs -------------------------------------------

    def busy_runs(self, j: int) -> int:
        """Runs of job `j` that keep it busy (kit.core.leases.BUSY: pending, running,
        retry_scheduled), as the kit's scan counts them for the overlap policy."""
        t = self.runs

        def busy(r: int) -> bool:
            return r >= t.lo and bool(IS_ACTIVE[t.status[r - t.origin]])

        n = int(busy(int(self.last_run_of_job[j])))
        more = self.more_active.get(j)
        if more is not None:
            more[:] = [r for r in more if busy(r)]
            n += len(more)
            if not more:
                del self.more_active[j]
        return n + len(self.queued.get(j, ()))

    def release_queued(self, run: np.ndarray, end_ms: np.ndarray) -> None:
        """Overlap 'queue': the worker that finishes a job's run publishes the job's
        oldest queued run (kit/worker), visible after the publish."""
        t = self.runs
        jobs = t.job[run - t.origin]
        for r, j, e in zip(run.tolist(), jobs.tolist(), end_ms.tolist(), strict=True):
            q = self.queued.get(j)
            if q is None or int(self.last_run_of_job[j]) != r:
                continue
            nxt = q.popleft()
            if not q:
                del self.queued[j]
            self.last_run_of_job[j] = nxt
            x = nxt - t.origin
            t.status[x] = DISPATCHED
            t.dispatch[x] = e
            self.pool.deliver(self.publish_visible(np.array([e])), np.array([nxt]), 1)

    def cancel_active(self, j: int) -> None:
        """Overlap 'replace': the job's busy runs are cancelled before the new fire is
        inserted (kit.store runs_cancel_active); a cancelled run is not claimed, its
        finish is refused, its retry never comes. A running task keeps its slot until
        its end (the kit's worker learns at its next heartbeat)."""
        t = self.runs
        for r in [int(self.last_run_of_job[j]), *self.more_active.pop(j, ())]:
            if r < t.lo or not IS_ACTIVE[t.status[r - t.origin]]:
                continue
            st = int(t.status[r - t.origin])
            self._class_verdict("cancel", CORE_STATUS[st])
            t.status[r - t.origin] = CANCELLED
            self.n_cancelled += 1
            self.counters["overlap_cancelled"] += 1

    def _pool_ticks(self) -> Process:
        while True:
            yield self.env.timeout(TICK_MS / 1000)
            self.events += 1
            self.pool.tick(self.now_ms())

    # -- faults ---------------------------------------------------------------------------

    def _inject(self, f: Fault, rng: np.random.Generator) -> Process:
        """One fault; its victims come from its own generator (`rng`), so adding or
        removing another fault draws none of its numbers."""
        env = self.env
        yield env.timeout(max(0.0, f.at_ms / 1000 - env.now))
        nodes = self.nodes if f.node < 0 else [self.nodes[f.node % len(self.nodes)]]
        if f.kind == "scheduler_crash":
            for n in nodes:
                n.crash()
            yield env.timeout(f.duration_ms / 1000)
            for n in nodes:
                n.restart()
        elif f.kind == "scheduler_partitioned":
            for n in nodes:
                n.cut = True
            yield env.timeout(f.duration_ms / 1000)
            for n in nodes:
                n.heal()
        elif f.kind == "clock_skew":
            for n in nodes:
                n.skew_ms = f.skew_ms
            if f.duration_ms:
                yield env.timeout(f.duration_ms / 1000)
                for n in nodes:
                    n.skew_ms = 0
        elif f.kind == "worker_crash":
            self._crash_workers(f, rng)
        elif f.kind == "db_stall":
            yield env.timeout(f.duration_ms / 1000)
            self._expire_after_stall(f)
        elif f.kind == "inject_drop":
            nodes[0].drop_next = f.count
        elif f.kind == "inject_duplicate":
            t = self.runs
            done = np.flatnonzero(t.status[t.rows(t.lo, t.hi)] == SUCCEEDED) + t.lo
            pick = rng.choice(done, min(f.count, done.size), replace=False)
            self.pool.deliver(
                np.full(pick.size, self.now_ms()), pick, t.attempt[pick - t.origin], 2
            )

    def _crash_workers(self, f: Fault, rng: np.random.Generator) -> None:
        t = self.now_ms()
        ids = rng.choice(self.pool.workers, min(f.workers, self.pool.workers), replace=False)
        victims = self.pool.crash_workers(t, np.sort(ids), t + f.duration_ms)
        start = victims["start"]
        beats = np.floor(np.maximum(t - start, 0) / self.heartbeat_ms) * self.heartbeat_ms
        expiry = start + beats + self.run_ttl_ms
        for e, r, a in zip(
            expiry.tolist(), victims["run"].tolist(), victims["attempt"].tolist(), strict=True
        ):
            heapq.heappush(self.reaper.expiring, (e, r, a))

    def _expire_after_stall(self, f: Fault) -> None:
        """Heartbeats could not reach the database during the stall: leases that ran out
        meanwhile are refused at the first heartbeat and re-queued by the reaper, while
        the task itself keeps running (at-least-once: its effect may happen twice)."""
        a, b = f.at_ms, f.end_ms
        for blk in self.pool.running_blocks():
            start, end, reaped = blk[:, START], blk[:, END], blk[:, REAPED]
            beats = np.floor(np.maximum(a - start, 0) / self.heartbeat_ms) * self.heartbeat_ms
            expiry = start + beats + self.run_ttl_ms
            hit = (start < a) & (expiry < b) & (end > b) & (reaped == 0)
            for i in np.flatnonzero(hit):
                r, att = int(blk[i, RUN]), int(blk[i, ATTEMPT])
                token = f"t{r}.{att}"
                lease = leases.RunLease(
                    str(r),
                    att,
                    leases.RunStatus.running,
                    token=token,
                    worker="w",
                    expires_at_ms=int(expiry[i]),
                )
                if not leases.heartbeat_run(lease, token, b, self.run_ttl_ms).accepted:
                    self.counters["heartbeats_refused"] += 1
                    blk[i, REAPED] = 1.0
                    heapq.heappush(self.reaper.expiring, (float(expiry[i]), r, att))

    # -- running ---------------------------------------------------------------------------

    def run(self, progress: Callable[[float, float], None] | None = None) -> None:
        """Safety phase (workload and faults), then liveness phase until drained; runs
        are retired into the statistics every simulated minute, and all at the end."""
        end_s = float(self.s["duration_s"])
        limit_s = end_s + float(self.s["drain_s"])
        step = 10.0
        t = self.env.now
        next_retire = t + RETIRE_EVERY_S
        while t < limit_s:
            t = min(t + step, limit_s)
            self.env.run(until=t)
            if t >= next_retire:
                self.retire()
                next_retire += RETIRE_EVERY_S
            if progress:
                progress(t, limit_s)
            if t >= end_s and not self._work_left():
                break
        self.end_s = self.env.now
        self.retire(final=True)
        self.simpy_events = next(self.env._eid)  # events SimPy scheduled (a private counter)

    def _work_left(self) -> bool:
        if self.pool.busy() or self.reaper.busy() or self.queued:
            return True
        if any(len(n.wheel) for n in self.nodes):
            return True
        if self.stream.generated_to < self.duration_ms:
            return True
        t = self.runs
        if t.live == 0:
            return False
        last = int(t.fire[t.hi - 1 - t.origin])
        return bool(np.any(self.advanced_to < last))

    def held_ids(self) -> np.ndarray:
        """Ids of the runs some part of the system holds (a wheel, the queue, a worker
        slot, the reaper), sorted; read without disturbing any of them."""
        parts: list[np.ndarray] = []
        for n in self.nodes:
            parts += list(n.in_wheel.values())
        parts += self.pool.held()
        parts += self.reaper.pending_runs()
        parts += [np.fromiter(q, np.int64) for q in self.queued.values()]
        if not parts:
            return np.empty(0, np.int64)
        return np.unique(np.concatenate([np.asarray(p, np.int64) for p in parts]))

    def retire(self, final: bool = False) -> None:
        """Fold into the statistics every run that can no longer change: terminal and
        held nowhere, in whole minutes of fire time from the oldest. A run found
        nowhere that is not terminal will never run: it is marked LOST (the auditor's
        'dropped'). At the end everything is folded; runs still held are in flight."""
        t = self.runs
        a = t.lo
        if t.live == 0:
            return
        b = t.hi if final else t.first_after(int(self.advanced_to.min()))
        if b <= a:
            return
        sl = t.rows(a, b)
        st = t.status[sl]
        nt = np.flatnonzero(~IS_TERMINAL[st])
        held = self.held_ids()
        cut = b
        in_flight = None
        if nt.size:
            ids = nt + a
            ix = ids - t.origin
            untriggered = (t.status[ix] == NONE) & (t.fire[ix] > self.advanced_to[t.part[ix]])
            pos = np.searchsorted(held, ids)
            in_held = np.zeros(ids.size, bool)  # nothing held: held[-1] would crash
            if held.size:
                in_held = (pos < held.size) & (held[np.minimum(pos, held.size - 1)] == ids)
            stays = untriggered | in_held
            t.status[ix[~stays]] = LOST
            if final:
                in_flight = np.zeros(b - a, bool)
                in_flight[nt[stays]] = True
            elif stays.any():
                cut = int(ids[stays][0])
        if not final:
            h = held[np.searchsorted(held, a) :]
            if h.size:
                cut = min(cut, int(h[0]))
            if cut < t.hi:  # back to the start of the minute it falls in
                minute = int(t.fire[cut - t.origin]) // 60_000 * 60_000
                cut = t.first_at_or_after(minute)
            if cut <= a:
                return
        ids = np.arange(a, cut, dtype=np.int64)
        cols = t.take(a, cut)
        self.stats.fold(
            ids, cols, in_flight[: cut - a] if in_flight is not None else None, self.now_ms()
        )
        t.lo = cut


_NO_ROWS = np.empty(0, np.int64)


def _add_one(col: np.ndarray, ix: np.ndarray, maybe_twice: bool) -> None:
    """col[ix] += 1, counting an index as often as it appears. np.add.at is slow, and a
    batch can hold a run twice only when the run executes more than once (a duplicate
    delivery, a re-run after an expired lease): the caller says when that may be."""
    if maybe_twice and ix.size > 1:
        s = np.sort(ix)
        if (s[1:] == s[:-1]).any():
            np.add.at(col, ix, 1)
            return
    col[ix] += 1


class SchedulerNode:
    """One scheduler node: partition leases, once-a-second scan ahead, a timer wheel."""

    def __init__(self, model: Model, index: int) -> None:
        self.m = model
        self.index = index
        self.name = f"n{index}"
        self.member_id = -1 - index
        self.alive = True
        self.cut = False
        self.skew_ms = 0
        self.epoch = np.zeros(model.n_parts, np.int64)  # believed epoch per partition
        self.owned = np.zeros(model.n_parts, bool)
        self.draining: dict[int, float] = {}
        self._scan_mask: np.ndarray | None = None  # owned and not draining (cached)
        self._scan_parts = np.empty(0, np.int64)
        self._owned_parts: np.ndarray | None = None
        self._owned_version = 0
        self._settled: tuple[int, int] = (-1, -1)
        self.classes = LeaseClasses(model.plt)
        self.wheel: dispatch.TimerWheel[np.ndarray] = dispatch.TimerWheel()
        self.in_wheel: dict[int, np.ndarray] = {}  # what the wheel holds, by id(chunk)
        self.producer_ms = -math.inf  # when the node's producer is free (nothing sent yet)
        self.unmarked: list[np.ndarray] = []
        self.drop_next = 0
        self.next_lease_ms = model.now_ms() + model.renew_ms
        model.env.process(self._scanner())
        model.env.process(self._dispatcher())

    # -- leases -----------------------------------------------------------------------

    def _changed(self) -> None:
        """`owned` or `draining` changed: drop what was derived from them."""
        self._scan_mask = None
        self._owned_parts = None
        self._owned_version += 1

    def scanning(self) -> tuple[np.ndarray, np.ndarray]:
        """The partitions this node scans: owned and not being handed over."""
        if self._scan_mask is None:
            mask = self.owned.copy()
            for p in self.draining:
                mask[p] = False
            self._scan_mask = mask
            self._scan_parts = np.flatnonzero(mask)
        return self._scan_mask, self._scan_parts

    def take(self, p: int, now_ms: float) -> bool:
        m = self.m
        d = leases.acquire_partition(m.plt.get(p), p, self.name, int(now_ms), m.partition_ttl_ms)
        if d.granted:
            if not self.owned[p] or d.lease.epoch != self.epoch[p]:
                m.log_lease(d.lease)
            m.plt.put(p, d.lease)
            self.owned[p] = True
            self.epoch[p] = d.lease.epoch
            self._changed()
        return d.granted

    def _owned_classes(self) -> np.ndarray:
        if self._owned_parts is None:
            self._owned_parts = np.flatnonzero(self.owned)
        self.classes.ensure(self._owned_parts, self.epoch)
        return self._owned_parts

    def lease_pass(self) -> None:
        m = self.m
        now = int(m.now_ms())
        m.members[self.name] = leases.acquire_partition(
            m.members[self.name], self.member_id, self.name, now, m.partition_ttl_ms
        ).lease
        m.counters["db_statements"] += 1
        want = m.assignment(now)
        self._owned_classes()
        name, ttl = self.name, m.partition_ttl_ms
        _, refused = self.classes.apply(
            lambda lease, believed: leases.renew_partition(lease, name, believed, now, ttl),
            self.epoch,
        )
        if refused.size:
            m.counters["lease_renewals_refused"] += int(refused.size)
            self.owned[refused] = False
            for p in refused.tolist():
                self.draining.pop(p, None)
            self._changed()
        if (m.assignment_version, self._owned_version) == self._settled:
            return  # same assignment, same partitions: nothing to hand over or take
        moving = np.flatnonzero(self.owned & (want != self.index))
        for p in moving.tolist():
            since = self.draining.setdefault(p, now)
            if now - since > m.window_ms + TICK_MS:  # the wheel holds nothing of p now
                held = m.plt.get(p)
                if held is None:  # never taken: nothing to release
                    continue
                r = leases.release_partition(held, self.name, int(self.epoch[p]))
                if r.granted:
                    m.plt.put(p, r.lease)
                    self.owned[p] = False
                    del self.draining[p]
        if moving.size:
            self._changed()
        for p in np.flatnonzero((want == self.index) & ~self.owned).tolist():
            self.take(p, now)
        if not self.draining and not ((want == self.index) & ~self.owned).any():
            self._settled = (m.assignment_version, self._owned_version)  # nothing pending

    # -- scan -----------------------------------------------------------------------------

    def _wait_local_second(self) -> simpy.Event:
        env = self.m.env
        local = env.now * 1000 + self.skew_ms
        nxt = (math.floor(local / 1000 + 1e-9) + 1) * 1000
        return env.timeout(max(0.0, (nxt - self.skew_ms) / 1000 - env.now))

    def _scanner(self) -> Process:
        m = self.m
        first = True
        while True:
            if not first:
                yield self._wait_local_second()
            first = False
            m.events += 1
            if not self.alive or self.cut:
                continue
            if m.now_ms() >= self.next_lease_ms:
                self.next_lease_ms += m.renew_ms
                self.lease_pass()
            yield from self.scan()
            self.dispatch_due()

    def scan(self) -> Process:
        """Step 2 of the life of a run: read the due triggers of the node's partitions up
        to the scan horizon, then in one fenced transaction insert their runs, advance
        the triggers, decide them (kit.core.trigger.decide_scan: lateness, misfire and
        overlap) and hold the runs in the timer wheel. The window is the database's
        time, as the kit's scan reads it (a node's skewed clock only moves when it
        scans); a job that limits overlap is taken only within the core's overlap
        horizon (kit.core.trigger.overlap_limit_ms; the policy is the scenario's)."""
        m = self.m
        lo, hi = dispatch.scan_window(int(m.now_ms()), **m._ahead())
        if m.limits_overlap:
            hi = trigger.overlap_limit_ms(lo, hi)
        scanning, parts = self.scanning()
        if parts.size == 0:
            return
        m.generate_through(hi)
        t = m.runs
        adv = m.advanced_to
        a = t.first_after(int(adv[parts].min()))
        b = t.first_after(hi)
        if b > a:
            sl = t.rows(a, b)
            pp = t.part[sl]
            rows = np.flatnonzero(scanning[pp] & (t.fire[sl] > adv[pp])) + a  # run ids
        else:
            rows = _NO_ROWS
        if rows.size > m.scan_batch_rows:  # a bounded batch, oldest first
            hi = int(t.fire[rows[m.scan_batch_rows - 1] - t.origin])
            rows = rows[t.fire[rows - t.origin] <= hi]
        n_parts = parts.size
        p = m.p
        fires = m.fires_by_kind(rows)
        service = (
            p["db_scan_fixed_s"]
            + n_parts * p["db_per_partition_s"]
            + float(fires @ m.scan_db_per_fire)
        )
        # and the node's own CPU between the statements (deciding each trigger, its next
        # fire, the statements' arrays): one thread on the node's own core, not the
        # database's, so it adds to the scan's time without loading the database. Each
        # fire costs its job's schedule kind's (a cron fire computes its next time with
        # croniter, a one-off fire has none)
        cpu = p["sched_scan_cpu_fixed_s"] + float(fires @ m.scan_cpu_per_fire)
        yield m.env.timeout(m.db.book(service) + cpu)
        m.counters["db_statements"] += 3
        if not self.alive or self.cut:
            return  # the transaction never committed
        self._commit(scanning, parts, rows, lo, hi)

    def _commit(
        self, scanning: np.ndarray, parts: np.ndarray, rows: np.ndarray, lo: int, hi: int
    ) -> None:
        m = self.m
        t = m.runs  # ids stay valid across the transaction; physical rows may have moved
        now = int(m.now_ms())
        # every partition's write is fenced by its epoch (kit.core.leases)
        self._owned_classes()
        name = self.name
        ok = self.classes.verdicts(
            lambda lease, believed: leases.fenced_write_allowed(lease, name, believed, now),
            self.epoch,
        )
        ix = rows - t.origin
        if ok is not None:  # some partitions were taken over: their writes are refused
            allowed = scanning & ok
            refused = scanning & ~ok
            if refused.any():
                m.counters["fenced_writes_refused"] += int(refused.sum())
                self.owned[refused] = False
                self._changed()
            keep = allowed[t.part[ix]]
            rows, ix = rows[keep], ix[keep]
            parts = np.flatnonzero(allowed)
        adv = m.advanced_to
        adv[parts] = np.maximum(adv[parts], hi)
        if rows.size == 0:
            return
        fresh = t.status[ix] == NONE
        if not fresh.all():
            m.counters["insert_conflicts"] += int(rows.size - fresh.sum())
            rows, ix = rows[fresh], ix[fresh]
        t.inserts[ix] += 1
        t.status[ix] = PENDING
        rows = self._decide(rows, lo, hi)
        self._hold(rows)

    def _decide(self, rows: np.ndarray, now_ms: int, hi_ms: int) -> np.ndarray:
        """The scan's decision for its fresh runs, by kit.core.trigger.decide_scan (the
        kit's scan calls it with the same now, horizon, grace and busy counts): which
        fire, which are queued, which are skipped as misfired or overlapping, and whose
        busy runs are cancelled. Returns the runs to hold for dispatch.

        Each job's fires in the window are one trigger's (a sparse run is a job of one
        fire). The core's answer for a trigger, fire by fire, depends only on: how many
        fires the window holds, how many of them are late (older than now minus the
        grace: always the first ones), how many of those are past a skip_late deadline,
        whether the job's next fire is late too (a batch cut short during a catch-up),
        and the job's busy count. Jobs equal in these are one class: the core is asked
        once per class, with one member's real trigger and job (its schedule and jitter
        from the workload's template), and its answer is applied to every member. The
        core's fire times for that member must be the model's (the workload follows the
        same schedule); classes are kept per model (the core is pure)."""
        m = self.m
        t = m.runs
        n = rows.size
        if n == 0:
            return rows
        late_before = now_ms - m.misfire_grace_ms
        if hi_ms < late_before:  # a catch-up cut short: is a job's next fire late too?
            m.generate_through(late_before)  # (before any row index: it may move rows)
        ix = rows - t.origin
        fire = t.fire[ix]
        job = t.job[ix].astype(np.int64)
        if not m.limits_overlap and int(fire[0]) >= late_before:  # ids ascend with fire
            # the usual scan: nothing late, overlap allowed; one fire per job is one class
            keyed = np.sort(job[job >= 0])
            if not (keyed[1:] == keyed[:-1]).any():
                one = (1, 0, 0, 0, 0)
                verdict = m.scan_verdicts.get(one)
                if verdict is None:
                    verdict = self._ask_core(rows[:1], int(job[0]), 0, now_ms, hi_ms)
                    m.scan_verdicts[one] = verdict
                if verdict[0][0] == FIRE and not verdict[1]:
                    if m.decision_log is not None:
                        m.decision_log.append((now_ms, job, fire, np.full(n, FIRE, np.int8)))
                    return rows
        # one group per job, its fires in order (ids ascend with fire time)
        key = np.where(job >= 0, job, -1 - np.arange(n, dtype=np.int64))
        order = np.argsort(key, kind="stable")
        ks = key[order]
        starts = np.flatnonzero(np.concatenate(([True], ks[1:] != ks[:-1])))
        counts = np.diff(np.concatenate((starts, [n])))
        fs = fire[order]
        late = fs < late_before
        n_groups = starts.size
        zeros = np.zeros(n_groups, np.int64)
        n_late = np.add.reduceat(late.astype(np.int64), starts) if late.any() else zeros
        n_old = zeros
        if m.misfire.kind == policies.MisfireKind.skip_late and late.any():
            old = late & (now_ms - fs > m.misfire.deadline_s * 1000)
            n_old = np.add.reduceat(old.astype(np.int64), starts)
        g_job = ks[starts]
        keyed = g_job >= 0
        busy = zeros
        if m.limits_overlap and keyed.any():
            busy = zeros.copy()
            kg = np.flatnonzero(keyed)
            last = m.last_run_of_job[g_job[kg]]
            live = last >= t.lo
            b_last = np.zeros(kg.size, np.int64)
            b_last[live] = IS_ACTIVE[t.status[last[live] - t.origin]]
            busy[kg] = b_last
            if m.more_active or m.queued:  # the few jobs with more than their last run
                extra = np.fromiter(itertools.chain(m.more_active, m.queued), np.int64)
                for g in kg[np.isin(g_job[kg], extra)].tolist():
                    busy[g] = m.busy_runs(int(g_job[g]))
        next_late = zeros
        if hi_ms < late_before and keyed.any():  # the job's next fire is late when it
            a, b = t.first_after(hi_ms), t.first_at_or_after(late_before)  # is before this
            nxt = np.unique(t.job[t.rows(a, b)])
            next_late = (keyed & np.isin(g_job, nxt)).astype(np.int64)
        sig = np.stack((counts, n_late, n_old, busy, next_late), axis=1)
        if n_groups == 1 or (not sig[:, 1:].any() and (counts == counts[0]).all()):
            classes, inv = sig[:1], np.zeros(n_groups, np.int64)
        else:
            classes, inv = np.unique(sig, axis=0, return_inverse=True)
            inv = inv.reshape(-1)
        tables: list[np.ndarray] = []
        cancel = np.zeros(len(classes), bool)
        for c, row in enumerate(classes.tolist()):
            verdict = m.scan_verdicts.get(tuple(row))
            if verdict is None:
                g = int(np.argmax(inv == c))
                member = rows[order[starts[g] : starts[g] + counts[g]]]
                verdict = self._ask_core(member, int(g_job[g]), row[3], now_ms, hi_ms)
                m.scan_verdicts[tuple(row)] = verdict
            tables.append(verdict[0])
            cancel[c] = verdict[1]
        base = np.concatenate(([0], np.cumsum([tb.size for tb in tables])[:-1]))
        flat = np.concatenate(tables)
        group_of = np.repeat(np.arange(n_groups), counts)
        pos = np.arange(n) - np.repeat(starts, counts)
        outcome = np.empty(n, np.int8)
        outcome[order] = flat[base[inv[group_of]] + pos]
        if m.decision_log is not None:
            m.decision_log.append((now_ms, job.copy(), fire.copy(), outcome.copy()))
        if cancel.any():
            for g in np.flatnonzero(cancel[inv] & keyed).tolist():
                m.cancel_active(int(g_job[g]))
        if m.limits_overlap:
            self._track_busy(rows, outcome)
        skip = (outcome == SKIP_MISFIRE) | (outcome == SKIP_OVERLAP)
        if skip.any():
            t.status[ix[skip]] = SKIPPED
            m.counters["misfire_skipped"] += int(np.count_nonzero(outcome == SKIP_MISFIRE))
            m.counters["overlap_skipped"] += int(np.count_nonzero(outcome == SKIP_OVERLAP))
        fired = outcome == FIRE
        return rows if fired.all() else rows[fired]

    def _ask_core(
        self, member: np.ndarray, j: int, busy: int, now_ms: int, hi_ms: int
    ) -> tuple[np.ndarray, bool]:
        """kit.core.trigger.decide_scan for one job of a class: its trigger (its first
        fire in the window), its job view, its busy count, in the kit's epoch time."""
        m = self.m
        t = m.runs
        st = m.stream
        t0 = st.start_ms
        fires = [int(f) + t0 for f in t.fire[member - t.origin].tolist()]
        if j >= 0:
            tpl = st.templates[int(np.searchsorted(m._key0, j, "right")) - 1]
            job_id = f"{tpl.id_prefix}{j - tpl.key0}"
            schedule = tpl.schedule
            offset = jitter.jitter_offset_ms(job_id, tpl.jitter_ms)
        else:  # a sparse run: a job seen once, a one-off at its fire time
            job_id = f"sparse.{int(member[0])}"
            schedule = OneOffSchedule(from_epoch_ms(fires[0]))
            offset = 0
        view = trigger.JobView(
            job_id=job_id,
            version=1,
            schedule=schedule,
            jitter_offset_ms=offset,
            overlap=m.overlap,
            misfire=m.misfire,
        )
        part = int(t.part[member[0] - t.origin])
        due = trigger.DueTrigger(part, fires[0], job_id, 1)
        active = {job_id: busy} if busy else {}
        (d,) = trigger.decide_scan(
            [due], {job_id: view}, active, now_ms + t0, hi_ms + t0,
            misfire_grace_ms=m.misfire_grace_ms,
        )  # fmt: skip
        got = [r.scheduled_at_ms for r in d.runs]
        if not d.delete or got != fires:
            raise RuntimeError(
                f"kit.core.trigger decided fires {got} (taken: {d.delete}) for job {job_id} "
                f"at {now_ms + t0}, the model's workload has {fires}"
            )
        out = np.empty(len(d.runs), np.int8)
        for i, r in enumerate(d.runs):
            if r.fired:
                out[i] = FIRE
            elif r.status == "pending" and r.skip_reason == trigger.QUEUED:
                out[i] = QUEUE
            elif r.skip_reason == trigger.SKIP_MISFIRE:
                out[i] = SKIP_MISFIRE
            elif r.skip_reason == trigger.SKIP_OVERLAP:
                out[i] = SKIP_OVERLAP
            else:
                raise RuntimeError(f"kit.core.trigger planned a run the model does not know: {r}")
        return out, d.cancel_active

    def _track_busy(self, rows: np.ndarray, outcome: np.ndarray) -> None:
        """What keeps a job busy after this scan: its latest fired run (and any other it
        fired beside a busy one), and its queued runs in fire order."""
        m = self.m
        t = m.runs
        jobs = t.job[rows - t.origin].astype(np.int64)
        keep = jobs >= 0
        q = keep & (outcome == QUEUE)
        if q.any():
            for r, j in zip(rows[q].tolist(), jobs[q].tolist(), strict=True):
                m.queued.setdefault(j, deque()).append(r)
            m.counters["overlap_queued"] += int(q.sum())
        f = keep & (outcome == FIRE)
        if not f.any():
            return
        fr, fj = rows[f], jobs[f]
        prev = m.last_run_of_job[fj]
        live = prev >= t.lo
        still = np.zeros(fr.size, bool)
        still[live] = IS_ACTIVE[t.status[prev[live] - t.origin]]
        sj = np.sort(fj)
        if still.any() or bool((sj[1:] == sj[:-1]).any()):  # busy with two fired runs
            for r, j in zip(fr.tolist(), fj.tolist(), strict=True):
                p = int(m.last_run_of_job[j])
                if p >= t.lo and IS_ACTIVE[t.status[p - t.origin]]:
                    m.more_active.setdefault(j, []).append(p)
                m.last_run_of_job[j] = r
            return
        m.last_run_of_job[fj] = fr  # rows ascend by fire time: the last one wins

    def _hold(self, rows: np.ndarray) -> None:
        """Into the timer wheel, one item per second of fire time, ranked by its most
        urgent tier (`dispatch_due` publishes a second's runs by tier, then age)."""
        if rows.size == 0:
            return
        t = self.m.runs
        ix = rows - t.origin  # ids ascend with fire time
        sec = t.fire[ix] // 1000
        tier = t.tier[ix]
        bounds = [0, *(np.flatnonzero(sec[1:] != sec[:-1]) + 1).tolist(), rows.size]
        for a, b in itertools.pairwise(bounds):
            chunk = rows[a:b]
            self.wheel.add(int(sec[a]) * 1000, chunk, int(tier[a:b].min()))
            self.in_wheel[id(chunk)] = chunk

    # -- dispatch ---------------------------------------------------------------------------

    def _dispatcher(self) -> Process:
        while True:
            yield self._wait_local_second()
            self.m.events += 1
            if self.alive:
                self.dispatch_due()

    def dispatch_due(self) -> None:
        """Step 3: publish every held run whose second has come, one producer per node."""
        m = self.m
        items = self.wheel.pop_due(int(m.now_ms() + self.skew_ms))
        if not items:
            return
        for chunk in items:
            del self.in_wheel[id(chunk)]
        rows = np.concatenate(items)
        t = m.runs
        if m.n_cancelled:  # overlap 'replace' cancelled some before their publish
            rows = rows[t.status[rows - t.origin] != CANCELLED]
            if rows.size == 0:
                return
        if self.drop_next:  # inject_drop: a bug loses runs without a trace
            k = min(self.drop_next, rows.size)
            rows, self.drop_next = rows[k:], self.drop_next - k
            if rows.size == 0:
                return
        ix = rows - t.origin
        fire = t.fire[ix]
        order = np.lexsort((rows, t.tier[ix], fire))
        rows, ix, fire = rows[order], ix[order], fire[order]
        now = m.now_ms()
        a = np.maximum(fire - self.skew_ms, now).astype(np.float64)
        if m.broker:
            a = m.broker.after_array(a)
        # one producer per node: d_i = max(a_i, d_{i-1}) + per-message time (exact, vectorised)
        s = m.p["kafka_publish_per_msg_s"] * 1000
        j = np.arange(rows.size)
        d = np.maximum(np.maximum.accumulate(a - j * s), self.producer_ms) + (j + 1) * s
        self.producer_ms = float(d[-1])
        first = np.isnan(t.dispatch[ix])
        t.dispatch[ix[first]] = d[first]
        t.status[ix] = DISPATCHED
        m.pool.deliver(m.publish_visible(d), rows, 1)
        m.events += rows.size
        self._mark_dispatched(rows)

    def _mark_dispatched(self, rows: np.ndarray) -> None:
        """A node cut off from the database keeps what it published for later, and the
        reaper re-publishes what stays unmarked past the grace. The kit writes nothing
        to the database after a publish (migration 0009 dropped the dispatch mark), so
        the database is charged nothing here."""
        m = self.m
        if self.cut:
            self.unmarked.append(rows)
            m.reaper.undispatched.append((rows, True))

    # -- faults -----------------------------------------------------------------------------

    def crash(self) -> None:
        """Everything in memory is lost; the runs in the wheel are committed but never
        published, so the reaper finds them after the grace."""
        m = self.m
        self.alive = False
        held = self.wheel.pop_due(2**62)
        self.in_wheel.clear()
        if held:
            m.reaper.undispatched.append((np.concatenate(held), False))
        self.wheel = dispatch.TimerWheel()
        self.owned[:] = False
        self.draining.clear()
        self._changed()

    def restart(self) -> None:
        self.alive = True
        self.producer_ms = -math.inf  # a new process, a new producer
        self.next_lease_ms = self.m.now_ms()

    def heal(self) -> None:
        """Back in touch with the database: the writes kept during the cut carry the old
        epochs, and kit.core's fencing refuses those whose partitions were taken over."""
        m = self.m
        self.cut = False
        now = int(m.now_ms())
        t = m.runs
        for rows in self.unmarked:
            for q in np.unique(t.part[rows - t.origin]).tolist():
                lease = m.plt.get(q)
                if lease is None or not leases.fenced_write_allowed(
                    lease, self.name, int(self.epoch[q]), now
                ):
                    m.counters["fenced_writes_refused"] += 1
        self.unmarked = []
        self.next_lease_ms = m.now_ms()


class Reaper:
    """Re-publishes runs committed but never published, re-queues runs whose lease
    expired (kit.core.leases.expire_run) and publishes retries that came due."""

    def __init__(self, model: Model) -> None:
        self.m = model
        self.undispatched: list[tuple[np.ndarray, bool]] = []
        self.expiring: list[tuple[float, int, int]] = []  # heap by expiry
        self.retries: list[tuple[int, int, int]] = []  # heap by retry time
        self.period_s = float(model.s["reaper"]["period_s"])
        model.env.process(self._loop())

    def busy(self) -> bool:
        return bool(self.undispatched or self.expiring or self.retries)

    def pending_runs(self) -> list[np.ndarray]:
        out = [rows for rows, _ in self.undispatched]
        out.append(np.array([r for _, r, _ in self.expiring + self.retries], np.int64))
        return out

    def _loop(self) -> Process:
        m = self.m
        while True:
            yield m.env.timeout(self.period_s)
            m.events += 1
            if not self.busy():
                continue
            yield from m.db.transaction(m.p["db_statement_s"])
            m.counters["db_statements"] += 1
            self._pass(m.now_ms())

    def _pass(self, now: float) -> None:
        m = self.m
        t = m.runs
        keep: list[tuple[np.ndarray, bool]] = []
        for rows, published in self.undispatched:
            due = t.fire[rows - t.origin] + m.grace_ms <= now
            again = rows[due]
            if again.size:
                if not published:
                    again = again[t.status[again - t.origin] == PENDING]
                    gx = again - t.origin
                    t.dispatch[gx] = np.fmin(t.dispatch[gx], now)
                    t.status[gx] = DISPATCHED
                m.counters["reaper_republished"] += int(again.size)
                vis = m.publish_visible(np.full(again.size, now))
                m.pool.deliver(vis, again, t.attempt[again - t.origin], 0 if not published else 1)
            if (~due).any():
                keep.append((rows[~due], published))
        self.undispatched = keep

        out_run: list[int] = []
        out_att: list[int] = []
        while self.expiring and self.expiring[0][0] <= now:
            e, r, a = heapq.heappop(self.expiring)
            if t.status[r - t.origin] == CANCELLED:
                continue  # overlap 'replace' cancelled it: its lease was cleared
            lease = leases.RunLease(
                str(r), a, leases.RunStatus.running, token="x", worker="w", expires_at_ms=int(e)
            )
            tr = leases.expire_run(lease, int(now), m.retry_policy.max_attempts)
            if not tr.accepted:
                continue
            m.counters["leases_expired"] += 1
            if tr.run.status is leases.RunStatus.dead:
                t.status[r - t.origin] = DEAD
                if m.queued:
                    m.release_queued(np.array([r], np.int64), np.array([now], np.float64))
            else:
                t.status[r - t.origin] = DISPATCHED
                t.attempt[r - t.origin] = tr.run.attempt
                out_run.append(r)
                out_att.append(tr.run.attempt)
        # retries that came due: kit.core.leases.retry_due_run once per attempt (every
        # popped retry is due, so the class is the attempt)
        due_verdict: dict[int, bool] = {}
        while self.retries and self.retries[0][0] <= now:
            at, r, a = heapq.heappop(self.retries)
            if t.status[r - t.origin] == CANCELLED:
                continue  # overlap 'replace' cancelled the retry with its run
            if a not in due_verdict:
                lease = leases.RunLease(
                    "class", a, leases.RunStatus.retry_scheduled, retry_at_ms=at
                )
                due_verdict[a] = leases.retry_due_run(lease, int(now)).accepted
            if due_verdict[a]:
                t.status[r - t.origin] = DISPATCHED
                t.attempt[r - t.origin] = a
                m.counters["retries_published"] += 1
                out_run.append(r)
                out_att.append(a)
        if out_run:
            vis = m.publish_visible(np.full(len(out_run), float(now)))
            m.pool.deliver(vis, np.array(out_run, np.int64), np.array(out_att, np.int16))

"""The model: SimPy processes for scheduler nodes, the reaper, faults and the worker
pool tick, over the cohort workload. Every decision is a `kit.core` call: partition
hashing and assignment, partition leases and fencing, the scan window, the timer
wheel, misfire and overlap policies, jitter, retry backoff and run-lease transitions.

Where one core call per run would not fit the time budget (claims and finishes of
runs on the normal path), the core is asked once per tick for the verdict of that
equivalence class (same status, event and attempt) and the verdict is applied to the
whole class; runs off the normal path (failures, redeliveries, crashes, expiries)
get one core call each.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from kit.core import dispatch, leases, partitions, policies, retry
from sim.cohorts import Workload, build_workload, task_durations_ms
from sim.faults import Fault, Windows, parse_faults
from sim.resources import Database, WorkerPool

# run status codes in the model's runs table (names are kit.core.leases.RunStatus)
NONE, PENDING, DISPATCHED, RUNNING, SUCCEEDED, RETRY, DEAD, SKIPPED = range(8)
CORE_STATUS = {
    PENDING: leases.RunStatus.pending,
    DISPATCHED: leases.RunStatus.pending,  # published, not claimed: the kit calls it pending
    RUNNING: leases.RunStatus.running,
    SUCCEEDED: leases.RunStatus.succeeded,
    RETRY: leases.RunStatus.retry_scheduled,
    DEAD: leases.RunStatus.dead,
    SKIPPED: leases.RunStatus.skipped,
}
ACTIVE = (PENDING, DISPATCHED, RUNNING, RETRY)
TICK_MS = 1000


class Model:
    def __init__(self, scenario: dict[str, Any], profile: dict[str, float], seed: int) -> None:
        self.s = scenario
        self.p = profile
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.rand = random.Random(seed)  # for kit.core.retry's jitter
        self.env = simpy.Environment()
        self.faults: list[Fault] = parse_faults(scenario["faults"])
        self.wl: Workload = build_workload(scenario, self.rng)
        n = self.wl.n
        self.status = np.zeros(n, np.int8)
        self.dispatch_ms = np.full(n, np.nan)
        self.visible_ms = np.full(n, np.nan)
        self.start_ms = np.full(n, np.nan)
        self.wait_ms = np.full(n, np.nan, np.float32)
        self.attempt = np.ones(n, np.int16)
        self.effects = np.zeros(n, np.int8)  # successful executions (task effects)
        self.executions = np.zeros(n, np.int16)
        self.inserts = np.zeros(n, np.int8)
        self.poison = np.zeros(n, bool)
        self.counters: dict[str, int] = {
            "fenced_writes_refused": 0,
            "lease_renewals_refused": 0,
            "insert_conflicts": 0,
            "misfire_skipped": 0,
            "overlap_skipped": 0,
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
        self.events = 0  # model events: SimPy steps plus per-run dispatch/take/finish
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
        names = self.wl.class_names
        self.fail_p = np.array([float(w["classes"][c].get("fail_p", 0.0)) for c in names])
        keyed = self.wl.hourly_jobs + self.wl.frequent_jobs
        self.last_run_of_job = np.full(max(keyed, 1), -1, np.int64)
        ls = self.s["leases"]
        self.partition_ttl_ms = int(float(ls["partition_ttl_s"]) * 1000)
        self.renew_ms = int(float(ls["renew_s"]) * 1000)
        self.run_ttl_ms = int(float(ls["run_ttl_s"]) * 1000)
        self.heartbeat_ms = int(float(ls["heartbeat_s"]) * 1000)
        self.grace_ms = int(float(ls["undispatched_grace_s"]) * 1000)
        self.scan_batch_rows = int(ls["scan_batch_rows"])
        ahead = float(ls["scan_ahead_s"])
        self.scan_ahead_ms = None if ahead < 0 else int(ahead * 1000)
        # the drain before a rebalance release must cover the scan-ahead window
        self.window_ms = dispatch.scan_window(0, **self._ahead())[1]

    def _ahead(self) -> dict[str, int]:
        return {} if self.scan_ahead_ms is None else {"scan_ahead_ms": self.scan_ahead_ms}

    def _build_infra(self) -> None:
        f = self.s["fleet"]
        by_kind = lambda k: [x for x in self.faults if x.kind == k]  # noqa: E731
        self.db = Database(self.env, int(f["db_connections"]), Windows(by_kind("db_stall")))
        self.broker = Windows(by_kind("broker_outage"))
        active_workers = min(int(f["workers"]), int(f["kafka_partitions"]))
        self.pool = WorkerPool(self, active_workers, int(f["concurrency"]))
        self.n_parts = int(f["partitions"])
        self.leases: list[leases.PartitionLease | None] = [None] * self.n_parts
        self.members: dict[str, leases.PartitionLease] = {}
        self.advanced_to = np.full(self.n_parts, -1, np.int64)
        self.nodes = [SchedulerNode(self, i) for i in range(int(f["nodes"]))]
        self.reaper = Reaper(self)
        self._assignment_key: tuple[str, ...] = ()
        self._assignment: dict[int, str] = {}
        # the fleet has been running: members registered, partitions assigned and held
        now = 0
        for node in self.nodes:
            self.members[node.name] = leases.acquire_partition(
                None, node.member_id, node.name, now, self.partition_ttl_ms
            ).lease
        for p, owner in self.assignment(now).items():
            self.nodes[int(owner[1:])].take(p, now)
        for fault in self.faults:
            if fault.kind == "poison_jobs":
                hit = (self.wl.fire_ms >= fault.at_ms) & (self.rng.random(self.wl.n) < fault.share)
                self.poison |= hit
            else:
                self.env.process(self._inject(fault))
        self.env.process(self._pool_ticks())

    # -- time and helpers ---------------------------------------------------------------

    def now_ms(self) -> float:
        return self.env.now * 1000.0

    def assignment(self, now_ms: float) -> dict[int, str]:
        """kit.core.partitions.assign_partitions over the live members (cached while the
        membership is unchanged: the function is deterministic)."""
        live = tuple(n.name for n in self.nodes if self.members[n.name].live(int(now_ms)))
        if live != self._assignment_key:
            current = {
                p: lease.owner
                for p, lease in enumerate(self.leases)
                if lease is not None and lease.owner in live and lease.live(int(now_ms))
            }
            self._assignment = partitions.assign_partitions(self.n_parts, list(live), current)
            self._assignment_key = live
        return self._assignment

    def log_lease(self, lease: leases.PartitionLease) -> None:
        self.lease_events.append((lease.partition_id, lease.epoch, lease.owner))

    def publish_visible(self, publish_done_ms: np.ndarray) -> np.ndarray:
        """When a published message can be taken by a worker (broker outages hold it)."""
        lat = (self.p["kafka_publish_latency_s"] + self.p["kafka_consume_latency_s"]) * 1000
        v = publish_done_ms + lat
        return self.broker.after_array(v) if self.broker else v

    # -- the worker side ----------------------------------------------------------------

    def service(self, run: np.ndarray, vis: np.ndarray):
        """Per-run claim latency, slot hold time and outcome for the runs being served."""
        claim = self.p["claim_s"] * 1000 + self.db.claim_delay_ms
        claim_ms = np.full(run.size, claim)
        dur = task_durations_ms(self.s, self.wl.cls[run], self.wl.class_names, self.rng)
        ok = (self.rng.random(run.size) >= self.fail_p[self.wl.cls[run]]) & ~self.poison[run]
        svc = claim_ms + dur + self.p["finish_s"] * 1000
        if self.db.stalls:  # a claim attempted in a stall waits for its end
            stall_wait = self.db.stalls.after_array(vis) - vis
            claim_ms = claim_ms + stall_wait
            svc = svc + stall_wait
        offered = run.size * (self.p["db_claim_demand_s"] + self.p["db_finish_demand_s"])
        self.db.charge_workers(offered, TICK_MS / 1000)
        return claim_ms, svc, ok

    def accept_deliveries(self, run, att, redel, vis) -> np.ndarray:
        """Claims of deliveries off the normal path, one kit.core.claim_run each."""
        keep = np.ones(run.size, bool)
        normal = redel == 0
        if normal.any():
            self._class_verdict("claim", leases.RunStatus.pending)
        for i in np.flatnonzero(~normal):
            r, a, kind = int(run[i]), int(att[i]), int(redel[i])
            if kind == 2:  # inject_duplicate: the bug skips the claim
                continue
            st = int(self.status[r])
            if st == DISPATCHED:  # the first delivery is still queued: it wins the claim
                keep[i] = False
                self.counters["redeliveries_deduplicated"] += 1
                continue
            lease = leases.RunLease(str(r), int(self.attempt[r]), CORE_STATUS.get(st, "pending"))
            t = leases.claim_run(lease, "w", f"t{r}.{a}", a, int(vis[i]), self.run_ttl_ms)
            if not t.accepted:
                keep[i] = False
                self.counters["claims_refused"] += 1
        return keep

    def _class_verdict(self, event: str, status: leases.RunStatus) -> None:
        """The core's verdict for a whole equivalence class of normal-path runs."""
        run = leases.RunLease("class", 1, status, token="t", worker="w", expires_at_ms=1)
        if event == "claim":
            t = leases.claim_run(run, "w", "t", 1, 0, self.run_ttl_ms)
        else:
            t = leases.finish_run(run, "t", event == "finish_ok", 0, None)
        if not t.accepted:
            raise RuntimeError(f"kit.core refused a normal-path {event}: {t.reason}")

    def mark_queued(self, run: np.ndarray) -> None:
        self.events += run.size

    def record_start(self, run, att, vis, take, start) -> None:
        self.status[run] = RUNNING
        self.executions[run] += 1
        first = np.isnan(self.start_ms[run])
        r = run[first]
        self.start_ms[r] = start[first]
        self.wait_ms[r] = (take - vis)[first]
        self.attempt[run] = np.maximum(self.attempt[run], att)

    def record_finish(self, fin: dict[str, np.ndarray]) -> None:
        run, ok, reaped = fin["run"], fin["ok"], fin["reaped"]
        self.events += run.size
        np.add.at(self.effects, run[ok], 1)
        normal_ok = ok & ~reaped
        if normal_ok.any():
            self._class_verdict("finish_ok", leases.RunStatus.running)
            self.status[run[normal_ok]] = SUCCEEDED
        for i in np.flatnonzero(reaped):  # the reaper re-queued it: this token is stale
            r = int(run[i])
            status = CORE_STATUS.get(int(self.status[r]), leases.RunStatus.pending)
            lease = leases.RunLease(str(r), int(self.attempt[r]), status, token="current")
            t = leases.finish_run(
                lease, f"t{r}.{int(fin['attempt'][i])}", bool(ok[i]), int(fin["end"][i]), None
            )
            if not t.accepted:
                self.counters["finishes_refused"] += 1
        for i in np.flatnonzero(~ok & ~reaped):
            r, a, end = int(run[i]), int(fin["attempt"][i]), int(fin["end"][i])
            retry_at = retry.next_retry_at_ms(end, self.retry_policy, a, self.rand)
            token = f"t{r}.{a}"
            lease = leases.RunLease(str(r), a, leases.RunStatus.running, token=token, worker="w")
            t = leases.finish_run(lease, token, False, end, retry_at)
            if t.run.status is leases.RunStatus.dead:
                self.status[r] = DEAD
            else:
                self.status[r] = RETRY
                heapq.heappush(self.reaper.retries, (t.run.retry_at_ms, r, t.run.attempt))

    def _pool_ticks(self):
        while True:
            yield self.env.timeout(TICK_MS / 1000)
            self.events += 1
            self.pool.tick(self.now_ms())

    # -- faults ---------------------------------------------------------------------------

    def _inject(self, f: Fault):
        env = self.env
        yield env.timeout(f.at_ms / 1000)
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
            self._crash_workers(f)
        elif f.kind == "db_stall":
            yield env.timeout(f.duration_ms / 1000)
            self._expire_after_stall(f)
        elif f.kind == "inject_drop":
            nodes[0].drop_next = f.count
        elif f.kind == "inject_duplicate":
            done = np.flatnonzero(self.status == SUCCEEDED)
            pick = self.rng.choice(done, min(f.count, done.size), replace=False)
            self.pool.deliver(np.full(pick.size, self.now_ms()), pick, self.attempt[pick], 2)

    def _crash_workers(self, f: Fault) -> None:
        t = self.now_ms()
        ids = self.rng.choice(self.pool.workers, min(f.workers, self.pool.workers), replace=False)
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
        rc = self.pool.run_cols
        a, b = f.at_ms, f.end_ms
        start = rc["start"]
        beats = np.floor(np.maximum(a - start, 0) / self.heartbeat_ms) * self.heartbeat_ms
        expiry = start + beats + self.run_ttl_ms
        hit = (start < a) & (expiry < b) & (rc["end"] > b) & ~rc["reaped"]
        for i in np.flatnonzero(hit):
            r, att = int(rc["run"][i]), int(rc["attempt"][i])
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
                rc["reaped"][i] = True
                heapq.heappush(self.reaper.expiring, (float(expiry[i]), r, att))

    # -- running ---------------------------------------------------------------------------

    def run(self, progress: Callable[[float, float], None] | None = None) -> None:
        """Safety phase (workload and faults), then liveness phase until drained."""
        end_s = float(self.s["duration_s"])
        limit_s = end_s + float(self.s["drain_s"])
        step = 10.0
        t = 0.0
        while t < limit_s:
            t = min(t + step, limit_s)
            self.env.run(until=t)
            if progress:
                progress(t, limit_s)
            if t >= end_s and not self._work_left():
                break
        self.end_s = self.env.now
        self.simpy_events = next(self.env._eid)  # events SimPy scheduled (a private counter)

    def _work_left(self) -> bool:
        if self.pool.busy() or self.reaper.busy():
            return True
        if any(len(n.wheel) for n in self.nodes):
            return True
        last = int(self.wl.fire_ms[-1]) if self.wl.n else -1
        return bool(np.any(self.advanced_to < last))

    def in_system(self) -> np.ndarray:
        """Runs still somewhere (trigger not advanced, wheel, queue, running, reaper)."""
        parts = [np.flatnonzero(self.wl.fire_ms > self.advanced_to[self.wl.part])]
        for n in self.nodes:
            parts += n.wheel.pop_due(2**62)  # the run is over: emptying the wheel is fine
        parts += [c[1] for c in self.pool.inbox]
        parts += [np.array([it[1] for q in self.pool.waiting for it in q], np.int64)]
        parts.append(self.pool.run_cols["run"])
        parts += self.reaper.pending_runs()
        return np.unique(np.concatenate([np.asarray(p, np.int64) for p in parts]))


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
        self.epoch_l = [0] * model.n_parts  # the same as a list (fast scalar reads)
        self.owned = np.zeros(model.n_parts, bool)
        self.draining: dict[int, float] = {}
        self.wheel: dispatch.TimerWheel = dispatch.TimerWheel()
        self.producer_ms = 0.0
        self.unmarked: list[np.ndarray] = []
        self.drop_next = 0
        self.next_lease_ms = float(model.renew_ms)
        model.env.process(self._scanner())
        model.env.process(self._dispatcher())

    # -- leases -----------------------------------------------------------------------

    def take(self, p: int, now_ms: float) -> bool:
        m = self.m
        d = leases.acquire_partition(m.leases[p], p, self.name, int(now_ms), m.partition_ttl_ms)
        if d.granted:
            if not self.owned[p] or d.lease.epoch != self.epoch[p]:
                m.log_lease(d.lease)
            m.leases[p] = d.lease
            self.owned[p] = True
            self.epoch[p] = d.lease.epoch
            self.epoch_l[p] = d.lease.epoch
        return d.granted

    def lease_pass(self) -> None:
        m = self.m
        now = int(m.now_ms())
        m.members[self.name] = leases.acquire_partition(
            m.members[self.name], self.member_id, self.name, now, m.partition_ttl_ms
        ).lease
        m.counters["db_statements"] += 1
        want = m.assignment(now)
        held, epochs, renew, ttl = (
            m.leases,
            self.epoch_l,
            leases.renew_partition,
            m.partition_ttl_ms,
        )
        for p in np.flatnonzero(self.owned).tolist():
            d = renew(held[p], self.name, epochs[p], now, ttl)
            if not d.granted:
                m.counters["lease_renewals_refused"] += 1
                self.owned[p] = False
                self.draining.pop(p, None)
                continue
            m.leases[p] = d.lease
            if want.get(p) != self.name:
                since = self.draining.setdefault(p, now)
                if now - since > m.window_ms + TICK_MS:  # the wheel holds nothing of p now
                    r = leases.release_partition(d.lease, self.name, int(self.epoch[p]))
                    if r.granted:
                        m.leases[p] = r.lease
                        self.owned[p] = False
                        del self.draining[p]
        for p, owner in want.items():
            if owner == self.name and not self.owned[p]:
                self.take(p, now)

    # -- scan -----------------------------------------------------------------------------

    def _wait_local_second(self):
        env = self.m.env
        local = env.now * 1000 + self.skew_ms
        nxt = (math.floor(local / 1000 + 1e-9) + 1) * 1000
        return env.timeout(max(0.0, (nxt - self.skew_ms) / 1000 - env.now))

    def _scanner(self):
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

    def scan(self):
        m, wl = self.m, self.m.wl
        local = m.now_ms() + self.skew_ms
        lo, hi = dispatch.scan_window(int(local), **m._ahead())
        scanning = self.owned.copy()
        for p in self.draining:
            scanning[p] = False
        if not scanning.any():
            return
        start = int(m.advanced_to[scanning].min())
        i0 = int(np.searchsorted(wl.fire_ms, start, "right"))
        i1 = int(np.searchsorted(wl.fire_ms, hi, "right"))
        idx = np.arange(i0, i1)
        pp = wl.part[i0:i1]
        rows = idx[scanning[pp] & (wl.fire_ms[i0:i1] > m.advanced_to[pp])]
        if rows.size > m.scan_batch_rows:  # a bounded batch, oldest first
            hi = int(wl.fire_ms[rows[m.scan_batch_rows - 1]])
            rows = rows[wl.fire_ms[rows] <= hi]
        n_parts = int(scanning.sum())
        p = m.p
        service = (
            3 * p["db_statement_s"]
            + n_parts * p["db_per_partition_s"]
            + rows.size * (p["db_scan_advance_per_row_s"] + p["db_run_insert_per_row_s"])
        )
        yield from m.db.transaction(service)
        m.counters["db_statements"] += 3
        if not self.alive or self.cut:
            return  # the transaction never committed
        # commit: every partition's write is fenced by its epoch (kit.core.leases)
        now = int(m.now_ms())
        allowed = scanning.copy()
        held, epochs, fenced = m.leases, self.epoch_l, leases.fenced_write_allowed
        name = self.name
        for q in np.flatnonzero(scanning).tolist():
            if not fenced(held[q], name, epochs[q], now):
                allowed[q] = False
                self.owned[q] = False
                m.counters["fenced_writes_refused"] += 1
        rows = rows[allowed[wl.part[rows]]]
        m.advanced_to[allowed] = np.maximum(m.advanced_to[allowed], hi)
        fresh = m.status[rows] == NONE
        m.counters["insert_conflicts"] += int(rows.size - fresh.sum())
        rows = rows[fresh]
        m.inserts[rows] += 1
        m.status[rows] = PENDING
        rows = self._misfire(rows, lo)
        rows = self._overlap(rows)
        self._hold(rows)

    def _misfire(self, rows: np.ndarray, now_ms: int) -> np.ndarray:
        """Runs already late at the scan go through kit.core.policies.plan_misfire, per
        job (a sparse job has a single fire in the window, so it is its own group)."""
        m, wl = self.m, self.m.wl
        late = wl.fire_ms[rows] < now_ms
        if not late.any():
            return rows
        lr = rows[late]
        keys = wl.job_key[lr]
        skip = np.zeros(lr.size, bool)
        order = np.argsort(keys, kind="stable")
        ks = keys[order]
        bounds = np.flatnonzero(np.diff(ks)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [ks.size]))
        fire = wl.fire_ms[lr]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            grp = order[a:b]
            if ks[a] < 0:  # sparse: every run is its own job
                for g in grp.tolist():
                    plan = policies.plan_misfire([int(fire[g])], now_ms, m.misfire)
                    skip[g] = not plan.fire_ms
            else:
                plan = policies.plan_misfire(fire[grp].tolist(), now_ms, m.misfire)
                fired = set(plan.fire_ms)
                skip[grp] = [int(t) not in fired for t in fire[grp].tolist()]
        skipped = lr[skip]
        m.status[skipped] = SKIPPED
        m.counters["misfire_skipped"] += int(skipped.size)
        keep = np.ones(rows.size, bool)
        keep[np.flatnonzero(late)[skip]] = False
        return rows[keep]

    def _overlap(self, rows: np.ndarray) -> np.ndarray:
        """kit.core.policies.decide_overlap for runs of recurring jobs, asked once per
        distinct running count (its only input besides the policy)."""
        m, wl = self.m, self.m.wl
        keyed = rows[wl.job_key[rows] >= 0]
        if keyed.size == 0:
            return rows
        prev = m.last_run_of_job[wl.job_key[keyed]]
        running = (prev >= 0) & np.isin(m.status[np.maximum(prev, 0)], ACTIVE)
        drop = np.zeros(keyed.size, bool)
        for count in np.unique(running.astype(int)).tolist():
            action = policies.decide_overlap(m.overlap, count)
            if action is policies.OverlapAction.skip:
                drop |= running.astype(int) == count
        # queue / replace are treated as fire (see the report's approximations)
        m.last_run_of_job[wl.job_key[keyed[~drop]]] = keyed[~drop]
        if drop.any():
            m.status[keyed[drop]] = SKIPPED
            m.counters["overlap_skipped"] += int(drop.sum())
            return np.setdiff1d(rows, keyed[drop], assume_unique=True)
        return rows

    def _hold(self, rows: np.ndarray) -> None:
        """Into the timer wheel, one item per (second, tier) cohort."""
        if rows.size == 0:
            return
        wl = self.m.wl
        key = (wl.fire_ms[rows] // 1000) * 4 + wl.tier[rows]
        order = np.argsort(key, kind="stable")
        rows, key = rows[order], key[order]
        cuts = np.flatnonzero(np.diff(key)) + 1
        for chunk, k in zip(
            np.split(rows, cuts), key[np.concatenate(([0], cuts))].tolist(), strict=True
        ):
            self.wheel.add(int(k // 4) * 1000, chunk, int(k % 4))

    # -- dispatch ---------------------------------------------------------------------------

    def _dispatcher(self):
        while True:
            yield self._wait_local_second()
            self.m.events += 1
            if self.alive:
                self.dispatch_due()

    def dispatch_due(self) -> None:
        m, wl = self.m, self.m.wl
        items = self.wheel.pop_due(int(m.now_ms() + self.skew_ms))
        if not items:
            return
        rows = np.concatenate(items)
        if self.drop_next:  # inject_drop: a bug loses runs without a trace
            k = min(self.drop_next, rows.size)
            rows, self.drop_next = rows[k:], self.drop_next - k
        rows = rows[np.lexsort((rows, wl.tier[rows], wl.fire_ms[rows]))]
        now = m.now_ms()
        a = np.maximum(wl.fire_ms[rows] - self.skew_ms, now).astype(np.float64)
        if m.broker:
            a = m.broker.after_array(a)
        # one producer per node: d_i = max(a_i, d_{i-1}) + per-message time (exact, vectorised)
        s = m.p["kafka_publish_per_msg_s"] * 1000
        j = np.arange(rows.size)
        d = np.maximum(np.maximum.accumulate(a - j * s), self.producer_ms) + (j + 1) * s
        self.producer_ms = float(d[-1])
        first = np.isnan(m.dispatch_ms[rows])
        m.dispatch_ms[rows[first]] = d[first]
        m.status[rows] = DISPATCHED
        vis = m.publish_visible(d)
        m.visible_ms[rows] = vis
        m.pool.deliver(vis, rows, 1)
        m.events += rows.size
        self._mark_dispatched(rows)

    def _mark_dispatched(self, rows: np.ndarray) -> None:
        """`dispatched_at` is a fenced write; a node cut off from the database keeps it
        for later, and the reaper re-publishes what stays unmarked past the grace."""
        m = self.m
        if self.cut:
            self.unmarked.append(rows)
            m.reaper.undispatched.append((rows, True))
            return
        service = m.p["db_statement_s"] + rows.size * m.p["db_dispatch_mark_per_row_s"]
        m.env.process(m.db.transaction(service))
        m.counters["db_statements"] += 1

    # -- faults -----------------------------------------------------------------------------

    def crash(self) -> None:
        """Everything in memory is lost; the runs in the wheel are committed but never
        published, so the reaper finds them after the grace."""
        m = self.m
        self.alive = False
        held = self.wheel.pop_due(2**62)
        if held:
            m.reaper.undispatched.append((np.concatenate(held), False))
        self.wheel = dispatch.TimerWheel()
        self.owned[:] = False
        self.draining.clear()

    def restart(self) -> None:
        self.alive = True
        self.producer_ms = 0.0
        self.next_lease_ms = self.m.now_ms()

    def heal(self) -> None:
        """Back in touch with the database: the writes kept during the cut carry the old
        epochs, and kit.core's fencing refuses those whose partitions were taken over."""
        m = self.m
        self.cut = False
        now = int(m.now_ms())
        for rows in self.unmarked:
            for q in np.unique(m.wl.part[rows]).tolist():
                if not leases.fenced_write_allowed(m.leases[q], self.name, self.epoch_l[q], now):
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

    def _loop(self):
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
        m, wl = self.m, self.m.wl
        keep: list[tuple[np.ndarray, bool]] = []
        for rows, published in self.undispatched:
            due = wl.fire_ms[rows] + m.grace_ms <= now
            again = rows[due]
            if again.size:
                if not published:
                    again = again[m.status[again] == PENDING]
                    m.dispatch_ms[again] = np.fmin(m.dispatch_ms[again], now)
                    m.status[again] = DISPATCHED
                m.counters["reaper_republished"] += int(again.size)
                vis = m.publish_visible(np.full(again.size, now))
                if not published:
                    m.visible_ms[again] = vis
                m.pool.deliver(vis, again, m.attempt[again], 1 if published else 0)
            if (~due).any():
                keep.append((rows[~due], published))
        self.undispatched = keep

        while self.expiring and self.expiring[0][0] <= now:
            e, r, a = heapq.heappop(self.expiring)
            lease = leases.RunLease(
                str(r), a, leases.RunStatus.running, token="x", worker="w", expires_at_ms=int(e)
            )
            t = leases.expire_run(lease, int(now), m.retry_policy.max_attempts)
            if not t.accepted:
                continue
            m.counters["leases_expired"] += 1
            if t.run.status is leases.RunStatus.dead:
                m.status[r] = DEAD
            else:
                m.status[r] = DISPATCHED
                m.attempt[r] = t.run.attempt
                m.pool.deliver(m.publish_visible(np.array([now])), [r], t.run.attempt)
        while self.retries and self.retries[0][0] <= now:
            at, r, a = heapq.heappop(self.retries)
            lease = leases.RunLease(str(r), a, leases.RunStatus.retry_scheduled, retry_at_ms=at)
            t = leases.retry_due_run(lease, int(now))
            if t.accepted:
                m.status[r] = DISPATCHED
                m.attempt[r] = a
                m.counters["retries_published"] += 1
                m.pool.deliver(m.publish_visible(np.array([now])), [r], a)

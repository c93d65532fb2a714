"""The resources runs contend for: the database (bounded connections, service time
per statement and per row) and the worker pool (workers x concurrency slots).

The worker pool is exact per run without one SimPy event per run: once a second it
serves the runs that became visible, in visible order, on a sorted array of slot
free times (vectorised while slots are free), falling back to a heap with priority
queues (critical first, then oldest) as soon as runs have to wait.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from kit.core import dispatch
from sim.faults import Windows

if TYPE_CHECKING:
    from sim.model import Model

INF = float("inf")
N_TIERS = len(dispatch.PRIORITY_TIERS)


class Database:
    """Scheduler statements hold one of `connections` for their service time; worker
    claims and finishes are charged as a fluid load on the same connections (one SimPy
    event per claim would not fit the time budget), which delays claims once offered
    load exceeds the connections."""

    def __init__(self, env: simpy.Environment, connections: int, stalls: Windows) -> None:
        self.env = env
        self.connections = connections
        self.pool = simpy.Resource(env, capacity=connections)
        self.stalls = stalls
        self.busy_s = 0.0  # scheduler statement time, for utilisation
        self.worker_backlog_s = 0.0
        self.claim_delay_ms = 0.0

    def transaction(self, service_s: float):
        """Generator: wait out a stall, take a connection, hold it for the service time."""
        env = self.env
        wait = self.stalls.after(env.now * 1000) / 1000 - env.now
        if wait > 0:
            yield env.timeout(wait)
        with self.pool.request() as req:
            yield req
            yield env.timeout(service_s)
            self.busy_s += service_s
            # a stall that began while we held the connection delays the commit
            wait = self.stalls.after(env.now * 1000) / 1000 - env.now
            if wait > 0:
                yield env.timeout(wait)

    def charge_workers(self, offered_s: float, tick_s: float) -> None:
        """Worker claim/finish load for one tick; the overflow becomes claim delay."""
        spare = self.connections * tick_s - offered_s
        self.worker_backlog_s = max(0.0, self.worker_backlog_s - spare)
        self.claim_delay_ms = 1000 * self.worker_backlog_s / self.connections


class WorkerPool:
    """Slots are numbered worker * concurrency + k, so a worker crash knows its slots."""

    def __init__(self, model: Model, workers: int, concurrency: int) -> None:
        self.m = model
        self.workers = workers
        self.concurrency = concurrency
        self.slots = workers * concurrency
        self.free_at = np.zeros(self.slots)  # ms when each slot can take a run
        self.waiting: list[deque] = [deque() for _ in range(N_TIERS)]
        self.n_waiting = 0
        self.max_waiting = 0
        self.inbox: list[tuple[np.ndarray, ...]] = []  # (visible, run, attempt, redelivery)
        self.run_cols: dict[str, np.ndarray] = _empty_running()
        self.samples: list[tuple[float, int, float, int]] = []  # t, waiting, busy, in flight
        self.taken = 0

    # -- arrivals ---------------------------------------------------------------------

    def deliver(self, visible, run, attempt, redelivery: bool = False) -> None:
        n = len(run)
        if n == 0:
            return
        self.inbox.append(
            (
                np.asarray(visible, np.float64),
                np.asarray(run, np.int64),
                np.broadcast_to(np.asarray(attempt, np.int16), (n,)).copy(),
                np.full(n, redelivery),
            )
        )

    def in_flight(self) -> int:
        return sum(len(c[1]) for c in self.inbox)

    def busy(self) -> bool:
        return bool(self.inbox or self.n_waiting or self.run_cols["run"].size)

    # -- the tick -----------------------------------------------------------------------

    def tick(self, t_ms: float) -> None:
        m = self.m
        vis, run, att, redel = self._due(t_ms)
        if run.size:
            keep = m.accept_deliveries(run, att, redel, vis)
            vis, run, att = vis[keep], run[keep], att[keep]
        if run.size:
            tier = m.wl.tier[run]
            order = np.lexsort((run, tier, vis))
            vis, run, att, tier = vis[order], run[order], att[order], tier[order]
            claim_ms, svc_ms, ok = m.service(run, vis)
            m.mark_queued(run)
            if self.n_waiting == 0:
                done = self._fast(vis, run, att, claim_ms, svc_ms, ok)
                rest = slice(done, None)
            else:
                rest = slice(0, None)
            if vis[rest].size or self.n_waiting:
                self._slow(
                    t_ms,
                    vis[rest],
                    run[rest],
                    att[rest],
                    tier[rest],
                    claim_ms[rest],
                    svc_ms[rest],
                    ok[rest],
                )
        elif self.n_waiting:
            e = np.empty(0)
            self._slow(
                t_ms,
                e,
                e.astype(np.int64),
                e.astype(np.int16),
                e.astype(np.int8),
                e,
                e,
                e.astype(bool),
            )
        self._finish_due(t_ms)
        busy = int(np.count_nonzero(self.free_at > t_ms))
        self.samples.append((t_ms, self.n_waiting, busy / self.slots, self.in_flight()))

    def _due(self, t_ms: float):
        if not self.inbox:
            e = np.empty(0)
            return e, e.astype(np.int64), e.astype(np.int16), e.astype(bool)
        cols = [np.concatenate(c) for c in zip(*self.inbox, strict=True)]
        now = cols[0] < t_ms
        later = ~now
        self.inbox = [tuple(c[later] for c in cols)] if later.any() else []
        return tuple(c[now] for c in cols)

    def _fast(self, vis, run, att, claim_ms, svc_ms, ok) -> int:
        """Serve the prefix of arrivals that each find a free slot: while every arrival
        finds a free slot the order of slots does not matter, so this is exact."""
        i, n = 0, vis.size
        for _ in range(8):
            if i >= n:
                break
            free = np.flatnonzero(self.free_at <= vis[i])
            k = min(free.size, n - i)
            if k == 0:
                break
            sl = slice(i, i + k)
            slots = free[:k]
            take = vis[sl]
            self._record(take, run[sl], att[sl], slots, claim_ms[sl], svc_ms[sl], ok[sl])
            self.free_at[slots] = take + svc_ms[sl]
            i += k
        return i

    def _slow(self, t_ms, vis, run, att, tier, claim_ms, svc_ms, ok) -> None:
        """Event order over arrivals and slot releases up to t_ms; waiting runs are
        taken by tier rank, then in arrival order (kit.core.dispatch tiers)."""
        heap = list(zip(self.free_at.tolist(), range(self.slots), strict=True))
        heapq.heapify(heap)
        waiting = self.waiting
        nw = self.n_waiting
        max_w = self.max_waiting
        out_take: list[float] = []
        out_item: list[tuple] = []
        out_slot: list[int] = []
        vis_l = vis.tolist()
        items = list(
            zip(
                vis_l,
                run.tolist(),
                att.tolist(),
                claim_ms.tolist(),
                svc_ms.tolist(),
                ok.tolist(),
                strict=True,
            )
        )
        tiers = tier.tolist()
        i, n = 0, len(items)
        replace = heapq.heapreplace
        while True:
            t_arr = vis_l[i] if i < n else INF
            top, slot = heap[0]
            if nw and top <= t_arr and top <= t_ms:
                for q in waiting:
                    if q:
                        item = q.popleft()
                        break
                nw -= 1
                out_take.append(top)
                out_item.append(item)
                out_slot.append(slot)
                replace(heap, (top + item[4], slot))
                continue
            if i >= n:
                break
            item = items[i]
            if not nw and top <= t_arr:
                out_take.append(t_arr)
                out_item.append(item)
                out_slot.append(slot)
                replace(heap, (t_arr + item[4], slot))
            else:
                waiting[tiers[i]].append(item)
                nw += 1
                if nw > max_w:
                    max_w = nw
            i += 1
        self.n_waiting = nw
        self.max_waiting = max_w
        arr = np.array(heap)
        self.free_at = np.empty(self.slots)
        self.free_at[arr[:, 1].astype(np.int64)] = arr[:, 0]
        if out_item:
            cols = list(zip(*out_item, strict=True))
            self._record(
                np.array(out_take),
                np.array(cols[1], np.int64),
                np.array(cols[2], np.int16),
                np.array(out_slot, np.int64),
                np.array(cols[3]),
                np.array(cols[4]),
                np.array(cols[5], bool),
                vis=np.array(cols[0]),
            )

    def _record(self, take, run, att, slots, claim_ms, svc_ms, ok, vis=None) -> None:
        self.taken += run.size
        start = take + claim_ms
        end = take + svc_ms
        self.m.record_start(run, att, take if vis is None else vis, take, start)
        new = {
            "run": run,
            "attempt": att,
            "slot": slots,
            "take": take,
            "start": start,
            "end": end,
            "ok": ok,
            "reaped": np.zeros(run.size, bool),
        }
        self.run_cols = {k: np.concatenate((self.run_cols[k], v)) for k, v in new.items()}

    def _finish_due(self, t_ms: float) -> None:
        rc = self.run_cols
        done = rc["end"] <= t_ms
        if not done.any():
            return
        fin = {k: v[done] for k, v in rc.items()}
        self.run_cols = {k: v[~done] for k, v in rc.items()}
        self.m.record_finish(fin)

    # -- faults -------------------------------------------------------------------------

    def crash_workers(self, t_ms: float, worker_ids: np.ndarray, restart_ms: float):
        """Slots of the crashed workers stop; the runs on them are returned (victims)."""
        slots = (worker_ids[:, None] * self.concurrency + np.arange(self.concurrency)).ravel()
        rc = self.run_cols
        hit = np.isin(rc["slot"], slots) & (rc["take"] <= t_ms)
        victims = {k: v[hit] for k, v in rc.items()}
        self.run_cols = {k: v[~hit] for k, v in rc.items()}
        self.free_at[slots] = np.maximum(self.free_at[slots], restart_ms)
        self.free_at[slots] = restart_ms
        return victims


def _empty_running() -> dict[str, Any]:
    return {
        "run": np.empty(0, np.int64),
        "attempt": np.empty(0, np.int16),
        "slot": np.empty(0, np.int64),
        "take": np.empty(0),
        "start": np.empty(0),
        "end": np.empty(0),
        "ok": np.empty(0, bool),
        "reaped": np.empty(0, bool),
    }

"""The resources runs contend for: the database (bounded connections, service time
per statement and per row) and the worker pool (workers x concurrency slots).

The worker pool is exact per run without one SimPy event per run: once a second it
serves the runs that became visible, in visible order (vectorised while slots are
free), falling back to a heap with priority queues (critical first, then oldest) as
soon as runs have to wait.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from kit.core import dispatch
from sim.faults import Windows

# A run waiting for a slot: (visible ms, run id, attempt, claim ms, service ms, succeeds).
WaitingRun = tuple[float, int, int, float, float, bool]

if TYPE_CHECKING:
    from sim.model import Model

INF = float("inf")
N_TIERS = len(dispatch.PRIORITY_TIERS)
# columns of WorkerPool.running (all float64: run ids stay exact below 2**53)
RUN_COLUMNS = ("end", "run", "attempt", "slot", "take", "start", "ok", "reaped")
END, RUN, ATTEMPT, SLOT, TAKE, START, OK, REAPED = range(len(RUN_COLUMNS))


class Database:
    """Scheduler statements hold one of `connections` for their service time, taken in
    request order (a calendar of connection free times: the same order and times as a
    FIFO resource, without a SimPy event per request); worker claims and finishes are
    charged as a fluid load on the same connections (one SimPy event per claim would not
    fit the time budget), which delays claims once offered load exceeds the connections."""

    def __init__(self, env: simpy.Environment, connections: int, stalls: Windows) -> None:
        self.env = env
        self.connections = connections
        self.free = [-INF] * connections  # heap: when each connection is free again (s)
        self.stalls = stalls
        self.busy_s = 0.0  # scheduler statement time, for utilisation
        self.worker_backlog_s = 0.0
        self.claim_delay_ms = 0.0

    def book(self, service_s: float) -> float:
        """A transaction asked for now: wait out a stall, take the connection free
        first, hold it for the service time (a stall meanwhile delays the commit).
        Returns the delay until it commits."""
        now = self.env.now
        ready = self.stalls.after(now * 1000) / 1000 if self.stalls else now
        end = max(ready, self.free[0]) + service_s
        if self.stalls:
            end = self.stalls.after(end * 1000) / 1000
        heapq.heapreplace(self.free, end)
        self.busy_s += service_s
        return end - now

    def transaction(self, service_s: float) -> Generator[simpy.Event, Any, None]:
        """Generator: until the transaction commits."""
        yield self.env.timeout(self.book(service_s))

    def charge_workers(self, offered_s: float, tick_s: float) -> None:
        """Worker claim/finish load for one tick; the overflow becomes claim delay."""
        spare = self.connections * tick_s - offered_s
        self.worker_backlog_s = max(0.0, self.worker_backlog_s - spare)
        self.claim_delay_ms = 1000 * self.worker_backlog_s / self.connections


class WorkerPool:
    """Slots are numbered worker * concurrency + k, so a worker crash knows its slots.

    Free slots are a stack: while a tick's arrivals all find a free slot (no run waits),
    which slot each takes does not change any time, so the tick is served without
    looking at the other slots. Otherwise the tick is served exactly, in event order,
    on a heap of every slot's free time (runs wait by tier, then age). Runs in progress
    are kept in buckets by the tick that sees them end.
    """

    def __init__(self, model: Model, workers: int, concurrency: int) -> None:
        self.m = model
        self.workers = workers
        self.concurrency = concurrency
        self.slots = workers * concurrency
        self.free_at = np.zeros(self.slots)  # ms when each slot can take a run
        self.stack = np.arange(self.slots)[::-1].copy()  # free slots, lowest on top
        self.n_free = self.slots
        self.waiting: list[deque[WaitingRun]] = [deque() for _ in range(N_TIERS)]
        self.n_waiting = 0
        self.max_waiting = 0
        self.inbox: list[tuple[np.ndarray, ...]] = []  # (visible, run, attempt, redelivery)
        self.inbox_n = 0
        # runs in a slot, one row each (columns RUN_COLUMNS), in blocks by the tick
        # that sees them end
        self.running: dict[int, list[np.ndarray]] = {}
        self.ends: list[int] = []  # heap of the keys of `running`
        self.n_running = 0
        n = int(float(model.s["duration_s"]) + float(model.s["drain_s"])) + 2
        self.samples = np.zeros((n, 3), np.float32)  # per tick: waiting, busy share, in flight
        self.n_samples = 0
        self.taken = 0
        self.dirty = False  # the stack must be rebuilt from free_at at the end of the tick
        self.frozen: list[float] = []  # restart times of crashed workers' slots

    # -- arrivals ---------------------------------------------------------------------

    def deliver(
        self,
        visible: np.ndarray | list[float],
        run: np.ndarray | list[int],
        attempt: np.ndarray | int,
        redelivery: int = 0,
    ) -> None:
        n = len(run)
        if n == 0:
            return
        att = (
            np.full(n, attempt, np.int16)
            if np.ndim(attempt) == 0
            else np.asarray(attempt, np.int16)
        )
        self.inbox.append(
            (
                np.asarray(visible, np.float64),
                np.asarray(run, np.int64),
                att,
                np.full(n, redelivery, np.int8),
            )
        )
        self.inbox_n += n

    def busy(self) -> bool:
        return bool(self.inbox or self.n_waiting or self.n_running)

    def held(self) -> list[np.ndarray]:
        """Run ids anywhere in the pool: delivered, waiting, or in a slot."""
        out = [c[1] for c in self.inbox]
        if self.n_waiting:
            out.append(np.array([it[1] for q in self.waiting for it in q], np.int64))
        out += [b[:, RUN].astype(np.int64) for b in self.running_blocks()]
        return out

    def running_blocks(self) -> list[np.ndarray]:
        """The runs in slots, as blocks of rows (views: `reaped` can be set in them)."""
        return [b for blocks in self.running.values() for b in blocks]

    # -- the tick -----------------------------------------------------------------------

    def tick(self, t_ms: float) -> None:
        m = self.m
        vis, run, att, redel = self._due(t_ms)
        if run.size:
            keep = m.claim(run, att, redel, vis)
            if not keep.all():
                vis, run, att = vis[keep], run[keep], att[keep]
        if run.size:
            # every arrival finds a free slot: no one waits, so the order they are served
            # in changes no time (and no event order is needed)
            fast = self.n_waiting == 0 and run.size <= self.n_free
            if not fast:  # event order: visible time, then tier, then age
                tier = m.runs.tier[run - m.runs.origin]
                order = np.lexsort((run, tier, vis))
                vis, run, att, tier = vis[order], run[order], att[order], tier[order]
            claim_ms, svc_ms, ok = m.service(run, att, vis)
            m.mark_queued(run)
            if fast:
                k = run.size
                slots = self.stack[self.n_free - k : self.n_free][::-1]
                self.n_free -= k
                self.free_at[slots] = vis + svc_ms
                self._record(vis, run, att, slots, claim_ms, svc_ms, ok)
            else:
                self._slow(t_ms, vis, run, att, tier, claim_ms, svc_ms, ok)
        elif self.n_waiting:
            e = np.empty(0)
            i = e.astype(np.int64)
            self._slow(t_ms, e, i, e.astype(np.int16), e.astype(np.int8), e, e, e.astype(bool))
        self._finish_due(t_ms)
        if self.frozen and min(self.frozen) <= t_ms:
            self.frozen = [r for r in self.frozen if r > t_ms]
            self.dirty = True
        if self.dirty:
            self._rebuild_stack(t_ms)
        if self.n_samples < len(self.samples):
            self.samples[self.n_samples] = (
                self.n_waiting,
                (self.slots - self.n_free) / self.slots,
                self.inbox_n,
            )
            self.n_samples += 1

    def _due(self, t_ms: float) -> tuple[np.ndarray, ...]:
        if not self.inbox:
            e = np.empty(0)
            return e, e.astype(np.int64), e.astype(np.int16), e.astype(np.int8)
        if len(self.inbox) == 1:
            cols = list(self.inbox[0])
        else:
            cols = [np.concatenate(c) for c in zip(*self.inbox, strict=True)]
        now = cols[0] < t_ms
        if now.all():
            self.inbox = []
            self.inbox_n = 0
            return tuple(cols)
        later = ~now
        self.inbox = [tuple(c[later] for c in cols)] if later.any() else []
        self.inbox_n = int(later.sum())
        return tuple(c[now] for c in cols)

    def _slow(
        self,
        t_ms: float,
        vis: np.ndarray,
        run: np.ndarray,
        att: np.ndarray,
        tier: np.ndarray,
        claim_ms: np.ndarray,
        svc_ms: np.ndarray,
        ok: np.ndarray,
    ) -> None:
        """Event order over arrivals and slot releases up to t_ms; waiting runs are
        taken by tier rank, then in arrival order (kit.core.dispatch tiers).

        While nobody waits, the j-th arrival can take the j-th earliest slot that frees
        up before t_ms if that slot is free by its visible time: then no arrival of that
        prefix waits, whichever slot each takes (a slot freed again inside the tick only
        adds an earlier choice), and every slot left free by t_ms is as good as another
        for the next tick. That prefix is served at once; the rest goes through a heap
        of the slots that can free up before t_ms (a slot busy past t_ms cannot serve
        in this tick), in event order."""
        if self.n_waiting == 0 and run.size:
            soon = np.flatnonzero(self.free_at <= t_ms)
            order = np.argsort(self.free_at[soon], kind="stable")
            soon = soon[order]
            m = min(soon.size, run.size)
            fits = self.free_at[soon[:m]] <= vis[:m]
            k = m if fits.all() else int(np.argmin(fits))
            if k:
                slots = soon[:k]
                self.free_at[slots] = vis[:k] + svc_ms[:k]
                self._record(vis[:k], run[:k], att[:k], slots, claim_ms[:k], svc_ms[:k], ok[:k])
                vis, run, att, tier = vis[k:], run[k:], att[k:], tier[k:]
                claim_ms, svc_ms, ok = claim_ms[k:], svc_ms[k:], ok[k:]
        soon = np.flatnonzero(self.free_at <= t_ms)
        heap = list(zip(self.free_at[soon].tolist(), soon.tolist(), strict=True))
        heapq.heapify(heap)
        waiting = self.waiting
        nw = self.n_waiting
        max_w = self.max_waiting
        out_take: list[float] = []
        out_item: list[WaitingRun] = []
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
            top, slot = heap[0] if heap else (INF, -1)
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
        if heap:
            arr = np.array(heap)
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
        self.dirty = True

    def _rebuild_stack(self, t_ms: float) -> None:
        """After the tick's finishes, a slot is free when its free time has passed (a
        crashed worker's slots are free from its restart)."""
        free = np.flatnonzero(self.free_at <= t_ms)
        self.n_free = free.size
        self.stack[: free.size] = free[::-1]
        self.dirty = False

    def _record(
        self,
        take: np.ndarray,
        run: np.ndarray,
        att: np.ndarray,
        slots: np.ndarray,
        claim_ms: np.ndarray,
        svc_ms: np.ndarray,
        ok: np.ndarray,
        vis: np.ndarray | None = None,
    ) -> None:
        self.taken += run.size
        start = take + claim_ms
        end = take + svc_ms
        self.m.record_start(run, att, take if vis is None else vis, take, start)
        new = np.empty((run.size, len(RUN_COLUMNS)))
        new[:, END] = end
        new[:, RUN] = run
        new[:, ATTEMPT] = att
        new[:, SLOT] = slots
        new[:, TAKE] = take
        new[:, START] = start
        new[:, OK] = ok
        new[:, REAPED] = 0.0
        key = np.ceil(end / 1000).astype(np.int64)
        k0 = int(key.min())
        span = int(key.max()) - k0
        # a small key range sorts as int16 (radix sort) instead of int64 (timsort)
        rel = (key - k0).astype(np.int16) if span < 32_000 else key
        order = np.argsort(rel, kind="stable")
        new, key = new[order], key[order]
        bounds = [0, *(np.flatnonzero(key[1:] != key[:-1]) + 1).tolist(), key.size]
        running, ends = self.running, self.ends
        for a, b in itertools.pairwise(bounds):
            k = int(key[a])
            blocks = running.get(k)
            if blocks is None:
                running[k] = [new[a:b]]
                heapq.heappush(ends, k)
            else:
                blocks.append(new[a:b])
        self.n_running += run.size

    def _finish_due(self, t_ms: float) -> None:
        tick = int(t_ms // 1000)
        ends = self.ends
        while ends and ends[0] <= tick:
            blocks = self.running.pop(heapq.heappop(ends))
            done = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
            self._finished(done)

    def _finished(self, done: np.ndarray) -> None:
        k = len(done)
        self.n_running -= k
        slots = done[:, SLOT].astype(np.int64)
        if not self.dirty:  # back on the stack (not taken again since)
            self.stack[self.n_free : self.n_free + k] = slots
            self.n_free += k
        self.m.record_finish(
            {
                "run": done[:, RUN].astype(np.int64),
                "attempt": done[:, ATTEMPT].astype(np.int16),
                "end": done[:, END],
                "ok": done[:, OK] > 0,
                "reaped": done[:, REAPED] > 0,
            }
        )

    # -- faults -------------------------------------------------------------------------

    def crash_workers(
        self, t_ms: float, worker_ids: np.ndarray, restart_ms: float
    ) -> dict[str, np.ndarray]:
        """Slots of the crashed workers stop; the runs on them are returned (victims).
        A run whose task ended before the crash finished (its finish is only booked at
        the next tick): it is not a victim, and its slot stays down with the others."""
        slots = (worker_ids[:, None] * self.concurrency + np.arange(self.concurrency)).ravel()
        victims = []
        for k, blocks in self.running.items():
            kept = []
            for r in blocks:
                on = np.isin(r[:, SLOT].astype(np.int64), slots)
                hit = on & (r[:, TAKE] <= t_ms) & (r[:, END] > t_ms)
                if hit.any():
                    victims.append(r[hit])
                    r = r[~hit]
                kept.append(r)
            self.running[k] = kept
        v = np.concatenate(victims) if victims else np.empty((0, len(RUN_COLUMNS)))
        self.n_running -= len(v)
        out = {
            "run": v[:, RUN].astype(np.int64),
            "attempt": v[:, ATTEMPT].astype(np.int64),
            "start": v[:, START],
        }
        self.free_at[slots] = restart_ms
        in_stack = self.stack[: self.n_free]
        still_free = in_stack[~np.isin(in_stack, slots)]
        self.stack[: still_free.size] = still_free
        self.n_free = still_free.size
        self.frozen.append(restart_ms)
        self.dirty = True  # a finish booked later must not hand a crashed slot back
        return out

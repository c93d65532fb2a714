"""The model's runs table: one row per run from the retirement frontier to the newest
generated run, not one per run of the whole simulated period.

Run ids are global and increase with fire time (the workload is generated window by
window, each window sorted). Rows live in preallocated columns; `origin` is the id of
physical row 0, so a run's row is `id - origin`. Retiring moves `lo` forward once the
statistics have taken the rows; appending compacts the live rows to the front (and
grows the columns only when the live rows need it), so memory follows the runs in
flight, not the simulated duration.
"""

from __future__ import annotations

import numpy as np

# run status codes (names are kit.core.leases.RunStatus); LOST: the model's auditor
# found the run nowhere (never to run again): it is counted as dropped; CANCELLED: the
# overlap policy 'replace' cancelled it
NONE, PENDING, DISPATCHED, RUNNING, SUCCEEDED, RETRY, DEAD, SKIPPED, LOST, CANCELLED = range(10)
TERMINAL = (SUCCEEDED, DEAD, SKIPPED, LOST, CANCELLED)
ACTIVE = (PENDING, DISPATCHED, RUNNING, RETRY)

# the workload's columns (given at append) and the model's (initialised here)
WORKLOAD_COLUMNS: dict[str, type] = {
    "fire": np.int64,  # ms since the start of the simulated period
    "part": np.int16,
    "tier": np.int8,  # kit.core.dispatch.PRIORITY_TIERS rank
    "cls": np.int8,  # task class
    "job": np.int32,  # job key; -1: a job seen once (no overlap/misfire identity)
    "kind": np.int8,  # the job's schedule kind (sim.workload.SCHEDULE_KINDS rank)
    "poison": np.bool_,
}
STATE_COLUMNS: dict[str, tuple[type, float]] = {
    "status": (np.int8, NONE),
    "attempt": (np.int16, 1),
    "effects": (np.int8, 0),  # successful executions (task effects)
    "executions": (np.int16, 0),
    "inserts": (np.int8, 0),
    "dispatch": (np.float64, np.nan),  # first publish done, ms
    "start": (np.float64, np.nan),  # first start, ms
    "wait": (np.float32, np.nan),  # first queue wait (visible -> taken), ms
}


class RunTable:
    # The columns, bound as attributes in __init__ (and rebound when they grow), declared
    # here so a misspelt column is an error: WORKLOAD_COLUMNS, then STATE_COLUMNS.
    fire: np.ndarray
    part: np.ndarray
    tier: np.ndarray
    cls: np.ndarray
    job: np.ndarray
    kind: np.ndarray
    poison: np.ndarray
    status: np.ndarray
    attempt: np.ndarray
    effects: np.ndarray
    executions: np.ndarray
    inserts: np.ndarray
    dispatch: np.ndarray
    start: np.ndarray
    wait: np.ndarray

    def __init__(self, capacity: int = 1 << 20) -> None:
        self.capacity = capacity
        self.cols: dict[str, np.ndarray] = {}
        for name, dtype in WORKLOAD_COLUMNS.items():
            self.cols[name] = np.zeros(capacity, dtype)
        for name, (dtype, _) in STATE_COLUMNS.items():
            self.cols[name] = np.zeros(capacity, dtype)
        self.origin = 0  # id of physical row 0
        self.lo = 0  # first live (not yet retired) id
        self.hi = 0  # next id to assign
        self.peak_live = 0
        for name in self.cols:
            setattr(self, name, self.cols[name])

    @property
    def live(self) -> int:
        return self.hi - self.lo

    def append(self, batch: dict[str, np.ndarray]) -> None:
        """Add runs (sorted by fire time, all later than those held)."""
        n = int(batch["fire"].size)
        if n == 0:
            return
        if self.hi - self.origin + n > self.capacity:
            self._make_room(n)
        a, b = self.hi - self.origin, self.hi - self.origin + n
        for name in WORKLOAD_COLUMNS:
            self.cols[name][a:b] = batch[name]
        for name, (_, init) in STATE_COLUMNS.items():
            self.cols[name][a:b] = init
        self.hi += n
        self.peak_live = max(self.peak_live, self.live)

    def _make_room(self, n: int) -> None:
        live = self.live
        cap = self.capacity
        while live + n > cap * 3 // 4:  # keep a quarter free so compactions stay rare
            cap *= 2
        a, b = self.lo - self.origin, self.hi - self.origin
        if cap != self.capacity:
            for name, col in self.cols.items():
                new = np.zeros(cap, col.dtype)
                new[:live] = col[a:b]
                self.cols[name] = new
                setattr(self, name, new)
            self.capacity = cap
        else:
            for col in self.cols.values():
                col[:live] = col[a:b]
        self.origin = self.lo

    def rows(self, a: int, b: int) -> slice:
        """Physical slice of ids [a, b)."""
        return slice(a - self.origin, b - self.origin)

    def first_after(self, fire_ms: float) -> int:
        """Id of the first live run with fire time > fire_ms (hi when none)."""
        a, b = self.lo - self.origin, self.hi - self.origin
        return self.lo + int(np.searchsorted(self.fire[a:b], fire_ms, "right"))

    def first_at_or_after(self, fire_ms: float) -> int:
        a, b = self.lo - self.origin, self.hi - self.origin
        return self.lo + int(np.searchsorted(self.fire[a:b], fire_ms, "left"))

    def take(self, a: int, b: int) -> dict[str, np.ndarray]:
        """Copies of the columns of ids [a, b), for the statistics."""
        s = self.rows(a, b)
        return {name: col[s].copy() for name, col in self.cols.items()}

    @property
    def nbytes(self) -> int:
        return sum(col.nbytes for col in self.cols.values())

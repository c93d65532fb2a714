"""What every drill shares: the fleet's timings, the context a drill's cycles act through
(services, the stack, the workload, the fault log), and the base class.

A drill is one fleet and many short cycles: each cycle injects its fault at a seeded
moment, holds it, heals it and lets the fleet recover, so 100 cycles of a drill take
tens of minutes, not hours. What the drill does is drawn from its own
`random.Random(seed)`; the processes' timing is the machine's, so a seed replays the
same faults at the same offsets, not the same interleaving.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx
from sqlalchemy import Engine, text

from chaos.fleet import DrillFleet, ServiceSpec, wait_for
from chaos.ledger import Tail
from chaos.records import FaultWindow
from chaos.stack import ChaosStack
from chaos.workload import Shape, Workload, at_second, standard_classes
from kit.core.defaults import SCAN_PERIOD_MS, misfire_grace_ms


class DrillSetupError(RuntimeError):
    """The drill cannot set up its fault (no namespace permission, no libfaketime...):
    it fails, saying why; it never passes without having faulted."""


@dataclass(frozen=True)
class Timings:
    """Short leases and periods, so that a fault and its recovery fit in seconds."""

    partition_lease_ttl_ms: int = 3000
    node_heartbeat_ms: int = 1000
    run_lease_ttl_ms: int = 4000
    reaper_period_ms: int = 500
    unclaimed_grace_ms: int = 3000
    scan_ahead_ms: int = 2000
    partitions: int = 64
    topic_partitions: int = 3
    worker_session_timeout_ms: int = 6000  # the broker's minimum

    @property
    def misfire_grace_ms(self) -> int:
        return misfire_grace_ms(self.partition_lease_ttl_ms, self.node_heartbeat_ms, SCAN_PERIOD_MS)

    def env(self) -> dict[str, str]:
        return {
            "CRONFLEET_PARTITION_LEASE_TTL_MS": str(self.partition_lease_ttl_ms),
            "CRONFLEET_NODE_HEARTBEAT_MS": str(self.node_heartbeat_ms),
            "CRONFLEET_RUN_LEASE_TTL_MS": str(self.run_lease_ttl_ms),
            # sized leases (kit.core.durations) grow for long runs, never below the drills'
            "CRONFLEET_RUN_LEASE_MIN_MS": str(self.run_lease_ttl_ms),
            "CRONFLEET_REAPER_PERIOD_MS": str(self.reaper_period_ms),
            "CRONFLEET_UNCLAIMED_GRACE_MS": str(self.unclaimed_grace_ms),
            "CRONFLEET_SCAN_AHEAD_MS": str(self.scan_ahead_ms),
            "CRONFLEET_PARTITIONS": str(self.partitions),
            "CRONFLEET_RUN_TOPIC_PARTITIONS": str(self.topic_partitions),
            "CRONFLEET_WORKER_SESSION_TIMEOUT_MS": str(self.worker_session_timeout_ms),
            "CRONFLEET_RUN_TOPIC_REPLICATION": "1",
            "CRONFLEET_RUN_TOPIC_MIN_INSYNC": "1",
            # WARNING keeps 100 cycles' logs small; INFO adds each consumer's assignments
            "CRONFLEET_LOG_LEVEL": os.environ.get("CRONFLEET_CHAOS_LOG_LEVEL", "WARNING"),
        }


@dataclass
class DrillContext:
    """What a drill's cycles act through."""

    name: str
    stack: ChaosStack
    fleet: DrillFleet
    workload: Workload
    api: httpx.Client
    engine: Engine
    rng: random.Random
    out: Path
    ledger_dir: Path
    timings: Timings
    prefix: str
    group: str
    faults: list[FaultWindow] = field(default_factory=list)
    cycles: list[tuple[int, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)  # services that died on their own
    down: set[str] = field(default_factory=set)  # services the drill keeps down
    state: dict[str, Any] = field(default_factory=dict)  # a drill's own (namespace, skew)
    journal_dir: Path | None = None  # the workers' journals (a target's); None: out/journal
    _supervise: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    def sleep_until(self, at_ms: int) -> None:
        """In slices of a second: a signal sent to the process may wake another of its
        threads, and Python runs its handler (SIGTERM's: stop the drill) only when the
        main thread comes back; a soak's one long sleep between cycles (minutes) went on
        through a SIGTERM and a Ctrl-C."""
        while (left := (at_ms - self.now_ms()) / 1000) > 0:
            time.sleep(min(left, 1.0))

    @contextlib.contextmanager
    def fault(self, kind: str, target: str, cycle: int, once: bool = False) -> Iterator[None]:
        """Record the window between entering (the fault is in) and leaving (healed);
        `once`: no run may start twice in its cycle (chaos.records.FaultWindow)."""
        start = self.now_ms()
        try:
            yield
        finally:
            self.faults.append(FaultWindow(kind, target, cycle, start, self.now_ms(), once))

    def kill(self, name: str, with_tasks: bool = True) -> None:
        with self._lock:
            self.down.add(name)
            self.fleet.kill(name, with_tasks=with_tasks)

    def restart(self, name: str) -> None:
        with self._lock:
            self.fleet.restart(name)
            self.down.discard(name)

    def peak(self, ahead_s: float, size: int, pre_s: float = 0.0) -> datetime:
        """A burst of `size` one-off runs due at the next whole second `ahead_s` away."""
        at = at_second(datetime.now(UTC), ahead_s)
        self.workload.burst(at, size, pre_s)
        return at

    def scheduler_names(self) -> list[str]:
        return self.fleet.names("scheduler")

    def worker_names(self) -> list[str]:
        return self.fleet.names("worker")

    def worker_of_pid(self, pid: int) -> str | None:
        for name in self.worker_names():
            if self.fleet.alive(name) and self.fleet.pid(name) == pid:
                return name
        return None

    def tail(self, file: str) -> Tail:
        return Tail(self.ledger_dir / file)

    def partitions_held(self, node: str | None = None) -> int:
        return partitions_held(self.engine, node)

    def wait_partitions_covered(self, timeout_s: float = 60.0) -> None:
        wait_for(
            "every partition to have a live owner",
            lambda: self.partitions_held() >= self.timings.partitions,
            timeout_s,
            0.25,
        )

    # -- supervision: a service that dies on its own is restarted, like systemd would ---

    def supervise(self) -> None:
        self._supervise.set()
        threading.Thread(target=self._supervisor, name="supervisor", daemon=True).start()

    def stop_supervising(self) -> None:
        self._supervise.clear()

    def _supervisor(self) -> None:
        while self._supervise.is_set():
            time.sleep(0.5)
            with self._lock:
                for name in self.fleet.dead_unexpectedly():
                    if name in self.down or not self._supervise.is_set():
                        continue
                    code = self.fleet.running[name].proc.returncode
                    self.exits.append(f"{name} exited on its own (code {code}) at {self.now_ms()}")
                    self.fleet.restart(name)


class Drill:
    """One drill: its fleet, its workload and what a cycle does."""

    number: ClassVar[int]
    name: ClassVar[str]
    title: ClassVar[str]
    summary: ClassVar[str]
    schedulers: ClassVar[int] = 2
    workers: ClassVar[int] = 3
    concurrency: ClassVar[int] = 8
    warmup_s: ClassVar[float] = 4.0
    on_target: ClassVar[bool] = False  # runs against a deployment (--target): machines only

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=60)

    def setup(self, ctx: DrillContext) -> None:
        """Before the fleet starts: make what the fault needs (DrillSetupError if not)."""

    def scheduler_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        return ServiceSpec(name, "scheduler", args)

    def worker_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        return ServiceSpec(name, "worker", args)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        raise NotImplementedError

    def heal_all(self, ctx: DrillContext) -> None:
        """After the last cycle: nothing of the fault may remain."""

    def teardown(self, ctx: DrillContext) -> None:
        """Remove what setup made (always called)."""

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        """The same fault for the capacity model (sim/faults.py names) around a peak at
        `peak_s` of the simulated window; `measured`: the drill's mean fault duration
        (seconds) by fault kind, so the model is asked about the fault that happened."""
        return []


def partitions_held(engine: Engine, node: str | None = None) -> int:
    """Partitions with a live lease (of `node`, or of anyone)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM partition_leases WHERE expires_at > now() "
                    "AND owner IS NOT NULL AND (CAST(:n AS text) IS NULL OR owner = :n)"
                ),
                {"n": node},
            ).scalar_one()
        )
